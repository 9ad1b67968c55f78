// IndexCopies: the copy-path guards of a SlotIndex (slot_index.h), reached as index.copies(). The
// job engine checks and counts every copy against the index, so that a row with a copy in flight
// is never evicted, reset or handed to another key, and ends each store job here, which decides
// whether its rows become READY (slot_index.h "Row life cycle").
//
//   std::vector<RowRun> runs;   // a job's rows as runs (copy_run.h), with their tickets
//   RETURN_IF_ERROR(index.copies().Begin(CopyDirection::kStore, runs));   // before the copy
//   // ... copy GPU → rows; when the job has ended on this node (every copy really finished):
//   RETURN_IF_ERROR(index.copies().EndStore(runs, job_ok));
//   // a load: Begin(CopyDirection::kLoad, runs) ... End(runs)
//
// Rows are runs: a job's rows stay runs, O(rows) here and nothing allocated per row. Tests and
// tools with plain row lists use daemon/index/testing/row_lists.h.
//
// One store job per row: a store copy is refused on a row that already has a store copy in flight
// or was written, so a row's written bytes are those of exactly one job. Every call is
// all-or-nothing: on error nothing changed.
//
// Thread-safety: safe for concurrent use; every call takes the index's one mutex (the one every
// SlotIndex call takes) for its whole duration, and the state it lends is ABSL_PT_GUARDED_BY that
// mutex. Ownership: a view; the SlotIndex that made it owns the state and outlives it.
#ifndef KVOFFLOAD_DAEMON_INDEX_INDEX_COPIES_H_
#define KVOFFLOAD_DAEMON_INDEX_INDEX_COPIES_H_

#include <cstdint>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "daemon/copy/copy_run.h"  // CopyDirection, RowRun
#include "daemon/index/index_state.h"

namespace kvoffload::daemon {

class SlotIndexTestPeer;  // testonly: //daemon/index/testing:row_lists

class IndexCopies {
 public:
  // The SlotIndex's mutex and the state it guards.
  IndexCopies(absl::Mutex* mu, IndexState* state) : mu_(mu), state_(state) {}
  IndexCopies(const IndexCopies&) = delete;
  IndexCopies& operator=(const IndexCopies&) = delete;

  // Checks that every row may be copied in `direction` — kStore needs WRITING rows with no store
  // copy in flight and not written yet, kLoad READING rows (index_copies.cc StateAdmits, one case
  // per direction) — each holding its run's ticket (a 0 ticket is not checked).
  //   OUT_OF_RANGE         a row >= num_rows
  //   FAILED_PRECONDITION  a row is in another state, has a store in flight or done, or holds
  //                        another ticket (the message names row and state)
  absl::Status Check(CopyDirection direction, const std::vector<RowRun>& rows) const;

  // Check and, in the same critical section, one more copy in flight on every row (a row may
  // appear more than once). Call before the copy touches the region; every successful Begin must
  // be matched by End (or EndStore) with the same rows once the copy has really finished or is
  // known never to touch the region again — not when it timed out. Same errors as Check.
  absl::Status Begin(CopyDirection direction, const std::vector<RowRun>& rows);

  // A tier below the region (daemon/tier/tier_link.h) copies the row of `key` out: one more
  // copy in flight on its READY or READING row, which is not evicted, reset or parked until
  // End({run}) ends it (then it is the most recently used, as after a load). The row keeps its
  // key meanwhile; a store can never write it (it is not WRITING).
  //   INVALID_ARGUMENT     a key of invalid length
  //   NOT_FOUND            the key is not in the index
  //   FAILED_PRECONDITION  the key is WRITING (not readable yet)
  absl::StatusOr<RowRun> BeginSpill(absl::string_view key);

  // One copy fewer on every row (tickets are not looked at). A row whose count drops to 0
  // becomes allocatable again when it was quarantined, and evictable (most recently used) when it
  // is READY.
  //   OUT_OF_RANGE         a row >= num_rows
  //   FAILED_PRECONDITION  more End than Begin on a row (a bug in the caller)
  absl::Status End(const std::vector<RowRun>& rows);

  // The end of a store job on this node, in one critical section: End(rows), then, when `ok`,
  // every row still WRITING is written (and one whose commit was recorded becomes READY); when
  // not (a copy failed, a worker left, the job timed out), every row still WRITING is marked
  // failed: CompleteStore(success=true) of its key is refused with FAILED_PRECONDITION, so the
  // scheduler can never publish rows that were not fully written, and a row whose commit was
  // already recorded loses its key and is freed (quarantined while copies are in flight). Rows in
  // any other state are left alone (their store already ended); the mark is cleared when the row
  // leaves WRITING. No other call can see the rows between the two steps (a row freed in between
  // could be handed to another key). Same errors as End; on error nothing changed.
  absl::Status EndStore(const std::vector<RowRun>& rows, bool ok);

  // Drops the keys of rows whose commit was recorded before `cutoff` while no store job has
  // written them and none is in flight (the store was never submitted: a worker died, or an
  // engine committed keys it never stored). Their rows return to FREE. Returns how many.
  uint64_t DropStaleCommits(absl::Time cutoff);

 private:
  // The list form of a failed store without a copy's end, for tests (row_lists.h).
  friend class SlotIndexTestPeer;

  absl::Status CheckLocked(CopyDirection direction, const std::vector<RowRun>& rows) const
      ABSL_SHARED_LOCKS_REQUIRED(mu_);
  absl::Status EndLocked(const std::vector<RowRun>& rows) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void MarkStoreFailedLocked(const std::vector<RowRun>& rows) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Rows still WRITING with no copy in flight are written; committed ones become READY.
  void MarkStoreWrittenLocked(const std::vector<RowRun>& rows) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  absl::Mutex* const mu_;
  IndexState* const state_ ABSL_PT_GUARDED_BY(mu_);
};

}  // namespace kvoffload::daemon

#endif  // KVOFFLOAD_DAEMON_INDEX_INDEX_COPIES_H_
