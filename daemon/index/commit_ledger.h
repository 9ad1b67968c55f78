// CommitLedger: the commits a SlotIndex recorded before their store job finished (slot_index.h
// "Row life cycle": vLLM may commit a key before any worker submitted its store). Each recorded
// row keeps the time of its commit, so that DropStaleCommits can drop the keys whose store never
// came; the ledger also counts the recorded commits dropped (their store failed or never came).
//
//   CommitLedger commits;
//   commits.Record(row, now);     // CompleteStore(true) before the store job ended
//   commits.Forget(row);          // the row became READY or lost its key
//   for (uint32_t row : commits.RecordedBefore(cutoff)) ...;  // DropStaleCommits' candidates
//
// Thread-safety: none of its own; a plain value. SlotIndex holds it (in IndexState) ABSL_GUARDED_BY
// its mutex. Ownership: rows are numbers; it owns nothing else.
#ifndef KVOFFLOAD_DAEMON_INDEX_COMMIT_LEDGER_H_
#define KVOFFLOAD_DAEMON_INDEX_COMMIT_LEDGER_H_

#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/time/time.h"

namespace kvoffload::daemon {

class CommitLedger {
 public:
  // Records `row`'s commit at `when`; a row recorded already keeps its first time.
  void Record(uint32_t row, absl::Time when) { since_.emplace(row, when); }
  // The row's commit is no longer pending (it became READY, or its key was dropped).
  void Forget(uint32_t row) { since_.erase(row); }
  bool Contains(uint32_t row) const { return since_.contains(row); }
  // Commits recorded and pending now.
  size_t pending() const { return since_.size(); }
  // The rows recorded before `cutoff`, in no particular order.
  std::vector<uint32_t> RecordedBefore(absl::Time cutoff) const;

  // Recorded commits dropped so far (cumulative).
  void CountDropped(uint64_t n) { dropped_ += n; }
  uint64_t dropped() const { return dropped_; }

 private:
  absl::flat_hash_map<uint32_t, absl::Time> since_;  // row → time of its commit
  uint64_t dropped_ = 0;
};

}  // namespace kvoffload::daemon

#endif  // KVOFFLOAD_DAEMON_INDEX_COMMIT_LEDGER_H_
