#include "daemon/index/readiness.h"

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace kvoffload::daemon {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;

std::vector<uint32_t> RowsOf(const std::vector<RestoredRow>& rows) {
  std::vector<uint32_t> out;
  for (const RestoredRow& r : rows) out.push_back(r.row);
  return out;
}

TEST(ReadinessTest, TheWatermarkIsClampedToTheRows) {
  EXPECT_EQ(Readiness(8, UINT64_MAX).end(), 8u);
  EXPECT_EQ(Readiness(8, 3).end(), 3u);
  Readiness readiness(8, 0);
  const Readiness::Raised raised = readiness.Raise(100);
  EXPECT_EQ(raised.from, 0u);
  EXPECT_EQ(raised.to, 8u);
  EXPECT_EQ(readiness.end(), 8u);
}

TEST(ReadinessTest, ALowerWatermarkChangesNothing) {
  Readiness readiness(8, 4);
  Readiness::Raised raised = readiness.Raise(4);
  EXPECT_EQ(raised.from, raised.to);
  raised = readiness.Raise(2);
  EXPECT_EQ(raised.to, 4u);
  EXPECT_EQ(readiness.end(), 4u);
}

TEST(ReadinessTest, ParkedRowsComeBackInRowOrderAsTheWatermarkPassesThem) {
  Readiness readiness(10, 2);
  readiness.Park(RestoredRow{7, "g", 1, 0});
  readiness.Park(RestoredRow{3, "c", 2, 0});
  readiness.Park(RestoredRow{5, "e", 3, 0});
  readiness.SortParked();
  EXPECT_EQ(readiness.num_parked(), 3u);
  EXPECT_TRUE(readiness.IsParked(5));
  EXPECT_FALSE(readiness.IsParked(4));

  Readiness::Raised raised = readiness.Raise(6);
  EXPECT_EQ(raised.from, 2u);
  EXPECT_EQ(raised.to, 6u);
  EXPECT_THAT(RowsOf(raised.back), ElementsAre(3, 5));
  EXPECT_EQ(raised.back[0].key, "c");
  EXPECT_EQ(raised.back[1].ticket, 3u);
  EXPECT_FALSE(readiness.IsParked(5));  // came back
  EXPECT_TRUE(readiness.IsParked(7));
  EXPECT_EQ(readiness.num_parked(), 1u);

  raised = readiness.Raise(7);  // row 7 is not below the new watermark yet
  EXPECT_THAT(raised.back, IsEmpty());
  raised = readiness.Raise(10);
  EXPECT_THAT(RowsOf(raised.back), ElementsAre(7));
  EXPECT_EQ(readiness.num_parked(), 0u);
}

}  // namespace
}  // namespace kvoffload::daemon
