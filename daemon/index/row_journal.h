// RowJournal: what a SlotIndex tells a durable record of its rows, so that a daemon
// started after a restart or a crash can rebuild the index from the rows that were READY.
//
// The index calls it with its own lock held, at exactly these transitions:
//   - OnFree(row):   a READY (idle) row loses its key (eviction, Reset). Called BEFORE the row can
//                    be handed to another key, so before any copy may write its bytes again. A row
//                    that is WRITING is never READY in the journal (it became WRITING from FREE or
//                    through OnFree), so failed or abandoned stores need no call.
//   - OnReady(row, key, ticket): the row became READY (its store job finished OK on this node and
//                    the scheduler committed it). Called after the bytes were written.
//   - OnTouch(row):  a READY row became the most recently used (LRU order).
//   - OnTicketsReserved(end): tickets below `end` (in issue order, modulo the ticket range) may
//                    be handed out from now on; a restored index starts issuing at `end`, so a
//                    stale row handle from before a restart never matches a row re-used since.
// READY ⇄ READING needs no call: loads do not change a row's bytes.
//
// Implementations must not block, fail or call back into the index: they write a few bytes of
// memory (daemon/restart/state_file.h). Thread-safety: the index serialises every call under its
// mutex; an implementation needs no lock of its own for them. Ownership: the index does not own
// its journal; the journal must outlive the index.
#ifndef KVOFFLOAD_DAEMON_INDEX_ROW_JOURNAL_H_
#define KVOFFLOAD_DAEMON_INDEX_ROW_JOURNAL_H_

#include <cstdint>
#include <string>

#include "absl/strings/string_view.h"

namespace kvoffload::daemon {

class RowJournal {
 public:
  virtual ~RowJournal() = default;
  virtual void OnFree(uint32_t row) = 0;
  virtual void OnReady(uint32_t row, absl::string_view key, uint32_t ticket) = 0;
  virtual void OnTouch(uint32_t row) = 0;
  virtual void OnTicketsReserved(uint32_t end) = 0;
};

// A READY row as a journal recorded it, for SlotIndex::Restore.
struct RestoredRow {
  uint32_t row = 0;
  std::string key;
  uint32_t ticket = 0;
  uint64_t seq = 0;  // recency: larger is more recently used
};

}  // namespace kvoffload::daemon

#endif  // KVOFFLOAD_DAEMON_INDEX_ROW_JOURNAL_H_
