#include "daemon/copy/descriptor_table.h"

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace kvoffload::daemon {
namespace {

using ::testing::ElementsAre;

CopyJob TwoCopyJob(uint32_t slot, uint32_t blocks_per_row) {
  CopyJob job;
  job.slot_bytes = blocks_per_row * 1000;
  job.row_bytes = 8192;  // 2 slots rounded up to 4096
  job.slot = slot;
  job.blocks_per_row = blocks_per_row;
  return job;
}

std::vector<uint64_t> HostOffsets(const DescriptorTable& table) {
  std::vector<uint64_t> offsets;
  for (const BlockDescriptor& d : ExpandBlocks(table)) offsets.push_back(d.host_offset);
  return offsets;
}

TEST(DescriptorTableTest, OffsetsFollowTheLayout) {
  CopyJob job = TwoCopyJob(/*slot=*/1, /*blocks_per_row=*/2);
  job.runs = RunsOfLists({7, 2, 5, 9}, {3, 0}, 2);
  auto table = BuildDescriptorTable(job, /*num_blocks=*/10, /*bytes_per_block=*/1000);
  ASSERT_TRUE(table.ok()) << table.status();
  EXPECT_EQ(table->num_blocks, 4u);
  // row × row_bytes + slot × slot_bytes + j × bytes_per_block
  EXPECT_THAT(HostOffsets(*table), ElementsAre(3 * 8192 + 2000, 3 * 8192 + 3000, 0 * 8192 + 2000,
                                               0 * 8192 + 3000));
  std::vector<uint64_t> gpu;
  for (const BlockDescriptor& d : ExpandBlocks(*table)) gpu.push_back(d.gpu_block);
  EXPECT_THAT(gpu, ElementsAre(7, 2, 5, 9));
  EXPECT_EQ(table->host_extent, 3 * 8192 + 2000 + 2000u);
  EXPECT_EQ(table->total_bytes(), 4000u);
}

// A run that starts and ends inside rows: cut at every row boundary when the slot does not fill
// the row (rows are not back to back in the region).
TEST(DescriptorTableTest, RunsAreCutWhereRowsAreNotBackToBack) {
  CopyJob job = TwoCopyJob(/*slot=*/1, /*blocks_per_row=*/2);
  job.runs = {CopyRun{1, 7, 4}};  // row 3 block 1, rows 4 and 5 block 0
  auto table = BuildDescriptorTable(job, /*num_blocks=*/10, /*bytes_per_block=*/1000);
  ASSERT_TRUE(table.ok()) << table.status();
  EXPECT_THAT(table->runs,
              ElementsAre(RunDescriptor{1, 3 * 8192 + 3000, 1, 0},
                          RunDescriptor{2, 4 * 8192 + 2000, 2, 1},
                          RunDescriptor{4, 5 * 8192 + 2000, 1, 3}));
  EXPECT_EQ(table->host_extent, 5 * 8192 + 2000 + 2000u);
}

// One slot filling the row: a million blocks across rows are one table run.
TEST(DescriptorTableTest, RunsStayWholeWhereRowsAreBackToBack) {
  CopyJob job;
  job.blocks_per_row = 4;
  job.slot_bytes = 4096;
  job.row_bytes = 4096;
  job.runs = {CopyRun{0, 2, 1 << 20}};
  auto table = BuildDescriptorTable(job, /*num_blocks=*/1 << 20, /*bytes_per_block=*/1024);
  ASSERT_TRUE(table.ok()) << table.status();
  EXPECT_THAT(table->runs, ElementsAre(RunDescriptor{0, 2048, 1 << 20, 0}));
  EXPECT_EQ(table->host_extent, ((2 + (1u << 20) - 1) / 4 + 1) * 4096u);
}

// Runs that continue each other on both sides merge; a jump on either side does not.
TEST(DescriptorTableTest, AdjacentRunsMerge) {
  CopyJob job;
  job.blocks_per_row = 1;
  job.slot_bytes = 4096;
  job.row_bytes = 4096;
  job.runs = {CopyRun{0, 0, 2}, CopyRun{2, 2, 1}, CopyRun{4, 3, 1}, CopyRun{5, 9, 1}};
  auto table = BuildDescriptorTable(job, 10, 4096);
  ASSERT_TRUE(table.ok()) << table.status();
  EXPECT_THAT(table->runs, ElementsAre(RunDescriptor{0, 0, 3, 0}, RunDescriptor{4, 3 * 4096, 1, 3},
                                       RunDescriptor{5, 9 * 4096, 1, 4}));
}

TEST(DescriptorTableTest, EmptyJobIsEmpty) {
  CopyJob job = TwoCopyJob(0, 1);
  auto table = BuildDescriptorTable(job, 10, 1000);
  ASSERT_TRUE(table.ok()) << table.status();
  EXPECT_TRUE(table->runs.empty());
  EXPECT_EQ(table->num_blocks, 0u);
  EXPECT_EQ(table->host_extent, 0u);
}

TEST(DescriptorTableTest, RejectsBrokenInvariants) {
  auto code = [](const CopyJob& job, uint64_t bpb) {
    return BuildDescriptorTable(job, 10, bpb).status().code();
  };
  constexpr auto kInvalid = absl::StatusCode::kInvalidArgument;
  {
    CopyJob job = TwoCopyJob(0, 1);
    job.runs = {CopyRun{9, 0, 2}};  // GPU block 10 is not below num_blocks
    EXPECT_EQ(code(job, 1000), kInvalid);
    job.runs = {CopyRun{1, 0, 0}};  // empty
    EXPECT_EQ(code(job, 1000), kInvalid);
    job.runs = {CopyRun{UINT64_MAX, 0, 2}};  // overflows
    EXPECT_EQ(code(job, 1000), kInvalid);
  }
  {
    CopyJob job = TwoCopyJob(0, 1);
    job.runs = {CopyRun{1, 0, 1}};
    EXPECT_EQ(code(job, 1001), kInvalid);  // slot holds 1000
    EXPECT_EQ(code(job, 0), kInvalid);
  }
  {
    CopyJob job = TwoCopyJob(/*slot=*/9, 1);  // 9 × 1000 + 1000 > 8192
    job.runs = {CopyRun{1, 0, 1}};
    EXPECT_EQ(code(job, 1000), kInvalid);
  }
  EXPECT_EQ(code(TwoCopyJob(0, 0), 1000), kInvalid);
  {
    CopyJob job = TwoCopyJob(0, 1);
    job.runs = {CopyRun{1, UINT64_MAX / 4096, 1}};  // row × row_bytes overflows
    EXPECT_EQ(code(job, 1000), kInvalid);
    job.runs = {CopyRun{1, UINT64_MAX, 1}};  // region block + 1 overflows
    EXPECT_EQ(code(job, 1000), kInvalid);
  }
}

}  // namespace
}  // namespace kvoffload::daemon
