#include "daemon/index/row_table.h"

#include <cstdint>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace kvoffload::daemon {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;

// The LRU list, least recent first, read through the links.
std::vector<uint32_t> Lru(const RowTable& rows) {
  std::vector<uint32_t> out;
  for (uint32_t r = rows.least_recent(); r != rows.sentinel(); r = rows[r].next) out.push_back(r);
  return out;
}

std::vector<uint32_t> FreeList(const RowTable& rows) {
  std::vector<uint32_t> out;
  for (uint32_t r = rows.first_free(); r != RowTable::kNil; r = rows[r].next) out.push_back(r);
  return out;
}

TEST(RowTableTest, StartsWithEveryRowFreeAndOnNoList) {
  RowTable rows(4);
  EXPECT_EQ(rows.num_rows(), 4u);
  EXPECT_EQ(rows.first_free(), RowTable::kNil);
  EXPECT_EQ(rows.least_recent(), rows.sentinel());
  for (uint32_t r = 0; r < 4; ++r) {
    EXPECT_EQ(rows[r].state, RowState::kFree);
    EXPECT_EQ(rows[r].key_size, 0);
    EXPECT_FALSE(rows[r].marked);
  }
  EXPECT_EQ(rows.MemoryBytes(), 5 * sizeof(RowTable::Row));
}

TEST(RowTableTest, TheFreeListHandsOutTheLastPushedRowFirstAndCounts) {
  RowTable rows(4);
  for (uint32_t r = 4; r-- > 0;) rows.PushFree(r);
  EXPECT_EQ(rows.rows_free(), 4u);
  EXPECT_EQ(rows.PopFree(), 0u);
  EXPECT_EQ(rows.PopFree(), 1u);
  EXPECT_EQ(rows.rows_free(), 2u);
  EXPECT_THAT(FreeList(rows), ElementsAre(2, 3));
}

TEST(RowTableTest, TakeFreeRowsUnlinksARangeInOneWalk) {
  RowTable rows(6);
  for (uint32_t r = 6; r-- > 0;) rows.PushFree(r);
  EXPECT_THAT(rows.TakeFreeRows(2, 4), ElementsAre(2, 3));
  EXPECT_THAT(FreeList(rows), ElementsAre(0, 1, 4, 5));
  EXPECT_EQ(rows.rows_free(), 4u);
  EXPECT_EQ(rows[2].next, RowTable::kNil);
  rows.ClearFreeList();
  EXPECT_EQ(rows.first_free(), RowTable::kNil);
  EXPECT_EQ(rows.rows_free(), 0u);
  EXPECT_EQ(rows[0].next, RowTable::kNil);
}

TEST(RowTableTest, TheLruListLinksMostRecentLastAndUnlinksAnywhere) {
  RowTable rows(4);
  for (uint32_t row : {2, 0, 3}) rows.LinkAfter(row, rows[rows.sentinel()].prev);  // most recent
  EXPECT_THAT(Lru(rows), ElementsAre(2, 0, 3));
  rows.Unlink(0);
  EXPECT_THAT(Lru(rows), ElementsAre(2, 3));
  rows.LinkAfter(1, rows.sentinel());  // as the least recent
  EXPECT_THAT(Lru(rows), ElementsAre(1, 2, 3));
  EXPECT_EQ(rows.rows_evictable(), 3u);
  rows.Unlink(1);
  rows.Unlink(3);
  rows.Unlink(2);
  EXPECT_THAT(Lru(rows), IsEmpty());
  EXPECT_EQ(rows.rows_evictable(), 0u);
}

TEST(RowTableTest, ShortKeysLiveInTheRowLongOnesOnTheHeapReusedAtTheSameSize) {
  RowTable rows(2);
  rows.SetKey(0, "abc");
  EXPECT_EQ(RowTable::KeyOf(rows[0]), "abc");
  EXPECT_EQ(rows.key_heap_bytes(), 0u);
  const std::string inline_max(RowTable::kInlineKeyBytes, 'i');
  rows.SetKey(0, inline_max);
  EXPECT_EQ(RowTable::KeyOf(rows[0]), inline_max);
  EXPECT_EQ(rows.key_heap_bytes(), 0u);

  const std::string long_a(100, 'a'), long_b(100, 'b'), longer(200, 'c');
  rows.SetKey(1, long_a);
  const char* block = rows[1].key.heap_bytes;
  EXPECT_EQ(rows.key_heap_bytes(), 100u);
  rows.SetKey(1, long_b);  // same size: the block is reused
  EXPECT_EQ(rows[1].key.heap_bytes, block);
  EXPECT_EQ(RowTable::KeyOf(rows[1]), long_b);
  rows.SetKey(1, longer);
  EXPECT_EQ(rows.key_heap_bytes(), 200u);
  EXPECT_EQ(rows.MemoryBytes(), 3 * sizeof(RowTable::Row) + 200);
  rows.SetKey(1, "x");  // back inline: the heap block goes
  EXPECT_EQ(rows.key_heap_bytes(), 0u);
  rows.SetKey(1, long_a);
  rows.ReleaseKey(1);
  EXPECT_EQ(rows[1].key_size, 0);
  EXPECT_EQ(rows.key_heap_bytes(), 0u);
  rows.SetKey(0, longer);  // the destructor frees what is left
}

TEST(RowTableTest, NamesEveryState) {
  EXPECT_EQ(RowStateName(RowState::kFree), "FREE");
  EXPECT_EQ(RowStateName(RowState::kWriting), "WRITING");
  EXPECT_EQ(RowStateName(RowState::kReady), "READY");
  EXPECT_EQ(RowStateName(RowState::kReading), "READING");
}

}  // namespace
}  // namespace kvoffload::daemon
