// SlotIndex readiness (serve while pinning): rows at or above the watermark are never
// handed out or readable; MarkRowsReady makes them usable; restored READY rows above it miss
// until their rows are ready, then hit — unless the key was stored again meanwhile.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "daemon/index/slot_index.h"
#include "daemon/index/testing/row_lists.h"
#include "daemon/index/testing/slot_index_invariants.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace kvoffload::daemon {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;
using Keys = std::vector<std::string>;

Keys MakeKeys(const std::string& prefix, int n) {
  Keys keys;
  for (int i = 0; i < n; ++i) keys.push_back(absl::StrCat(prefix, i));
  return keys;
}

class FreeJournal : public RowJournal {
 public:
  void OnFree(uint32_t row) override { freed.push_back(row); }
  void OnReady(uint32_t, absl::string_view, uint32_t) override {}
  void OnTouch(uint32_t) override {}
  void OnTicketsReserved(uint32_t) override {}
  std::vector<uint32_t> freed;
};

TEST(SlotIndexReadinessTest, RowsAboveTheWatermarkAreNeverHandedOut) {
  auto index = SlotIndex::Create(8, nullptr, /*ready_rows=*/2).value();
  EXPECT_EQ(index->ready_rows(), 2u);
  SlotIndex::Counts c = index->counts();
  EXPECT_EQ(c.rows_free, 2u);
  EXPECT_EQ(c.rows_not_ready, 6u);
  // Three new keys, two usable rows and nothing to evict: refused, nothing changed; the message
  // accounts for every row and says the rest are coming.
  const absl::Status refused = index->PrepareStore(MakeKeys("k", 3)).status();
  EXPECT_EQ(refused.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(refused.message(), HasSubstr("of 8 rows 0 are writing, 0 reading, 0 ready but busy "
                                           "or part of this request, 0 quarantined, 6 not ready "
                                           "yet, 0 offline"));
  EXPECT_THAT(refused.message(), HasSubstr("come online as the region is populated"));
  auto store = index->PrepareStore(MakeKeys("k", 2)).value();
  EXPECT_THAT(store.rows, ElementsAre(0u, 1u));
  ASSERT_TRUE(BeginCopy(*index, CopyDirection::kStore, store.rows).ok());
  ASSERT_TRUE(EndStoreCopy(*index, store.rows, true).ok());
  ASSERT_TRUE(index->CompleteStore(store.keys, true).ok());
  // Full: a new key evicts a ready row, never takes an unready one.
  auto next = index->PrepareStore({"x"}).value();
  ASSERT_EQ(next.rows.size(), 1u);
  EXPECT_LT(next.rows[0], 2u);
  EXPECT_EQ(next.evicted_keys.size(), 1u);
  // A copy naming an unready row is refused (it is FREE).
  EXPECT_EQ(CheckRows(*index, CopyDirection::kStore, {5}).code(),
            absl::StatusCode::kFailedPrecondition);
  ASSERT_TRUE(CheckSlotIndexInvariants(*index).ok()) << CheckSlotIndexInvariants(*index);

  EXPECT_EQ(index->MarkRowsReady(5), 0u);
  EXPECT_EQ(index->MarkRowsReady(3), 0u);  // below the watermark: nothing
  EXPECT_EQ(index->ready_rows(), 5u);
  c = index->counts();
  EXPECT_EQ(c.rows_free, 3u);
  EXPECT_EQ(c.rows_not_ready, 3u);
  // The lowest new row first.
  auto more = index->PrepareStore(MakeKeys("m", 3)).value();
  EXPECT_THAT(more.rows, ElementsAre(2u, 3u, 4u));
  // No free ready row left: "y" evicts the one READY row rather than take an unready one.
  auto y = index->PrepareStore({"y"}).value();
  EXPECT_EQ(y.evicted_keys.size(), 1u);
  EXPECT_LT(y.rows[0], 2u);
  EXPECT_EQ(index->PrepareStore({"z"}).status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(index->MarkRowsReady(100), 0u);  // clamped
  // Every row ready: a refusal no longer speaks of rows to come.
  const absl::Status full = index->PrepareStore(MakeKeys("w", 9)).status();
  EXPECT_EQ(full.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(full.message(), HasSubstr("0 not ready yet"));
  EXPECT_THAT(full.message(), Not(HasSubstr("come online")));
  EXPECT_EQ(index->ready_rows(), 8u);
  EXPECT_EQ(index->counts().rows_not_ready, 0u);
  ASSERT_TRUE(CheckSlotIndexInvariants(*index).ok()) << CheckSlotIndexInvariants(*index);
}

TEST(SlotIndexReadinessTest, ParkedRestoredRowsMissUntilReadyThenHit) {
  std::vector<RestoredRow> rows = {{1, "a", 7, 1}, {4, "b", 7, 2}, {6, "c", 7, 3}};
  auto journal = std::make_unique<FreeJournal>();
  FreeJournal* j = journal.get();
  auto restored = SlotIndex::Restore(8, rows, 100, std::move(journal), /*ready_rows=*/2).value();
  SlotIndex& index = *restored.index;
  EXPECT_EQ(restored.rows_restored, 1u);
  EXPECT_EQ(restored.rows_dropped, 0u);
  EXPECT_THAT(index.Lookup({"a", "b", "c"}),
              ElementsAre(SlotIndex::KeyState::kHit, SlotIndex::KeyState::kMiss,
                          SlotIndex::KeyState::kMiss));
  EXPECT_EQ(index.PrepareLoad({"b"}).status().code(), absl::StatusCode::kNotFound);
  // "c" is stored again while its old row is parked: the new row wins later.
  auto store = index.PrepareStore({"c"}).value();
  EXPECT_THAT(store.rows, ElementsAre(0u));
  ASSERT_TRUE(CheckSlotIndexInvariants(index).ok()) << CheckSlotIndexInvariants(index);

  EXPECT_EQ(index.MarkRowsReady(5), 1u);  // "b" at row 4 comes back
  EXPECT_EQ(index.PrepareLoad({"b"}).value(), std::vector<uint64_t>{4});
  ASSERT_TRUE(index.CompleteLoad({"b"}).ok());
  EXPECT_TRUE(j->freed.empty());
  EXPECT_EQ(index.MarkRowsReady(8), 0u);  // "c" at row 6 lost to the new store
  EXPECT_THAT(j->freed, ElementsAre(6u));
  EXPECT_THAT(index.Lookup({"c"}), ElementsAre(SlotIndex::KeyState::kHitPending));
  SlotIndex::Counts c = index.counts();
  EXPECT_EQ(c.rows_ready, 2u);
  EXPECT_EQ(c.rows_writing, 1u);
  EXPECT_EQ(c.rows_free, 5u);
  ASSERT_TRUE(CheckSlotIndexInvariants(index).ok()) << CheckSlotIndexInvariants(index);
}

TEST(SlotIndexReadinessTest, ComeBackRowsAreLeastRecent) {
  std::vector<RestoredRow> rows = {{0, "a", 7, 1}, {3, "b", 7, 2}};
  auto index = SlotIndex::Restore(4, rows, 100, nullptr, /*ready_rows=*/2).value().index;
  // Rows 1 is free; fill it so that the next store must evict.
  auto s1 = index->PrepareStore({"n"}).value();
  ASSERT_TRUE(BeginCopy(*index, CopyDirection::kStore, s1.rows).ok());
  ASSERT_TRUE(EndStoreCopy(*index, s1.rows, true).ok());
  ASSERT_TRUE(index->CompleteStore(s1.keys, true).ok());
  EXPECT_EQ(index->MarkRowsReady(4), 1u);
  auto s2 = index->PrepareStore({"p", "q"}).value();  // row 2 free, then evict least recent
  EXPECT_THAT(s2.evicted_keys, ElementsAre("b"));
  ASSERT_TRUE(CheckSlotIndexInvariants(*index).ok()) << CheckSlotIndexInvariants(*index);
}

}  // namespace
}  // namespace kvoffload::daemon
