#include "daemon/index/index_segments.h"

#include "common/status_macros.h"

namespace kvoffload::daemon {

absl::Status IndexSegments::BringOnline(uint32_t segment, uint64_t ready_rows) {
  absl::MutexLock lock(mu_);
  RETURN_IF_ERROR(state_->segments.BringOnline(segment));
  MarkReadyLocked(segment, ready_rows);
  return absl::OkStatus();
}

void IndexSegments::MarkRowsReady(uint32_t segment, uint64_t ready_rows) {
  absl::MutexLock lock(mu_);
  if (segment < num_segments_) MarkReadyLocked(segment, ready_rows);
}

void IndexSegments::MarkReadyLocked(uint32_t segment, uint64_t ready_rows) {
  const SegmentMap::RowRange ready = state_->segments.MarkReady(segment, ready_rows);
  // Ascending order, as a new index hands rows out.
  for (uint32_t r = ready.end; r-- > ready.first;) state_->Free(r);
}

absl::StatusOr<SegmentMap::Drain> IndexSegments::TakeOffline(uint32_t segment) {
  absl::MutexLock lock(mu_);
  RETURN_IF_ERROR(state_->segments.TakeOffline(segment));
  SegmentMap::Drain drain;
  EndMemberWork(segment, &drain);
  const uint32_t first = segment * segment_rows_;
  const uint32_t end = first + segment_rows_;
  // Its free rows leave the free list (one walk of the list).
  for (uint32_t row : state_->rows.TakeFreeRows(first, end)) state_->Park(row);
  for (uint32_t row = first; row < end; ++row) {
    const RowTable::Row& r = state_->rows[row];
    if (r.state != RowState::kReady || r.copies != 0) continue;  // in use: parked when idle
    state_->Unlink(row);
    state_->DropReadyKey(row);
    state_->rows.ReleaseKey(row);
    state_->Park(row);
    ++drain.keys_dropped;
  }
  drain.rows_pending = segment_rows_ - state_->segments.parked(segment);
  return drain;
}

void IndexSegments::EndMemberWork(uint32_t member, SegmentMap::Drain* drain) {
  // A pinned row is READING, never WRITING: the two loops touch different rows.
  for (const auto& [row, count] : state_->segments.TakePins(member)) {
    for (uint32_t i = 0; i < count; ++i) state_->DropReader(row);
    drain->pins_dropped += count;
  }
  const uint32_t num_rows = state_->rows.num_rows();
  for (uint32_t row = 0; row < num_rows; ++row) {
    const RowTable::Row& r = state_->rows[row];
    if (r.state != RowState::kWriting || r.member != member) continue;
    if (r.committed && r.copies > 0) continue;  // its store job in flight ends it
    state_->DropWritingKey(row);
    ++drain->stores_ended;
  }
}

bool IndexSegments::Drained(uint32_t segment) const {
  absl::ReaderMutexLock lock(mu_);
  return state_->segments.Drained(segment);
}

SegmentMap::MemberCounts IndexSegments::member_counts(uint32_t member) const {
  absl::ReaderMutexLock lock(mu_);
  return member < SegmentMap::kMaxMembers ? state_->segments.member(member).counts
                                          : SegmentMap::MemberCounts{};
}

}  // namespace kvoffload::daemon
