// SlotIndex as a pool's index: segments online/offline, cross-member hits and loads,
// states across members, and the per-member floor of the pool's LRU.
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "daemon/index/slot_index.h"
#include "daemon/index/testing/row_lists.h"
#include "daemon/index/testing/slot_index_invariants.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace kvoffload::daemon {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;
using KS = SlotIndex::KeyState;

std::string K(int i) {
  return std::string(32, static_cast<char>('a' + i % 26)) + std::to_string(i);
}

std::vector<std::string> Keys(int first, int count) {
  std::vector<std::string> keys;
  for (int i = first; i < first + count; ++i) keys.push_back(K(i));
  return keys;
}

std::unique_ptr<SlotIndex> Pool(uint32_t segment_rows, uint32_t segments, uint64_t floor = 0) {
  auto index = SlotIndex::CreatePool({segment_rows, segments, floor});
  EXPECT_TRUE(index.ok()) << index.status();
  return std::move(*index);
}

// Stores `keys` for `member` to READY (prepare, copy, commit).
std::vector<uint64_t> StoreReady(SlotIndex& index, const std::vector<std::string>& keys,
                                 uint32_t member) {
  auto store = index.PrepareStore(keys, member);
  EXPECT_TRUE(store.ok()) << store.status();
  if (!store.ok()) return {};
  EXPECT_TRUE(BeginCopy(index, CopyDirection::kStore, store->rows).ok());
  EXPECT_TRUE(EndStoreCopy(index, store->rows, true).ok());
  EXPECT_TRUE(index.CompleteStore(store->keys, true).ok());
  return store->rows;
}

