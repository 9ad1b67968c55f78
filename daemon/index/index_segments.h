// IndexSegments: a pool's segment calls on its SlotIndex (slot_index.h "Pools"), reached as
// index.segments(). A pool index's rows are `num_segments` segments of `segment_rows` rows, one
// per member's region; a segment comes online when its member joins (its rows become FREE as the
// region is pinned) and goes offline when it leaves (its rows are parked as they become idle).
// Which segment is where, the members' counters and pins and the floor are SegmentMap's
// (segment_map.h); this view moves the rows.
//
//   ASSIGN_OR_RETURN(std::unique_ptr<SlotIndex> index, SlotIndex::CreatePool(shape));
//   RETURN_IF_ERROR(index->segments().BringOnline(member, ready_rows));
//   index->segments().MarkRowsReady(member, more_rows);        // as the region is pinned
//   ASSIGN_OR_RETURN(SegmentMap::Drain drain, index->segments().TakeOffline(member));
//   if (index->segments().Drained(member)) ...                 // no copy touches it any more
//
// Thread-safety: safe for concurrent use; every call takes the index's one mutex (the one every
// SlotIndex call takes) for its whole duration, and the state it lends is ABSL_PT_GUARDED_BY that
// mutex. Ownership: a view; the SlotIndex that made it owns the state and outlives it.
#ifndef KVOFFLOAD_DAEMON_INDEX_INDEX_SEGMENTS_H_
#define KVOFFLOAD_DAEMON_INDEX_INDEX_SEGMENTS_H_

#include <cstdint>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "daemon/index/index_state.h"
#include "daemon/index/segment_map.h"

namespace kvoffload::daemon {

class IndexSegments {
 public:
  // The SlotIndex's mutex, the state it guards and the pool's shape (fixed for the index's life).
  IndexSegments(absl::Mutex* mu, IndexState* state, const SegmentMap::Shape& shape)
      : mu_(mu),
        state_(state),
        segment_rows_(shape.segment_rows),
        num_segments_(shape.num_segments) {}
  IndexSegments(const IndexSegments&) = delete;
  IndexSegments& operator=(const IndexSegments&) = delete;

  uint32_t segment_rows() const { return segment_rows_; }  // a private index: num_rows
  uint32_t num_segments() const { return num_segments_; }  // a private index: 1

  // Makes an offline, fully parked segment online, its first `ready_rows` rows FREE and
  // allocatable (the rest wait for MarkRowsReady: the member's region is still being pinned,
  // slot_index.h "Readiness"); resets the member's cumulative counters (a new member takes the
  // slot). OUT_OF_RANGE for a segment past the shape, FAILED_PRECONDITION when it is online or
  // still has rows in use.
  absl::Status BringOnline(uint32_t segment, uint64_t ready_rows = UINT64_MAX);
  // An online segment's rows [0, ready_rows) are usable from now on (a lower value, or an
  // offline segment, changes nothing).
  void MarkRowsReady(uint32_t segment, uint64_t ready_rows);
  // Takes an online segment offline and ends what its member (the tag equal to the segment) left
  // unfinished, wherever in the pool: its WRITING keys as CompleteStore(false) would (a row
  // quarantined while a copy is in flight) — except a committed key whose store job is in flight,
  // which that job ends (READY, or dropped when it fails) — and its PrepareLoad pins as
  // CompleteLoad would. Nobody else will end them, and until they end no segment they touch can
  // drain. Its idle READY keys are dropped at once; its rows still in use are parked as each
  // becomes idle. OUT_OF_RANGE / FAILED_PRECONDITION (already offline). O(num_rows + free rows).
  absl::StatusOr<SegmentMap::Drain> TakeOffline(uint32_t segment);
  // True when every row of an offline segment is parked: no copy can touch its memory again.
  bool Drained(uint32_t segment) const;
  // A member's counters (zeros for a tag out of range).
  SegmentMap::MemberCounts member_counts(uint32_t member) const;

 private:
  // Segment `segment`'s rows [0, ready_rows) go to the free list (SegmentMap::MarkReady).
  void MarkReadyLocked(uint32_t segment, uint64_t ready_rows) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Ends `member`'s prepared stores and pins (TakeOffline).
  void EndMemberWork(uint32_t member, SegmentMap::Drain* drain) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  absl::Mutex* const mu_;
  IndexState* const state_ ABSL_PT_GUARDED_BY(mu_);
  const uint32_t segment_rows_;
  const uint32_t num_segments_;
};

}  // namespace kvoffload::daemon

#endif  // KVOFFLOAD_DAEMON_INDEX_INDEX_SEGMENTS_H_
