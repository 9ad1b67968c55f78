// SlotMap: striping, LRU eviction, pins, retirement, generations, restore order.
#include "daemon/tier/slot_map.h"

#include <utility>
#include <vector>

#include "gtest/gtest.h"

namespace kvoffload::tier {
namespace {

SlotMap::Record Rec(const std::string& key, uint64_t gen, uint64_t ns = 1) {
  return SlotMap::Record{ns, key, gen, 4096};
}

TEST(SlotMapTest, AllocatesRoundRobinOverFiles) {
  SlotMap m(3, 2);
  std::vector<uint32_t> files;
  for (int i = 0; i < 6; ++i) files.push_back(m.file_of(*m.Allocate()));
  EXPECT_EQ(files, (std::vector<uint32_t>{0, 1, 2, 0, 1, 2}));
  EXPECT_EQ(m.Allocate().status().code(), absl::StatusCode::kResourceExhausted);
}

TEST(SlotMapTest, EvictsLeastRecentIdleAndNeverAPinnedOne) {
  SlotMap m(1, 3);
  for (uint64_t g = 1; g <= 3; ++g) m.Commit(*m.Allocate(), Rec("k" + std::to_string(g), g));
  ASSERT_TRUE(m.Pin(1, "k1").has_value());  // k1 oldest but pinned
  const uint64_t s = *m.Allocate();          // evicts k2
  EXPECT_FALSE(m.Find(1, "k2").has_value());
  EXPECT_TRUE(m.Find(1, "k1").has_value());
  m.Abort(s);
  EXPECT_EQ(m.evictions(), 1u);
}

TEST(SlotMapTest, ReplacedWhileReadTheOldSlotIsFreedWhenTheReaderLeaves) {
  SlotMap m(1, 2);
  const uint64_t a = *m.Allocate();
  m.Commit(a, Rec("k", 1));
  ASSERT_TRUE(m.Pin(1, "k").has_value());
  const uint64_t b = *m.Allocate();
  EXPECT_TRUE(m.Commit(b, Rec("k", 2)));
  EXPECT_EQ(m.Find(1, "k")->slot, b);
  m.Unpin(a);                   // the last reader of the retired slot leaves
  EXPECT_EQ(*m.Allocate(), a);  // free again: no eviction needed
  EXPECT_EQ(m.evictions(), 0u);
  EXPECT_TRUE(m.Find(1, "k").has_value());
}

TEST(SlotMapTest, OlderGenerationLosesToANewerCommit) {
  SlotMap m(1, 2);
  const uint64_t older = *m.Allocate();
  const uint64_t newer = *m.Allocate();
  EXPECT_TRUE(m.Commit(newer, Rec("k", 9)));
  EXPECT_FALSE(m.Commit(older, Rec("k", 5)));
  EXPECT_EQ(m.Find(1, "k")->generation, 9u);
  EXPECT_EQ(m.records(), 1u);
}

TEST(SlotMapTest, RestoreKeepsTheHighestGenerationAndOrdersLruByIt) {
  SlotMap m(2, 2);
  std::vector<std::pair<uint64_t, SlotMap::Record>> found;
  found.emplace_back(0, Rec("b", 7));
  found.emplace_back(1, Rec("a", 3));
  found.emplace_back(2, Rec("a", 8));  // wins over slot 1
  EXPECT_EQ(m.Restore(std::move(found)), 2u);
  EXPECT_EQ(m.Find(1, "a")->slot, 2u);
  EXPECT_EQ(*m.Allocate(), 1u);  // the loser's slot is free (file 1)
  EXPECT_EQ(*m.Allocate(), 3u);  // the never-used one
  EXPECT_EQ(*m.Allocate(), 0u);  // full: evicts "b" (generation 7, least recent)
  EXPECT_FALSE(m.Find(1, "b").has_value());
}

TEST(SlotMapTest, DropNamespaceRemovesOnlyItsRecords) {
  SlotMap m(1, 4);
  m.Commit(*m.Allocate(), Rec("x", 1, 1));
  m.Commit(*m.Allocate(), Rec("y", 2, 1));
  m.Commit(*m.Allocate(), Rec("x", 3, 2));
  EXPECT_EQ(m.DropNamespace(1), 2u);
  EXPECT_EQ(m.records(), 1u);
  EXPECT_TRUE(m.Find(2, "x").has_value());
}

}  // namespace
}  // namespace kvoffload::tier
