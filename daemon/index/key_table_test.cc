#include "daemon/index/key_table.h"

#include <string>

#include "gtest/gtest.h"

namespace kvoffload::daemon {
namespace {

TEST(KeyTableTest, FindsRowsByTheKeysTheyHold) {
  RowTable rows(3);
  KeyTable keys(rows, 3);
  EXPECT_EQ(keys.Find("a"), RowTable::kNil);
  rows.SetKey(0, "a");
  keys.Insert(0);
  const std::string long_key(300, 'z');
  rows.SetKey(2, long_key);
  keys.Insert(2);
  EXPECT_EQ(keys.Find("a"), 0u);
  EXPECT_EQ(keys.Find(long_key), 2u);
  EXPECT_EQ(keys.Find("b"), RowTable::kNil);
  EXPECT_EQ(keys.size(), 2u);
}

TEST(KeyTableTest, EraseGoesByTheRowsKeyAndTheRowMayThenTakeAnother) {
  RowTable rows(2);
  KeyTable keys(rows, 2);
  rows.SetKey(1, "old");
  keys.Insert(1);
  keys.Erase(1);
  EXPECT_EQ(keys.Find("old"), RowTable::kNil);
  rows.SetKey(1, "new");
  keys.Insert(1);
  EXPECT_EQ(keys.Find("new"), 1u);
  EXPECT_EQ(keys.size(), 1u);
}

TEST(KeyTableTest, IsReservedUpFrontSoInsertsNeverGrowIt) {
  RowTable rows(100);
  KeyTable keys(rows, 100);
  const uint64_t reserved = keys.MemoryBytes();
  EXPECT_GE(reserved, 100 * (sizeof(uint32_t) + 1));
  for (uint32_t r = 0; r < 100; ++r) {
    rows.SetKey(r, "key" + std::to_string(r));
    keys.Insert(r);
  }
  EXPECT_EQ(keys.MemoryBytes(), reserved);
  for (uint32_t r = 0; r < 100; ++r) EXPECT_EQ(keys.Find("key" + std::to_string(r)), r);
}

}  // namespace
}  // namespace kvoffload::daemon
