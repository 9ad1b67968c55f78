#include "daemon/index/segment_map.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace kvoffload::daemon {

SegmentMap::SegmentMap(const Shape& shape, bool pool) : shape_(shape), pool_(pool) {
  if (!pool) {
    ready_[0] = shape.segment_rows;  // a private index: its one segment is online
    return;
  }
  for (uint32_t s = 0; s < shape.num_segments; ++s) {
    offline_[s] = true;
    parked_[s] = shape.segment_rows;
  }
  segments_offline_ = shape.num_segments;
  rows_parked_ = uint64_t{shape.segment_rows} * shape.num_segments;
}

uint64_t SegmentMap::NotReadyOnlineRows() const {
  uint64_t rows = 0;
  for (uint32_t s = 0; pool_ && s < shape_.num_segments; ++s) {
    if (!offline_[s]) rows += shape_.segment_rows - ready_[s];
  }
  return rows;
}

absl::Status SegmentMap::BringOnline(uint32_t segment) {
  if (segment >= shape_.num_segments) {
    return absl::OutOfRangeError(absl::StrCat("segment ", segment, " is past the pool's ",
                                              shape_.num_segments, " segments"));
  }
  if (!offline_[segment]) {
    return absl::FailedPreconditionError(absl::StrCat("segment ", segment, " is online already"));
  }
  if (parked_[segment] != shape_.segment_rows) {
    return absl::FailedPreconditionError(
        absl::StrCat("segment ", segment, " still has ", shape_.segment_rows - parked_[segment],
                     " rows in use by its previous member"));
  }
  offline_[segment] = false;
  --segments_offline_;
  ready_[segment] = 0;
  // A new member takes the slot: its cumulative counters start at 0 (rows_held is state).
  const uint64_t held = members_[segment].counts.rows_held;
  members_[segment].counts = MemberCounts{};
  members_[segment].counts.rows_held = held;
  return absl::OkStatus();
}

absl::Status SegmentMap::TakeOffline(uint32_t segment) {
  if (segment >= shape_.num_segments) {
    return absl::OutOfRangeError(absl::StrCat("segment ", segment, " is past the pool's ",
                                              shape_.num_segments, " segments"));
  }
  if (offline_[segment]) {
    return absl::FailedPreconditionError(absl::StrCat("segment ", segment, " is offline already"));
  }
  offline_[segment] = true;
  ++segments_offline_;
  return absl::OkStatus();
}

SegmentMap::RowRange SegmentMap::MarkReady(uint32_t segment, uint64_t ready_rows) {
  const uint32_t end = static_cast<uint32_t>(std::min<uint64_t>(ready_rows, shape_.segment_rows));
  const uint32_t begin = ready_[segment];
  if (offline_[segment] || end <= begin) return {};
  ready_[segment] = end;
  parked_[segment] -= end - begin;
  rows_parked_ -= end - begin;
  const uint32_t first = segment * shape_.segment_rows;
  return {first + begin, first + end};
}

bool SegmentMap::Drained(uint32_t segment) const {
  return segment < shape_.num_segments && offline_[segment] &&
         parked_[segment] == shape_.segment_rows;
}

void SegmentMap::Unpin(uint32_t member, uint32_t row) {
  auto drop = [row](Pins& pins) {
    auto it = pins.find(row);
    if (it == pins.end()) return false;
    if (--it->second == 0) pins.erase(it);
    return true;
  };
  if (drop(pins_[member])) return;
  for (Pins& pins : pins_) {
    if (drop(pins)) return;
  }
}

SegmentMap::Pins SegmentMap::TakePins(uint32_t member) {
  Pins pins;
  pins.swap(pins_[member]);
  return pins;
}

bool SegmentMap::MayEvict(uint32_t member, uint32_t owner) const {
  if (!FloorActive() || owner == member || offline_[owner]) return true;
  return members_[owner].counts.rows_held > shape_.member_floor_rows;
}

uint64_t SegmentMap::EvictableFor(uint32_t member, const uint64_t* held_back) const {
  uint64_t total = 0;
  for (uint32_t m = 0; m < shape_.num_segments; ++m) {
    const Member& s = members_[m];
    const uint64_t candidates = s.evictable - held_back[m];
    if (m == member || offline_[m]) {
      total += candidates;
    } else if (s.counts.rows_held > shape_.member_floor_rows) {
      total += std::min(candidates, s.counts.rows_held - shape_.member_floor_rows);
    }
  }
  return total;
}

}  // namespace kvoffload::daemon
