#include <algorithm>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/memory/memory.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/status_macros.h"
#include "daemon/index/slot_index.h"

// SlotIndex as a pool's index (issue 18; slot_index.h "Pools"): segments that go online and
// offline as members join and leave, and the per-member floor of the pool's LRU.

namespace kvoffload::daemon {

absl::StatusOr<std::unique_ptr<SlotIndex>> SlotIndex::CreatePool(const PoolShape& shape) {
  if (shape.segment_rows == 0 || shape.num_segments == 0 || shape.num_segments > kMaxMembers) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "SlotIndex pool: %d segments of %d rows; it takes 1..%d segments of at least one row",
        shape.num_segments, shape.segment_rows, kMaxMembers));
  }
  const uint64_t num_rows = uint64_t{shape.segment_rows} * shape.num_segments;
  RETURN_IF_ERROR(CheckNumRows(num_rows));
  auto index = absl::WrapUnique(
      new SlotIndex(static_cast<uint32_t>(num_rows), /*journal=*/nullptr,
                    /*ready_rows=*/num_rows, shape));
  absl::MutexLock lock(&index->mu_);
  // Every segment starts offline: its rows are parked until a member brings its region.
  index->free_head_ = kNil;
  index->rows_free_ = 0;
  for (Row& r : index->rows_) r.next = kNil;
  index->rows_[index->sentinel_].next = index->sentinel_;
  for (uint32_t s = 0; s < shape.num_segments; ++s) {
    index->segment_offline_[s] = true;
    index->segment_parked_[s] = shape.segment_rows;
    index->segment_ready_[s] = 0;
  }
  index->segments_offline_ = shape.num_segments;
  index->rows_offline_ = num_rows;
  index->pool_ = true;
  return index;
}

void SlotIndex::ForgetPin(uint32_t row, uint32_t member) {
  auto drop = [row](absl::flat_hash_map<uint32_t, uint32_t>& pins) {
    auto it = pins.find(row);
    if (it == pins.end()) return false;
    if (--it->second == 0) pins.erase(it);
    return true;
  };
  if (drop(member_pins_[member])) return;
  for (auto& pins : member_pins_) {
    if (drop(pins)) return;
  }
}

void SlotIndex::EndMemberWork(uint32_t member, SegmentDrain* drain) {
  // A pinned row is READING, never WRITING: the two loops touch different rows.
  absl::flat_hash_map<uint32_t, uint32_t> pins;
  pins.swap(member_pins_[member]);
  for (const auto& [row, count] : pins) {
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
  ++rows_offline_;
  ++segment_parked_[row / segment_rows_];
}

bool SlotIndex::MayEvict(uint32_t member, const Row& r) const {
  if (!FloorActive() || r.member == member || segment_offline_[r.member]) return true;
  return members_[r.member].counts.rows_held > member_floor_rows_;
}

uint64_t SlotIndex::EvictableFor(uint32_t member, const uint64_t* held_back) const {
  uint64_t total = 0;
  for (uint32_t m = 0; m < num_segments_; ++m) {
    const MemberState& s = members_[m];
    const uint64_t candidates = s.evictable - held_back[m];
    if (m == member || segment_offline_[m]) {
      total += candidates;
    } else if (s.counts.rows_held > member_floor_rows_) {
      total += std::min(candidates, s.counts.rows_held - member_floor_rows_);
    }
  }
  return total;
}

absl::Status SlotIndex::BringSegmentOnline(uint32_t segment, uint64_t ready_rows) {
  absl::MutexLock lock(&mu_);
  if (segment >= num_segments_) {
    return absl::OutOfRangeError(
        absl::StrCat("segment ", segment, " is past the pool's ", num_segments_, " segments"));
  }
  if (!segment_offline_[segment]) {
    return absl::FailedPreconditionError(absl::StrCat("segment ", segment, " is online already"));
  }
  if (segment_parked_[segment] != segment_rows_) {
    return absl::FailedPreconditionError(
        absl::StrCat("segment ", segment, " still has ", segment_rows_ - segment_parked_[segment],
                     " rows in use by its previous member"));
  }
  segment_offline_[segment] = false;
  --segments_offline_;
  segment_ready_[segment] = 0;
  MarkSegmentReadyLocked(segment, ready_rows);
  // A new member takes the slot: its cumulative counters start at 0 (rows_held is state).
  const uint64_t held = members_[segment].counts.rows_held;
  members_[segment].counts = MemberCounts{};
  members_[segment].counts.rows_held = held;
  return absl::OkStatus();
}

absl::StatusOr<SlotIndex::SegmentDrain> SlotIndex::TakeSegmentOffline(uint32_t segment) {
  absl::MutexLock lock(&mu_);
  if (segment >= num_segments_) {
    return absl::OutOfRangeError(
        absl::StrCat("segment ", segment, " is past the pool's ", num_segments_, " segments"));
  }
  if (segment_offline_[segment]) {
    return absl::FailedPreconditionError(absl::StrCat("segment ", segment, " is offline already"));
  }
  segment_offline_[segment] = true;
  ++segments_offline_;
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
  drain.rows_pending = segment_rows_ - segment_parked_[segment];
  return drain;
}

void SlotIndex::MarkSegmentReadyLocked(uint32_t segment, uint64_t ready_rows) {
  const uint32_t end = static_cast<uint32_t>(std::min<uint64_t>(ready_rows, segment_rows_));
  const uint32_t begin = segment_ready_[segment];
  if (segment_offline_[segment] || end <= begin) return;
  segment_ready_[segment] = end;
  segment_parked_[segment] -= end - begin;
  rows_offline_ -= end - begin;
  // Ascending order, as a new index hands rows out.
  const uint32_t first = segment * segment_rows_;
  for (uint32_t r = first + end; r-- > first + begin;) FreePush(r);
}

void SlotIndex::MarkSegmentRowsReady(uint32_t segment, uint64_t ready_rows) {
  absl::MutexLock lock(&mu_);
  if (segment < num_segments_) MarkSegmentReadyLocked(segment, ready_rows);
}

bool SlotIndex::SegmentDrained(uint32_t segment) const {
  absl::ReaderMutexLock lock(&mu_);
  return segment < num_segments_ && segment_offline_[segment] &&
         segment_parked_[segment] == segment_rows_;
}

SlotIndex::MemberCounts SlotIndex::member_counts(uint32_t member) const {
  absl::ReaderMutexLock lock(&mu_);
  return member < kMaxMembers ? members_[member].counts : MemberCounts{};
}

}  // namespace kvoffload::daemon
