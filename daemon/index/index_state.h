// IndexState: everything a SlotIndex (slot_index.h) knows, as one plain value under the index's
// mutex — its parts, and the row transitions that keep them consistent with each other.
//
// The parts, each a plain value in its own file with its own test:
//   RowTable     (row_table.h)      rows, key bytes, the free and LRU lists, rows by state;
//   KeyTable     (key_table.h)      key → row;
//   SegmentMap   (segment_map.h)    a pool's segments, members' counters and pins, the floor;
//   TicketBook   (ticket_book.h)    store tickets, reserved from the journal in chunks;
//   CommitLedger (commit_ledger.h)  commits recorded before their store job finished;
//   Readiness    (readiness.h)      the readiness watermark and the restored rows parked above it;
//   RequestKeys  (request_keys.h)   the keys of the request being served, resolved to rows.
// A transition below changes several of them at once (a row that goes READY is counted, listed,
// journaled and tagged to its member together); the scheduler operations (SlotIndex), the copy
// guards (IndexCopies) and the pool calls (IndexSegments) are written against these, so that the
// life cycle in slot_index.h has one implementation.
//
//   IndexState state(num_rows, journal, ready_rows, shape, /*pool=*/false);
//   const uint32_t row = state.TakeRow(member, &cursor, &evicted_keys);   // FREE or evicted
//   ... the row is WRITING; its store job and commit end, then:
//   std::vector<uint32_t> ready = {row};
//   state.MakeReady(ready);                                               // READY, most recent
//
// Thread-safety: none of its own; a plain value. SlotIndex holds it ABSL_GUARDED_BY its mutex and
// lends it to its views (IndexCopies, IndexSegments) under that same mutex, so clang's
// -Wthread-safety proves every use holds the lock. Ownership: it owns its parts; the journal is
// not owned (the index owns it and outlives its state).
#ifndef KVOFFLOAD_DAEMON_INDEX_INDEX_STATE_H_
#define KVOFFLOAD_DAEMON_INDEX_INDEX_STATE_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "daemon/index/commit_ledger.h"
#include "daemon/index/key_table.h"
#include "daemon/index/readiness.h"
#include "daemon/index/request_keys.h"
#include "daemon/index/row_journal.h"
#include "daemon/index/row_table.h"
#include "daemon/index/segment_map.h"
#include "daemon/index/ticket_book.h"

namespace kvoffload::daemon {

class IndexState {
 public:
  static constexpr uint32_t kNil = RowTable::kNil;

  // `num_rows` rows. A private index (pool false) lists its rows below `ready_rows` as FREE; a
  // pool's segments start offline, every row parked (IndexSegments brings them online).
  IndexState(uint32_t num_rows, RowJournal* journal, uint64_t ready_rows,
             const SegmentMap::Shape& shape, bool pool);
  IndexState(const IndexState&) = delete;
  IndexState& operator=(const IndexState&) = delete;

  // ---- The parts (used directly; the transitions below keep them consistent). ----
  RowTable rows;
  KeyTable keys;
  SegmentMap segments;
  TicketBook tickets;
  CommitLedger commits;
  Readiness readiness;
  RowJournal* const journal;  // may be null
  // Hears each key that becomes READY, after the journal (SlotIndex::SetReadyListener); may be
  // empty.
  std::function<void(absl::string_view key)> ready_listener;
  // Lookup's and PrepareStore's tallies (cumulative, per key).
  uint64_t hits = 0;
  uint64_t hits_pending = 0;
  uint64_t misses = 0;
  uint64_t evictions = 0;
  uint32_t store_seq = 0;  // next PrepareStore sequence number (wraps)
  // The keys of the request being served (scratch kept across requests).
  RequestKeys request;
  // Scratch for the copy guards: rows whose last copy ended.
  std::vector<uint32_t> ended_rows;

  // ---- Lists. ----
  // The LRU link, with the member's evictable count.
  void Unlink(uint32_t row);
  void LinkAfter(uint32_t row, uint32_t after);
  // An idle READY row becomes the most recently used (the journal hears OnTouch) — or, in an
  // offline segment, loses its key and is parked.
  void MakeMostRecent(uint32_t row);
  // A FREE, idle row goes to the free list — or, in an offline segment, is parked.
  void Free(uint32_t row);
  // A row with no key: free when idle, quarantined while copies are in flight.
  void FreeOrQuarantine(uint32_t row);
  // A FREE, idle row goes to no list (an offline or not yet ready segment's).
  void Park(uint32_t row);

  // ---- Row transitions (slot_index.h "Row life cycle"). ----
  // A FREE row for a new key of `member`: the free list's first, else the least recent row at or
  // after `*cursor` on the LRU list that is not marked and that `member` may evict (its key is
  // dropped and appended to `evicted`). The caller counted that one exists.
  uint32_t TakeRow(uint32_t member, uint32_t* cursor, std::vector<std::string>* evicted);
  // FREE → WRITING: `row` (from TakeRow) holds `key` for `member`'s store of `ticket`.
  void AssignKey(uint32_t row, absl::string_view key, uint32_t ticket, uint32_t member);
  // READY or READING → READING: one more reader, pinned by `member`.
  void AddReader(uint32_t row, uint32_t member);
  // CompleteStore(success=true) of WRITING `rows`: a written row becomes READY now, any other
  // has its commit recorded at `now` (READY once its store job finishes OK).
  void Commit(const std::vector<uint32_t>& rows, absl::Time now);
  // WRITING → READY for `rows` (each WRITING), most recent last in PrepareStore order; reorders
  // `rows`.
  void MakeReady(std::vector<uint32_t>& rows);
  // Drops the key of READY, idle `row` (unlinked from the LRU list by the caller) from the key
  // table; the row keeps the key bytes for SetKey or ReleaseKey and is left FREE on no list.
  void DropReadyKey(uint32_t row);
  // Removes a WRITING row's key and frees (or quarantines) the row; returns the key.
  std::string DropWritingKey(uint32_t row);
  // One reader fewer on READING `row`; READY again (or parked) when it was the last.
  void DropReader(uint32_t row);

  // ---- Readiness and restore. ----
  // The readiness watermark moves up to `end`; parked rows it passes come back READY at the
  // least recent end (unless their key was stored again). Returns how many came back.
  uint64_t RaiseReadiness(uint64_t end);
  struct Adopted {
    uint64_t restored = 0;
    uint64_t dropped = 0;
  };
  // A new private state takes `rows` as READY rows (SlotIndex::Restore).
  Adopted AdoptRestored(std::vector<RestoredRow> rows);

  // ---- Introspection. ----
  // Rows not ready yet: the readiness watermark's, and a pool's online segments' not pinned yet.
  uint64_t NotReadyRows() const;
  // Upper bound of the row table and key table a state of `num_rows` rows allocates when it is
  // built and keeps, without keys longer than kInlineKeyBytes; saturating.
  static uint64_t MetadataBytesFor(uint64_t num_rows);
  // Bytes of metadata held now (rows, key table, key bytes).
  uint64_t MemoryBytes() const { return rows.MemoryBytes() + keys.MemoryBytes(); }

 private:
  // FREE → READY without a store: a restored row takes `key` and `ticket` (the caller lists it
  // and counts it).
  void AdoptKey(uint32_t row, absl::string_view key, uint32_t ticket);
};

}  // namespace kvoffload::daemon

#endif  // KVOFFLOAD_DAEMON_INDEX_INDEX_STATE_H_
