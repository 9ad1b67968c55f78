// The Submit edge: explicit lists, runs of rows and runs of single blocks become one JobPart,
// sized from the message before anything is allocated.
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
using Code = absl::StatusCode;

v1::BlockRun MakeRun(uint64_t gpu_block, uint64_t row, uint64_t num_rows, uint32_t first_block = 0,
                 uint64_t num_blocks = 0) {
  v1::BlockRun r;
  r.set_gpu_block(gpu_block);
  r.set_row(row);
  r.set_num_rows(num_rows);
  r.set_first_block(first_block);
  r.set_num_blocks(num_blocks);
  return r;
}

v1::Submit Part(v1::Direction direction, std::vector<v1::BlockRun> runs) {
  v1::Submit s;
  s.set_job_id(9);
  s.set_direction(direction);
  for (const v1::BlockRun& r : runs) *s.add_runs() = r;
  return s;
}

TEST(ConvertSubmitTest, RunsOfRowsExpandToWholeRows) {
  v1::Submit s = Part(v1::DIRECTION_STORE, {MakeRun(10, 4, 2)});
  s.add_gpu_blocks(0);
  s.add_gpu_blocks(1);
  s.add_rows(7);
  auto part = FromProto(s, /*blocks_per_row=*/2, /*max_blocks=*/100);
  ASSERT_TRUE(part.ok()) << part.status();
  EXPECT_THAT(part->rows, ElementsAre(7, 4, 5));
  EXPECT_THAT(part->gpu_blocks, ElementsAre(0, 1, 10, 11, 12, 13));
  EXPECT_TRUE(part->region_blocks.empty());
}

TEST(ConvertSubmitTest, BlockRunsAddressSingleBlocksOfRows) {
  // A whole row, then the tail of row 3 and the head of row 4 (bpr 4: region blocks 14..16).
  v1::Submit s = Part(v1::DIRECTION_LOAD, {MakeRun(0, 1, 1), MakeRun(20, 3, 0, 2, 3)});
  auto part = FromProto(s, /*blocks_per_row=*/4, /*max_blocks=*/100);
  ASSERT_TRUE(part.ok()) << part.status();
  EXPECT_THAT(part->gpu_blocks, ElementsAre(0, 1, 2, 3, 20, 21, 22));
  EXPECT_THAT(part->region_blocks, ElementsAre(4, 5, 6, 7, 14, 15, 16));
  EXPECT_THAT(part->rows, ElementsAre(1, 3, 4));
  EXPECT_EQ(part->rows, RowsCovered(part->region_blocks, 4));
}

TEST(ConvertSubmitTest, BadBlockRunsAreInvalidArgument) {
  struct Case {
    v1::Submit submit;
    const char* message;
  };
  const std::vector<Case> cases = {
      {Part(v1::DIRECTION_STORE, {MakeRun(0, 1, 0, 0, 2)}), "whole rows"},         // a store by block
      {Part(v1::DIRECTION_LOAD, {MakeRun(0, 1, 0, 4, 1)}), "first_block"},      // past the row
      {Part(v1::DIRECTION_LOAD, {MakeRun(0, 1, 1, 0, 2)}), "num_rows 0"},       // both counts
      {Part(v1::DIRECTION_LOAD, {MakeRun(0, 1, 1, 1, 0)}), "first_block 0"},    // offset, rows
      {Part(v1::DIRECTION_LOAD, {MakeRun(1, 0, 0, 0, UINT64_MAX)}), "overflow"},
      {Part(v1::DIRECTION_LOAD, {MakeRun(0, 0, 0, 0, 101)}), "exceed the limit"},
  };
  for (const Case& c : cases) {
    auto part = FromProto(c.submit, /*blocks_per_row=*/4, /*max_blocks=*/100);
    EXPECT_EQ(part.status().code(), Code::kInvalidArgument) << c.submit.DebugString();
    EXPECT_THAT(part.status().message(), HasSubstr(c.message)) << part.status();
  }
}

}  // namespace
}  // namespace kvoffload::daemon