TEST(SlotIndexPoolTest, RejectsBadShapes) {
  EXPECT_EQ(SlotIndex::CreatePool({0, 2}).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(SlotIndex::CreatePool({4, 0}).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(SlotIndex::CreatePool({4, SlotIndex::kMaxMembers + 1}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(SlotIndex::CreatePool({uint32_t{1} << 31, 4}).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(SlotIndexPoolTest, SegmentsStartOfflineAndJoinWithTheirRows) {
  auto index = Pool(4, 3);
  EXPECT_EQ(index->num_rows(), 12u);
  EXPECT_EQ(index->counts().rows_offline, 12u);
  EXPECT_EQ(index->counts().rows_free, 0u);
  EXPECT_EQ(index->PrepareStore(Keys(0, 1), 0).status().code(),
            absl::StatusCode::kResourceExhausted);
  ASSERT_TRUE(index->segments().BringOnline(1).ok());
  EXPECT_EQ(index->segments().BringOnline(1).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(index->segments().BringOnline(3).code(), absl::StatusCode::kOutOfRange);
  EXPECT_EQ(index->counts().rows_free, 4u);
  EXPECT_EQ(index->counts().rows_offline, 8u);
  auto store = index->PrepareStore(Keys(0, 4), 1);
  ASSERT_TRUE(store.ok()) << store.status();
  EXPECT_THAT(store->rows, ElementsAre(4, 5, 6, 7));  // only segment 1's rows
  EXPECT_EQ(index->PrepareStore(Keys(4, 1), 1).status().code(),
            absl::StatusCode::kResourceExhausted);
  EXPECT_TRUE(CheckSlotIndexInvariants(*index).ok()) << CheckSlotIndexInvariants(*index);
}

TEST(SlotIndexPoolTest, AKeyOneMemberStoredIsAHitAndALoadForAnother) {
  auto index = Pool(4, 2);
  ASSERT_TRUE(index->segments().BringOnline(0).ok());
  ASSERT_TRUE(index->segments().BringOnline(1).ok());
  const std::vector<uint64_t> rows = StoreReady(*index, Keys(0, 2), /*member=*/0);
  EXPECT_THAT(index->Lookup(Keys(0, 3), 1), ElementsAre(KS::kHit, KS::kHit, KS::kMiss));
  EXPECT_THAT(index->Lookup(Keys(0, 1), 0), ElementsAre(KS::kHit));
  auto loaded = index->PrepareLoad(Keys(0, 2), nullptr, 1);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(*loaded, rows);
  const SlotIndex::MemberCounts b = index->segments().member_counts(1);
  EXPECT_EQ(b.hits, 2u);
  EXPECT_EQ(b.cross_member_hits, 2u);
  EXPECT_EQ(b.loads, 2u);
  EXPECT_EQ(b.cross_member_loads, 2u);
  EXPECT_EQ(b.stores, 0u);
  const SlotIndex::MemberCounts a = index->segments().member_counts(0);
  EXPECT_EQ(a.hits, 1u);
  EXPECT_EQ(a.cross_member_hits, 0u);
  EXPECT_EQ(a.stores, 2u);
  EXPECT_EQ(a.rows_held, 2u);
  EXPECT_TRUE(CheckSlotIndexInvariants(*index).ok()) << CheckSlotIndexInvariants(*index);
}

TEST(SlotIndexPoolTest, ConcurrentStoresOfOneKeyGiveOneRowAndItIsNotLoadableWhileWritten) {
  auto index = Pool(4, 2);
  ASSERT_TRUE(index->segments().BringOnline(0).ok());
  ASSERT_TRUE(index->segments().BringOnline(1).ok());
  auto a = index->PrepareStore(Keys(0, 1), 0);
  ASSERT_TRUE(a.ok());
  ASSERT_EQ(a->rows.size(), 1u);
  // B asks for the same key while A writes it: nothing new to store, a pending hit, no load.
  auto b = index->PrepareStore(Keys(0, 2), 1);
  ASSERT_TRUE(b.ok());
  EXPECT_THAT(b->keys, ElementsAre(K(1)));
  EXPECT_THAT(index->Lookup(Keys(0, 1), 1), ElementsAre(KS::kHitPending));
  EXPECT_EQ(index->PrepareLoad(Keys(0, 1), nullptr, 1).status().code(),
            absl::StatusCode::kFailedPrecondition);
  // A's store ends: B loads A's row.
  ASSERT_TRUE(BeginCopy(*index, CopyDirection::kStore, a->rows).ok());
  ASSERT_TRUE(EndStoreCopy(*index, a->rows, true).ok());
  ASSERT_TRUE(index->CompleteStore(a->keys, true).ok());
  auto loaded = index->PrepareLoad(Keys(0, 1), nullptr, 1);
  ASSERT_TRUE(loaded.ok());
  EXPECT_EQ(*loaded, a->rows);
  EXPECT_TRUE(CheckSlotIndexInvariants(*index).ok()) << CheckSlotIndexInvariants(*index);
}

TEST(SlotIndexPoolTest, AFailedStoreOfOneMemberIsAMissForAnother) {
  auto index = Pool(4, 2);
  ASSERT_TRUE(index->segments().BringOnline(0).ok());
  ASSERT_TRUE(index->segments().BringOnline(1).ok());
  auto a = index->PrepareStore(Keys(0, 1), 0);
  ASSERT_TRUE(a.ok());
  ASSERT_TRUE(BeginCopy(*index, CopyDirection::kStore, a->rows).ok());
  ASSERT_TRUE(index->CompleteStore(a->keys, true).ok());  // commit came first
  ASSERT_TRUE(EndStoreCopy(*index, a->rows, false).ok());  // A's worker died
  EXPECT_THAT(index->Lookup(Keys(0, 1), 1), ElementsAre(KS::kMiss));
  EXPECT_EQ(index->PrepareLoad(Keys(0, 1), nullptr, 1).status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_TRUE(CheckSlotIndexInvariants(*index).ok()) << CheckSlotIndexInvariants(*index);
}

TEST(SlotIndexPoolTest, ARowAnotherMemberReadsIsNotEvicted) {
  auto index = Pool(2, 2);
  ASSERT_TRUE(index->segments().BringOnline(0).ok());
  ASSERT_TRUE(index->segments().BringOnline(1).ok());
  StoreReady(*index, Keys(0, 4), 0);
  ASSERT_TRUE(index->PrepareLoad(Keys(0, 4), nullptr, 1).ok());  // B pins every row
  auto store = index->PrepareStore(Keys(10, 1), 0);
  EXPECT_EQ(store.status().code(), absl::StatusCode::kResourceExhausted);
  ASSERT_TRUE(index->CompleteLoad(Keys(0, 1)).ok());
  store = index->PrepareStore(Keys(10, 1), 0);
  ASSERT_TRUE(store.ok()) << store.status();
  EXPECT_THAT(store->evicted_keys, ElementsAre(K(0)));
  EXPECT_TRUE(CheckSlotIndexInvariants(*index).ok()) << CheckSlotIndexInvariants(*index);
}

TEST(SlotIndexPoolTest, AFloorKeepsAnotherMembersRowsAgainstABusyOne) {
  // Two members of 4 rows; each keeps 2 of the rows it stored against the other's stores.
  auto index = Pool(4, 2, /*floor=*/2);
  ASSERT_TRUE(index->segments().BringOnline(0).ok());
  ASSERT_TRUE(index->segments().BringOnline(1).ok());
  StoreReady(*index, Keys(0, 4), 0);   // A: 0..3, least recent
  StoreReady(*index, Keys(10, 4), 1);  // B: 10..13
  // B stores 4 more: it may take A's rows down to A's floor (2), then its own, least recent first.
  auto store = index->PrepareStore(Keys(20, 4), 1);
  ASSERT_TRUE(store.ok()) << store.status();
  // Within one store call keys[0] is the most recent, so the LRU tail is the call's last key.
  EXPECT_THAT(store->evicted_keys, ElementsAre(K(3), K(2), K(13), K(12)));
  EXPECT_EQ(index->segments().member_counts(0).rows_held, 2u);
  EXPECT_EQ(index->segments().member_counts(0).evicted, 2u);
  EXPECT_GE(index->segments().member_counts(1).floor_skips, 2u);
  ASSERT_TRUE(index->CompleteStore(store->keys, false).ok());
  // B cannot take more of A's: only its own 2 rows (plus the 4 it just freed) are available.
  EXPECT_EQ(index->PrepareStore(Keys(30, 7), 1).status().code(),
            absl::StatusCode::kResourceExhausted);
  store = index->PrepareStore(Keys(30, 6), 1);
  ASSERT_TRUE(store.ok()) << store.status();
  EXPECT_THAT(store->evicted_keys, ElementsAre(K(11), K(10)));
  EXPECT_THAT(index->Lookup(Keys(0, 2), 1), ElementsAre(KS::kHit, KS::kHit));
  // A itself may evict its own rows below the floor.
  ASSERT_TRUE(index->CompleteStore(store->keys, false).ok());
  store = index->PrepareStore(Keys(40, 8), 0);
  ASSERT_TRUE(store.ok()) << store.status();
  EXPECT_THAT(store->evicted_keys, ElementsAre(K(1), K(0)));
  EXPECT_TRUE(CheckSlotIndexInvariants(*index).ok()) << CheckSlotIndexInvariants(*index);
}

TEST(SlotIndexPoolTest, ALeavingMembersFloorNoLongerHolds) {
  auto index = Pool(2, 2, /*floor=*/2);
  ASSERT_TRUE(index->segments().BringOnline(0).ok());
  ASSERT_TRUE(index->segments().BringOnline(1).ok());
  EXPECT_THAT(StoreReady(*index, Keys(0, 2), 0), ElementsAre(2, 3));   // A's, in B's segment
  EXPECT_THAT(StoreReady(*index, Keys(10, 2), 1), ElementsAre(0, 1));  // B's, in A's segment
  // A is at its floor: B may evict only its own two rows.
  EXPECT_EQ(index->PrepareStore(Keys(20, 3), 1).status().code(),
            absl::StatusCode::kResourceExhausted);
  // A leaves: its segment's rows go (B's keys in them too), and A's rows in B's segment are
  // no longer protected.
  auto drain = index->segments().TakeOffline(0);
  ASSERT_TRUE(drain.ok()) << drain.status();
  EXPECT_EQ(drain->keys_dropped, 2u);
  EXPECT_TRUE(index->segments().Drained(0));
  auto store = index->PrepareStore(Keys(20, 2), 1);
  ASSERT_TRUE(store.ok()) << store.status();
  EXPECT_THAT(store->evicted_keys, ElementsAre(K(1), K(0)));
  EXPECT_TRUE(CheckSlotIndexInvariants(*index).ok()) << CheckSlotIndexInvariants(*index);
}

TEST(SlotIndexPoolTest, TakingASegmentOfflineDropsIdleKeysAndParksRowsInUseWhenIdle) {
  auto index = Pool(4, 2);
  ASSERT_TRUE(index->segments().BringOnline(0).ok());
  ASSERT_TRUE(index->segments().BringOnline(1).ok());
  // Segment 1's rows are handed out first (it joined last): fill it, then one row of segment 0.
  const std::vector<uint64_t> rows = StoreReady(*index, Keys(0, 5), 0);
  ASSERT_THAT(rows, ElementsAre(4, 5, 6, 7, 0));
  ASSERT_TRUE(index->PrepareLoad({K(1)}, nullptr, 0).ok());  // row 5 READING
  auto writing = index->PrepareStore({K(9)}, 0);
  ASSERT_TRUE(writing.ok());
  ASSERT_EQ(writing->rows.size(), 1u);
  EXPECT_EQ(writing->rows[0], 1u);  // segment 0's next free row
  // Segment 1 leaves: its idle READY keys (rows 4, 6, 7) go now, row 5 is still read.
  auto drain = index->segments().TakeOffline(1);
  ASSERT_TRUE(drain.ok()) << drain.status();
  EXPECT_EQ(drain->keys_dropped, 3u);
  EXPECT_EQ(drain->rows_pending, 1u);
  EXPECT_FALSE(index->segments().Drained(1));
  EXPECT_THAT(index->Lookup(Keys(0, 5), 0),
              ElementsAre(KS::kMiss, KS::kHit, KS::kMiss, KS::kMiss, KS::kHit));
  EXPECT_EQ(index->segments().TakeOffline(1).status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(index->segments().BringOnline(1).code(), absl::StatusCode::kFailedPrecondition);
  ASSERT_TRUE(CheckSlotIndexInvariants(*index).ok()) << CheckSlotIndexInvariants(*index);
  // The reader still loads it; once it leaves, the row is parked and its key gone.
  ASSERT_TRUE(BeginCopy(*index, CopyDirection::kLoad, {5}).ok());
  ASSERT_TRUE(EndCopy(*index, {5}).ok());
  ASSERT_TRUE(index->CompleteLoad({K(1)}).ok());
  EXPECT_TRUE(index->segments().Drained(1));
  EXPECT_THAT(index->Lookup({K(1)}, 0), ElementsAre(KS::kMiss));
  EXPECT_EQ(index->counts().rows_offline, 4u);
  // Segment 0's rows are untouched; a new member may take slot 1.
  ASSERT_TRUE(index->segments().BringOnline(1).ok());
  EXPECT_EQ(index->counts().rows_free, 4u + 2u);
  ASSERT_TRUE(CheckSlotIndexInvariants(*index).ok()) << CheckSlotIndexInvariants(*index);
}

TEST(SlotIndexPoolTest, ARowWrittenIntoALeftSegmentNeverBecomesReady) {
  auto index = Pool(2, 2);
  ASSERT_TRUE(index->segments().BringOnline(0).ok());
  auto store = index->PrepareStore(Keys(0, 2), 1);  // member 1 writes into segment 0's rows
  ASSERT_TRUE(store.ok());
  ASSERT_TRUE(BeginCopy(*index, CopyDirection::kStore, store->rows).ok());
  auto drain = index->segments().TakeOffline(0);
  ASSERT_TRUE(drain.ok());
  EXPECT_EQ(drain->rows_pending, 2u);
  EXPECT_THAT(index->Lookup(Keys(0, 2), 1), ElementsAre(KS::kHitPending, KS::kHitPending));
  ASSERT_TRUE(EndStoreCopy(*index, store->rows, true).ok());
  ASSERT_TRUE(index->CompleteStore(store->keys, true).ok());
  EXPECT_THAT(index->Lookup(Keys(0, 2), 1), ElementsAre(KS::kMiss, KS::kMiss));
  EXPECT_TRUE(index->segments().Drained(0));
  EXPECT_EQ(index->counts().rows_ready, 0u);
  ASSERT_TRUE(CheckSlotIndexInvariants(*index).ok()) << CheckSlotIndexInvariants(*index);
}

TEST(SlotIndexPoolTest, AQuarantinedRowOfALeftSegmentIsParkedWhenItsCopyEnds) {
  auto index = Pool(2, 1);
  ASSERT_TRUE(index->segments().BringOnline(0).ok());
  auto store = index->PrepareStore(Keys(0, 1), 0);
  ASSERT_TRUE(store.ok());
  ASSERT_TRUE(BeginCopy(*index, CopyDirection::kStore, store->rows).ok());
  ASSERT_TRUE(index->CompleteStore(store->keys, false).ok());  // quarantined
  ASSERT_TRUE(index->segments().TakeOffline(0).ok());
  EXPECT_FALSE(index->segments().Drained(0));
  ASSERT_TRUE(EndCopy(*index, store->rows).ok());
  EXPECT_TRUE(index->segments().Drained(0));
  EXPECT_THAT(index->PrepareStore(Keys(1, 1), 0).status().code(),
              absl::StatusCode::kResourceExhausted);
  ASSERT_TRUE(CheckSlotIndexInvariants(*index).ok()) << CheckSlotIndexInvariants(*index);
}

TEST(SlotIndexPoolTest, ASegmentServesOnlyTheRowsItsRegionHasReady) {
  auto index = Pool(4, 2);
  ASSERT_TRUE(index->segments().BringOnline(0, /*ready_rows=*/1).ok());
  EXPECT_EQ(index->counts().rows_free, 1u);
  EXPECT_EQ(index->counts().rows_not_ready, 3u);  // of the online segment
  EXPECT_EQ(index->counts().rows_offline, 4u);    // the offline one
  EXPECT_EQ(index->counts().rows_online(), 4u);
  auto store = index->PrepareStore(Keys(0, 1), 0);
  ASSERT_TRUE(store.ok());
  EXPECT_THAT(store->rows, ElementsAre(0));
  EXPECT_EQ(index->PrepareStore(Keys(1, 1), 0).status().code(),
            absl::StatusCode::kResourceExhausted);
  ASSERT_TRUE(CheckSlotIndexInvariants(*index).ok()) << CheckSlotIndexInvariants(*index);
  index->segments().MarkRowsReady(0, 3);
  index->segments().MarkRowsReady(0, 2);  // lower: nothing changes
  store = index->PrepareStore(Keys(1, 2), 0);
  ASSERT_TRUE(store.ok());
  EXPECT_THAT(store->rows, ElementsAre(1, 2));
  ASSERT_TRUE(CheckSlotIndexInvariants(*index).ok()) << CheckSlotIndexInvariants(*index);
  // Leaving before it was fully ready: its not-ready rows are parked already, and the store it
  // left prepared (row 0) is ended with it.
  ASSERT_TRUE(index->CompleteStore(store->keys, false).ok());
  auto drain = index->segments().TakeOffline(0);
  ASSERT_TRUE(drain.ok());
  EXPECT_EQ(drain->stores_ended, 1u);
  EXPECT_TRUE(index->segments().Drained(0));
  index->segments().MarkRowsReady(0, 4);  // offline: nothing changes
  EXPECT_EQ(index->counts().rows_free, 0u);
  EXPECT_EQ(index->counts().rows_not_ready, 0u);
  EXPECT_EQ(index->counts().rows_offline, 8u);
  EXPECT_EQ(index->CompleteStore(Keys(0, 1), false).code(), absl::StatusCode::kNotFound);
  ASSERT_TRUE(CheckSlotIndexInvariants(*index).ok()) << CheckSlotIndexInvariants(*index);
}

TEST(SlotIndexPoolTest, APrivateIndexHasNoOfflineRowsAndOneMember) {
  auto index = SlotIndex::Create(4);
  ASSERT_TRUE(index.ok());
  EXPECT_EQ((*index)->segments().num_segments(), 1u);
  EXPECT_EQ((*index)->segments().segment_rows(), 4u);
  StoreReady(**index, Keys(0, 2), 0);
  EXPECT_THAT((*index)->Lookup(Keys(0, 1)), ElementsAre(KS::kHit));
  EXPECT_EQ((*index)->segments().member_counts(0).cross_member_hits, 0u);
  EXPECT_EQ((*index)->counts().rows_offline, 0u);
  EXPECT_THAT((*index)->PrepareStore(Keys(0, 1))->keys, IsEmpty());
  ASSERT_TRUE(CheckSlotIndexInvariants(**index).ok());
}

}  // namespace
}  // namespace kvoffload::daemon
