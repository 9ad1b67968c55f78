// The one validator of a job part: every rule with its exact status code, against a geometry of
// 8 rows of 2 blocks and a worker of 16 blocks and 4 events.
#include "daemon/engine/job_part.h"

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace kvoffload::daemon {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using Code = absl::StatusCode;

common::Geometry TwoBlockRows() {
  common::Geometry g;
  g.blocks_per_row = 2;
  g.num_rows = 8;
  return g;
}

constexpr PartBounds kBounds{/*region_epoch=*/42, /*worker_blocks=*/16, /*worker_events=*/4,
                             /*max_blocks_per_job=*/6};

JobPart Store(std::vector<uint64_t> gpu_blocks, std::vector<uint64_t> rows) {
  JobPart p;
  p.job_id = 1;
  p.gpu_blocks = std::move(gpu_blocks);
  p.rows = std::move(rows);
  return p;
}

JobPart LoadByBlock(std::vector<uint64_t> gpu_blocks, std::vector<uint64_t> region_blocks) {
  JobPart p;
  p.job_id = 2;
  p.direction = CopyDirection::kLoad;
  p.gpu_blocks = std::move(gpu_blocks);
  p.region_blocks = std::move(region_blocks);
  p.rows = RowsCovered(p.region_blocks, 2);
  return p;
}

absl::Status Check(const JobPart& part) {
  return ValidateJobPart(part, TwoBlockRows(), kBounds, "job");
}

TEST(JobPartTest, RowsCoveredListsEachRowOfARunOnce) {
  EXPECT_THAT(RowsCovered({1, 2, 3, 7, 6}, 2), ElementsAre(0, 1, 3));
  EXPECT_THAT(RowsCovered({5, 5}, 0), ElementsAre(5));  // 0 means one block per row
  EXPECT_TRUE(RowsCovered({}, 2).empty());
}

TEST(JobPartTest, ValidPartsPass) {
  EXPECT_TRUE(Check(Store({0, 1, 14, 15}, {0, 7})).ok());
  EXPECT_TRUE(Check(LoadByBlock({3, 4, 5}, {1, 2, 3})).ok());
  JobPart p = Store({0, 1}, {3});
  p.event_index = 3;
  p.region_epoch = 42;
  EXPECT_TRUE(Check(p).ok());
}

TEST(JobPartTest, EveryRuleHasItsCode) {
  struct Case {
    JobPart part;
    Code code;
    const char* message;
  };
  std::vector<Case> cases;
  auto add = [&](JobPart p, Code code, const char* message) {
    cases.push_back({std::move(p), code, message});
  };
  JobPart epoch = Store({0, 1}, {0});
  epoch.region_epoch = 41;
  add(epoch, Code::kFailedPrecondition, "region epoch");
  add(Store({}, {}), Code::kInvalidArgument, "no rows");
  add(Store({0, 1, 2}, {0}), Code::kInvalidArgument, "want 2");
  add(Store({0, 1, 2, 3, 4, 5, 6, 7}, {0, 1, 2, 3}), Code::kInvalidArgument, "exceed the limit");
  add(Store({0, 16}, {0}), Code::kOutOfRange, "gpu block 16");
  add(Store({0, 1}, {8}), Code::kOutOfRange, "row 8");
  JobPart event = Store({0, 1}, {0});
  event.event_index = 4;
  add(event, Code::kInvalidArgument, "event index 4");
  event.event_index = -2;
  add(event, Code::kInvalidArgument, "event index -2");
  JobPart store_by_block = LoadByBlock({0}, {1});
  store_by_block.direction = CopyDirection::kStore;
  add(store_by_block, Code::kInvalidArgument, "whole rows");
  JobPart short_blocks = LoadByBlock({0, 1}, {1, 2});
  short_blocks.gpu_blocks.pop_back();
  add(short_blocks, Code::kInvalidArgument, "region blocks");
  add(LoadByBlock({0}, {16}), Code::kOutOfRange, "region block 16");
  JobPart wrong_rows = LoadByBlock({0, 1}, {1, 2});
  wrong_rows.rows = {1};
  add(wrong_rows, Code::kInvalidArgument, "rows differ");
  for (const Case& c : cases) {
    const absl::Status s = Check(c.part);
    EXPECT_EQ(s.code(), c.code) << s;
    EXPECT_THAT(s.message(), HasSubstr(c.message)) << s;
  }
}

}  // namespace
}  // namespace kvoffload::daemon
