// The Submit edge: the wire's lists and runs become one JobPart as sent, nothing expanded (the
// rules are ValidatePart's, engine/job_part_test.cc).
#include "daemon/service/convert.h"

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace kvoffload::daemon {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

TEST(ConvertSubmitTest, ListsAndRunsAreCopiedAsSent) {
  v1::Submit s;
  s.set_job_id(9);
  s.set_direction(v1::DIRECTION_LOAD);
  s.add_gpu_blocks(0);
  s.add_gpu_blocks(1);
  s.add_rows(7);
  v1::BlockRun* rows = s.add_runs();
  rows->set_gpu_block(10);
  rows->set_row(4);
  rows->set_num_rows(1u << 20);  // a million rows stay one run
  v1::BlockRun* range = s.add_runs();
  range->set_gpu_block(20);
  range->set_row(3);
  range->set_first_block(2);
  range->set_num_blocks(3);
  s.set_event_index(2);
  s.set_region_epoch(77);
  auto part = FromProto(s);
  ASSERT_TRUE(part.ok()) << part.status();
  EXPECT_EQ(part->job_id, 9u);
  EXPECT_EQ(part->direction, CopyDirection::kLoad);
  EXPECT_THAT(part->gpu_blocks, ElementsAre(0, 1));
  EXPECT_THAT(part->rows, ElementsAre(7));
  ASSERT_EQ(part->runs.size(), 2u);
  EXPECT_EQ(part->runs[0].gpu_block, 10u);
  EXPECT_EQ(part->runs[0].row, 4u);
  EXPECT_EQ(part->runs[0].num_rows, 1u << 20);
  EXPECT_EQ(part->runs[1].first_block, 2u);
  EXPECT_EQ(part->runs[1].num_blocks, 3u);
  EXPECT_EQ(part->event_index, 2);
  EXPECT_EQ(part->region_epoch, 77u);
}

TEST(ConvertSubmitTest, DirectionMustBeStoreOrLoad) {
  v1::Submit s;
  s.set_job_id(3);
  auto part = FromProto(s);
  EXPECT_EQ(part.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(part.status().message(), HasSubstr("direction"));
}

}  // namespace
}  // namespace kvoffload::daemon
