// SlotIndex::BeginSpill: a tier's copy out of a readable row keeps the row and its key, is never
// evicted, reset or parked under it, and ends as a load's copy does.
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
using Code = absl::StatusCode;
using KeyState = SlotIndex::KeyState;
using Keys = std::vector<std::string>;

std::unique_ptr<SlotIndex> MakeIndex(uint64_t num_rows) {
  absl::StatusOr<std::unique_ptr<SlotIndex>> index = SlotIndex::Create(num_rows);
  EXPECT_TRUE(index.ok()) << index.status();
  return std::move(index).value();
}

void Store(SlotIndex& index, const Keys& keys) {
  absl::StatusOr<SlotIndex::PrepareStoreResult> p = index.PrepareStore(keys);
  ASSERT_TRUE(p.ok()) << p.status();
  ASSERT_TRUE(BeginCopy(index, CopyDirection::kStore, p->rows).ok());
  ASSERT_TRUE(EndStoreCopy(index, p->rows, true).ok());
  ASSERT_TRUE(index.CompleteStore(p->keys, true).ok());
}

// Keys evicted by storing `fresh` (which then holds its row, READY).
Keys Evicted(SlotIndex& index, const std::string& fresh) {
  absl::StatusOr<SlotIndex::PrepareStoreResult> p = index.PrepareStore({fresh});
  EXPECT_TRUE(p.ok()) << p.status();
  if (!p.ok()) return {};
  EXPECT_TRUE(BeginCopy(index, CopyDirection::kStore, p->rows).ok());
  EXPECT_TRUE(EndStoreCopy(index, p->rows, true).ok());
  EXPECT_TRUE(index.CompleteStore({fresh}, true).ok());
  return p->evicted_keys;
}

TEST(SlotIndexSpillTest, ASpilledRowIsNotEvictedAndComesBackMostRecent) {
  std::unique_ptr<SlotIndex> index = MakeIndex(2);
  Store(*index, {"a"});
  Store(*index, {"b"});  // LRU: a (least recent), b
  absl::StatusOr<RowRun> spill = index->copies().BeginSpill("a");
  ASSERT_TRUE(spill.ok()) << spill.status();
  EXPECT_EQ(spill->num_rows, 1u);
  EXPECT_NE(spill->ticket, 0u);
  SlotIndex::Counts c = index->counts();
  EXPECT_EQ(c.rows_ready, 2u);
  EXPECT_EQ(c.rows_evictable, 1u);
  EXPECT_EQ(c.copies_in_flight, 1u);
  // Still a hit and loadable while the tier reads it.
  EXPECT_THAT(index->Lookup({"a"}), ElementsAre(KeyState::kHit));
  ASSERT_TRUE(index->PrepareLoad({"a"}).ok());
  ASSERT_TRUE(index->CompleteLoad({"a"}).ok());
  // Eviction passes it by; with b gone, x is the only row left to evict.
  EXPECT_THAT(Evicted(*index, "x"), ElementsAre("b"));
  ASSERT_TRUE(index->PrepareStore({"y"}).ok());  // evicts x
  EXPECT_EQ(index->PrepareStore({"z"}).status().code(), Code::kResourceExhausted);
  ASSERT_TRUE(index->CompleteStore({"y"}, false).ok());
  // Reset keeps it too.
  EXPECT_EQ(index->Reset(), 0u);
  EXPECT_THAT(index->Lookup({"a"}), ElementsAre(KeyState::kHit));
  ASSERT_TRUE(index->copies().End({*spill}).ok());
  EXPECT_EQ(index->counts().copies_in_flight, 0u);
  EXPECT_EQ(index->counts().rows_evictable, 1u);
  EXPECT_TRUE(CheckSlotIndexInvariants(*index).ok()) << CheckSlotIndexInvariants(*index);
  EXPECT_EQ(index->Reset(), 1u);
}

TEST(SlotIndexSpillTest, EndingTheSpillMakesTheRowMostRecent) {
  std::unique_ptr<SlotIndex> index = MakeIndex(3);
  Store(*index, {"a"});
  Store(*index, {"b"});
  Store(*index, {"c"});  // LRU: a b c
  absl::StatusOr<RowRun> spill = index->copies().BeginSpill("a");
  ASSERT_TRUE(spill.ok());
  ASSERT_TRUE(index->copies().End({*spill}).ok());  // LRU: b c a
  EXPECT_THAT(Evicted(*index, "x"), ElementsAre("b"));
  EXPECT_THAT(Evicted(*index, "y"), ElementsAre("c"));
  EXPECT_THAT(Evicted(*index, "z"), ElementsAre("a"));
}

