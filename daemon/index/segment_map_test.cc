#include "daemon/index/segment_map.h"

#include <cstdint>

#include "absl/status/status.h"
#include "gtest/gtest.h"

namespace kvoffload::daemon {
namespace {

using Code = absl::StatusCode;

TEST(SegmentMapTest, APrivateMapIsOneOnlineSegmentWithNothingParked) {
  SegmentMap map({/*segment_rows=*/8, /*num_segments=*/1, /*member_floor_rows=*/0}, false);
  EXPECT_FALSE(map.pool());
  EXPECT_EQ(map.rows_parked(), 0);
  EXPECT_EQ(map.NotReadyOnlineRows(), 0);
  for (uint32_t row = 0; row < 8; ++row) {
    EXPECT_FALSE(map.OfflineRow(row));
    EXPECT_FALSE(map.ParkedRow(row));
  }
  EXPECT_FALSE(map.FloorActive());
  // A private index tracks no pins: its engine and index go together.
  map.Pin(0, 3);
  EXPECT_TRUE(map.pins(0).empty());
  EXPECT_EQ(map.BringOnline(0).code(), Code::kFailedPrecondition);
}

TEST(SegmentMapTest, APoolStartsOfflineAndItsRowsBecomeReadyBySegment) {
  SegmentMap map({4, 3, 0}, true);
  EXPECT_EQ(map.rows_parked(), 12);
  EXPECT_TRUE(map.OfflineRow(5));
  EXPECT_TRUE(map.Drained(1));
  EXPECT_EQ(map.BringOnline(3).code(), Code::kOutOfRange);
  ASSERT_TRUE(map.BringOnline(1).ok());
  EXPECT_EQ(map.BringOnline(1).code(), Code::kFailedPrecondition);  // online already
  EXPECT_FALSE(map.OfflineRow(5));
  EXPECT_TRUE(map.ParkedRow(5));  // online, not ready yet
  EXPECT_EQ(map.NotReadyOnlineRows(), 4);
  // Rows [0, 2) of segment 1 are rows 4 and 5.
  SegmentMap::RowRange ready = map.MarkReady(1, 2);
  EXPECT_EQ(ready.first, 4);
  EXPECT_EQ(ready.end, 6);
  EXPECT_EQ(map.rows_parked(), 10);
  EXPECT_EQ(map.parked(1), 2);
  EXPECT_FALSE(map.ParkedRow(5));
  EXPECT_TRUE(map.ParkedRow(6));
  // A lower or equal mark changes nothing; past the segment is clamped.
  ready = map.MarkReady(1, 1);
  EXPECT_EQ(ready.end - ready.first, 0);
  ready = map.MarkReady(1, 100);
  EXPECT_EQ(ready.first, 6);
  EXPECT_EQ(ready.end, 8);
  EXPECT_EQ(map.NotReadyOnlineRows(), 0);
  // An offline segment's rows never become ready.
  ready = map.MarkReady(2, 4);
  EXPECT_EQ(ready.end - ready.first, 0);
  EXPECT_EQ(map.rows_parked(), 8);
}

TEST(SegmentMapTest, ASegmentGoesOfflineAndDrainsAsItsRowsAreParked) {
  SegmentMap map({2, 2, 0}, true);
  ASSERT_TRUE(map.BringOnline(0).ok());
  map.MarkReady(0, 2);
  EXPECT_EQ(map.TakeOffline(2).code(), Code::kOutOfRange);
  ASSERT_TRUE(map.TakeOffline(0).ok());
  EXPECT_EQ(map.TakeOffline(0).code(), Code::kFailedPrecondition);
  EXPECT_FALSE(map.Drained(0));
  EXPECT_EQ(map.BringOnline(0).code(), Code::kFailedPrecondition);  // rows still in use
  map.Park(0);
  map.Park(1);
  EXPECT_TRUE(map.Drained(0));
  EXPECT_EQ(map.rows_parked(), 4);
  // A new member takes the slot with fresh counters; rows_held is state and stays.
  map.member(0).counts.hits = 7;
  map.member(0).counts.rows_held = 1;
  ASSERT_TRUE(map.BringOnline(0).ok());
  EXPECT_EQ(map.member(0).counts.hits, 0);
  EXPECT_EQ(map.member(0).counts.rows_held, 1);
}

TEST(SegmentMapTest, PinsAreForgottenFromTheMemberFirstThenFromAnyOther) {
  SegmentMap map({4, 2, 0}, true);
  map.Pin(0, 1);
  map.Pin(1, 2);
  map.Pin(1, 2);
  map.Unpin(0, 2);  // member 0 holds none on row 2: one of member 1's goes
  EXPECT_EQ(map.pins(1).at(2), 1);
  map.Unpin(1, 2);
  EXPECT_TRUE(map.pins(1).empty());
  SegmentMap::Pins taken = map.TakePins(0);
  EXPECT_EQ(taken.size(), 1);
  EXPECT_EQ(taken.at(1), 1);
  EXPECT_TRUE(map.pins(0).empty());
}

TEST(SegmentMapTest, TheFloorKeepsOtherOnlineMembersRowsButNeverTheCallersOwn) {
  SegmentMap map({8, 2, /*member_floor_rows=*/2}, true);
  ASSERT_TRUE(map.BringOnline(0).ok());
  ASSERT_TRUE(map.BringOnline(1).ok());
  ASSERT_TRUE(map.FloorActive());
  map.member(0).counts.rows_held = 3;
  map.member(0).evictable = 3;
  map.member(1).counts.rows_held = 2;
  map.member(1).evictable = 2;
  EXPECT_TRUE(map.MayEvict(0, 0));   // its own
  EXPECT_FALSE(map.MayEvict(0, 1));  // member 1 is at its floor
  EXPECT_TRUE(map.MayEvict(1, 0));   // member 0 is above it
  const uint64_t none[SegmentMap::kMaxMembers] = {};
  EXPECT_EQ(map.EvictableFor(0, none), 3);      // its 3, none of member 1's
  EXPECT_EQ(map.EvictableFor(1, none), 2 + 1);  // its 2 and one of member 0's
  uint64_t held_back[SegmentMap::kMaxMembers] = {1, 0};
  EXPECT_EQ(map.EvictableFor(0, held_back), 2);
  // An offline member's rows have no floor.
  ASSERT_TRUE(map.TakeOffline(1).ok());
  EXPECT_TRUE(map.MayEvict(0, 1));
  EXPECT_EQ(map.EvictableFor(0, none), 5);
}

}  // namespace
}  // namespace kvoffload::daemon
