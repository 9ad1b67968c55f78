#include <algorithm>
#include <utility>

#include "absl/memory/memory.h"
#include "absl/strings/str_format.h"
#include "common/status_macros.h"
#include "daemon/index/slot_index.h"

// SlotIndex as a pool's index (slot_index.h "Pools"): the rows of segments that go
// online and offline as members join and leave. Which segment is where, the members' counters and
// pins and the floor rule are SegmentMap's (segment_map.h); this file moves the rows.

namespace kvoffload::daemon {

absl::StatusOr<std::unique_ptr<SlotIndex>> SlotIndex::CreatePool(const PoolShape& shape) {
  if (shape.segment_rows == 0 || shape.num_segments == 0 || shape.num_segments > kMaxMembers) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "SlotIndex pool: %d segments of %d rows; it takes 1..%d segments of at least one row",
        shape.num_segments, shape.segment_rows, kMaxMembers));
  }
  const uint64_t num_rows = uint64_t{shape.segment_rows} * shape.num_segments;
  RETURN_IF_ERROR(CheckNumRows(num_rows));
  auto index = absl::WrapUnique(new SlotIndex(static_cast<uint32_t>(num_rows),
                                              /*journal=*/nullptr,
                                              /*ready_rows=*/num_rows, shape, /*pool=*/true));
  absl::MutexLock lock(&index->mu_);
  // Every segment starts offline (SegmentMap counts its rows parked) until a member brings its
  // region: no row is on a list.
  index->free_head_ = kNil;
  index->rows_free_ = 0;
  for (Row& r : index->rows_) r.next = kNil;
  index->rows_[index->sentinel_].next = index->sentinel_;
  return index;
}

void SlotIndex::EndMemberWork(uint32_t member, SegmentDrain* drain) {
  // A pinned row is READING, never WRITING: the two loops touch different rows.
  for (const auto& [row, count] : segments_.TakePins(member)) {
    for (uint32_t i = 0; i < count; ++i) DropReader(row);
    drain->pins_dropped += count;
  }
  for (uint32_t row = 0; row < num_rows_; ++row) {
    const Row& r = rows_[row];
    if (r.state != RowState::kWriting || r.member != member) continue;
    if (r.committed && r.copies > 0) continue;  // its store job in flight ends it
    DropWritingKey(row);
    ++drain->stores_ended;
  }
}

void SlotIndex::Park(uint32_t row) {
  rows_[row].next = kNil;
  segments_.Park(row);
}

absl::Status SlotIndex::BringSegmentOnline(uint32_t segment, uint64_t ready_rows) {
  absl::MutexLock lock(&mu_);
  RETURN_IF_ERROR(segments_.BringOnline(segment));
  MarkSegmentReadyLocked(segment, ready_rows);
  return absl::OkStatus();
}

absl::StatusOr<SlotIndex::SegmentDrain> SlotIndex::TakeSegmentOffline(uint32_t segment) {
  absl::MutexLock lock(&mu_);
  RETURN_IF_ERROR(segments_.TakeOffline(segment));
  SegmentDrain drain;
  EndMemberWork(segment, &drain);
  const uint32_t first = segment * segment_rows_;
  const uint32_t end = first + segment_rows_;
  // Its free rows leave the free list (one walk of the list).
  for (uint32_t* link = &free_head_; *link != kNil;) {
    const uint32_t row = *link;
    if (row >= first && row < end) {
      *link = rows_[row].next;
      --rows_free_;
      Park(row);
    } else {
      link = &rows_[row].next;
    }
  }
  for (uint32_t row = first; row < end; ++row) {
    Row& r = rows_[row];
    if (r.state != RowState::kReady || r.copies != 0) continue;  // in use: parked when idle
    LruUnlink(row);
    DropReadyKey(row);
    ReleaseKey(r);
    Park(row);
    ++drain.keys_dropped;
  }
  drain.rows_pending = segment_rows_ - segments_.parked(segment);
  return drain;
}

void SlotIndex::MarkSegmentReadyLocked(uint32_t segment, uint64_t ready_rows) {
  const SegmentMap::RowRange ready = segments_.MarkReady(segment, ready_rows);
  // Ascending order, as a new index hands rows out.
  for (uint32_t r = ready.end; r-- > ready.first;) FreePush(r);
}

void SlotIndex::MarkSegmentRowsReady(uint32_t segment, uint64_t ready_rows) {
  absl::MutexLock lock(&mu_);
  if (segment < num_segments_) MarkSegmentReadyLocked(segment, ready_rows);
}

bool SlotIndex::SegmentDrained(uint32_t segment) const {
  absl::ReaderMutexLock lock(&mu_);
  return segments_.Drained(segment);
}

SlotIndex::MemberCounts SlotIndex::member_counts(uint32_t member) const {
  absl::ReaderMutexLock lock(&mu_);
  return member < kMaxMembers ? segments_.member(member).counts : MemberCounts{};
}

}  // namespace kvoffload::daemon
