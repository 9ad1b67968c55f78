#include "daemon/pool/segment_runs.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace kvoffload::daemon {
namespace {

TEST(SplitBySegmentTest, CutsRunsAtSegmentBoundariesAndRenumbersThem) {
  // Segments of 10 region blocks: one run crossing 0→1→2, one back in segment 0.
  const std::vector<SegmentRuns> split =
      SplitBySegment({CopyRun{100, 8, 15}, CopyRun{200, 2, 3}}, 10);
  ASSERT_EQ(split.size(), 3u);
  EXPECT_EQ(split[0].segment, 0u);
  EXPECT_THAT(split[0].runs, ::testing::ElementsAre(CopyRun{100, 8, 2}, CopyRun{200, 2, 3}));
  EXPECT_EQ(split[1].segment, 1u);
  EXPECT_THAT(split[1].runs, ::testing::ElementsAre(CopyRun{102, 0, 10}));
  EXPECT_EQ(split[2].segment, 2u);
  EXPECT_THAT(split[2].runs, ::testing::ElementsAre(CopyRun{112, 0, 3}));
}

TEST(SplitBySegmentTest, ARunInsideOneSegmentStaysOneRun) {
  const std::vector<SegmentRuns> split = SplitBySegment({CopyRun{0, 30, 10}}, 10);
  ASSERT_EQ(split.size(), 1u);
  EXPECT_EQ(split[0].segment, 3u);
  EXPECT_THAT(split[0].runs, ::testing::ElementsAre(CopyRun{0, 0, 10}));
  EXPECT_TRUE(SplitBySegment({}, 10).empty());
}

}  // namespace
}  // namespace kvoffload::daemon