TEST(SlotIndexSpillTest, ReadingRowsSpillAndWritingOrAbsentKeysDoNot) {
  std::unique_ptr<SlotIndex> index = MakeIndex(4);
  Store(*index, {"r"});
  ASSERT_TRUE(index->PrepareLoad({"r"}).ok());  // READING
  absl::StatusOr<RowRun> spill = index->copies().BeginSpill("r");
  ASSERT_TRUE(spill.ok()) << spill.status();
  ASSERT_TRUE(index->PrepareStore({"w"}).ok());  // WRITING
  EXPECT_EQ(index->copies().BeginSpill("w").status().code(), Code::kFailedPrecondition);
  EXPECT_EQ(index->copies().BeginSpill("absent").status().code(), Code::kNotFound);
  EXPECT_EQ(index->copies().BeginSpill("").status().code(), Code::kInvalidArgument);
  EXPECT_EQ(index->copies().BeginSpill(std::string(SlotIndex::kMaxKeyBytes + 1, 'k')).status().code(),
            Code::kInvalidArgument);
  EXPECT_EQ(index->counts().copies_in_flight, 1u);
  ASSERT_TRUE(index->CompleteLoad({"r"}).ok());  // READY, still copied: not evictable
  EXPECT_EQ(index->counts().rows_evictable, 0u);
  ASSERT_TRUE(index->copies().End({*spill}).ok());
  EXPECT_EQ(index->counts().rows_evictable, 1u);
  EXPECT_TRUE(CheckSlotIndexInvariants(*index).ok()) << CheckSlotIndexInvariants(*index);
}

TEST(SlotIndexSpillTest, TheReadyListenerHearsEachKeyOnceItIsWrittenAndCommitted) {
  std::unique_ptr<SlotIndex> index = MakeIndex(4);
  Keys heard;
  index->SetReadyListener([&heard](absl::string_view key) { heard.emplace_back(key); });
  // Commit first, written later: heard only once written.
  absl::StatusOr<SlotIndex::PrepareStoreResult> p = index->PrepareStore({"a", "b"});
  ASSERT_TRUE(p.ok());
  ASSERT_TRUE(index->CompleteStore({"a", "b"}, true).ok());
  EXPECT_TRUE(heard.empty());
  ASSERT_TRUE(BeginCopy(*index, CopyDirection::kStore, p->rows).ok());
  ASSERT_TRUE(EndStoreCopy(*index, p->rows, true).ok());
  EXPECT_THAT(heard, ElementsAre("b", "a"));  // the first key last: the most recent
  // A failed store is never heard.
  absl::StatusOr<SlotIndex::PrepareStoreResult> f = index->PrepareStore({"f"});
  ASSERT_TRUE(f.ok());
  ASSERT_TRUE(index->CompleteStore({"f"}, false).ok());
  heard.clear();
  Store(*index, {"c"});
  EXPECT_THAT(heard, ElementsAre("c"));
}

TEST(SlotIndexSpillTest, AnOfflineSegmentWaitsForTheSpill) {
  absl::StatusOr<std::unique_ptr<SlotIndex>> made =
      SlotIndex::CreatePool(SlotIndex::PoolShape{/*num_segments=*/2, /*segment_rows=*/2});
  ASSERT_TRUE(made.ok()) << made.status();
  SlotIndex& index = **made;
  ASSERT_TRUE(index.segments().BringOnline(0).ok());
  ASSERT_TRUE(index.segments().BringOnline(1).ok());
  absl::StatusOr<SlotIndex::PrepareStoreResult> p = index.PrepareStore({"a"}, /*member=*/0);
  ASSERT_TRUE(p.ok());
  ASSERT_TRUE(BeginCopy(index, CopyDirection::kStore, p->rows).ok());
  ASSERT_TRUE(EndStoreCopy(index, p->rows, true).ok());
  ASSERT_TRUE(index.CompleteStore({"a"}, true).ok());
  const uint32_t segment = static_cast<uint32_t>(p->rows[0] / index.segments().segment_rows());
  absl::StatusOr<RowRun> spill = index.copies().BeginSpill("a");
  ASSERT_TRUE(spill.ok());
  ASSERT_TRUE(index.segments().TakeOffline(segment).ok());
  EXPECT_FALSE(index.segments().Drained(segment));  // the tier still reads the row's memory
  ASSERT_TRUE(index.copies().End({*spill}).ok());
  EXPECT_TRUE(index.segments().Drained(segment));
  EXPECT_THAT(index.Lookup({"a"}), ElementsAre(KeyState::kMiss));
  EXPECT_TRUE(CheckSlotIndexInvariants(index).ok()) << CheckSlotIndexInvariants(index);
}

}  // namespace
}  // namespace kvoffload::daemon
