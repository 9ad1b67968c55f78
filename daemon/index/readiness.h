// Readiness: the readiness watermark of a SlotIndex and the restored rows parked above it
// (slot_index.h "Readiness", serve while pinning). Rows below the watermark are usable (their
// region memory is populated and registered); a restored READY row above it waits here, out of
// the index, until the watermark passes it.
//
//   Readiness readiness(num_rows, ready_rows);
//   readiness.Park(RestoredRow{row, key, ticket, 0});   // Restore: a row not usable yet
//   readiness.SortParked();
//   Readiness::Raised raised = readiness.Raise(end);    // MarkRowsReady: rows [from, to) usable,
//   for (RestoredRow& row : raised.back) ...;           // these parked rows come back
//
// Thread-safety: none of its own; a plain value. SlotIndex holds it (in IndexState) ABSL_GUARDED_BY
// its mutex. Ownership: it owns the parked rows' keys until Raise hands them back.
#ifndef KVOFFLOAD_DAEMON_INDEX_READINESS_H_
#define KVOFFLOAD_DAEMON_INDEX_READINESS_H_

#include <cstddef>
#include <cstdint>
#include <vector>

#include "daemon/index/row_journal.h"

namespace kvoffload::daemon {

class Readiness {
 public:
  // Rows [0, min(ready_rows, num_rows)) are usable from the start.
  Readiness(uint32_t num_rows, uint64_t ready_rows);

  // The watermark: rows below it are usable.
  uint32_t end() const { return end_; }

  // A restored row at or above the watermark waits (call SortParked once all are parked).
  void Park(RestoredRow row) { parked_.push_back(std::move(row)); }
  void SortParked();
  // Whether `row` is parked and has not come back yet.
  bool IsParked(uint32_t row) const;
  size_t num_parked() const { return parked_.size() - next_; }

  struct Raised {
    uint32_t from = 0;              // the old watermark
    uint32_t to = 0;                // the new one (== from: nothing changed)
    std::vector<RestoredRow> back;  // the parked rows below `to`, ascending by row
  };
  // Moves the watermark up to min(end, num_rows) (a lower value changes nothing) and hands back
  // the parked rows it passed.
  Raised Raise(uint64_t end);

 private:
  const uint32_t num_rows_;
  uint32_t end_;
  // Ascending by row once sorted; [next_, size) have not come back yet.
  std::vector<RestoredRow> parked_;
  size_t next_ = 0;
};

}  // namespace kvoffload::daemon

#endif  // KVOFFLOAD_DAEMON_INDEX_READINESS_H_
