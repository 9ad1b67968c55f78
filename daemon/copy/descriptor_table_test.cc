#include "daemon/copy/descriptor_table.h"

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "gtest/gtest.h"

namespace kvoffload::daemon {
namespace {

CopyJob TwoCopyJob(uint32_t slot, uint32_t blocks_per_row) {
  CopyJob job;
  job.slot_bytes = blocks_per_row * 1000;
  job.row_bytes = 8192;  // 2 slots rounded up to 4096
  job.slot = slot;
  job.blocks_per_row = blocks_per_row;
  return job;
}

TEST(DescriptorTableTest, OffsetsFollowTheLayout) {
  CopyJob job = TwoCopyJob(/*slot=*/1, /*blocks_per_row=*/2);
  job.rows = {3, 0};
  job.gpu_blocks = {7, 2, 5, 9};
  auto table = BuildDescriptorTable(job, /*num_blocks=*/10, /*bytes_per_block=*/1000);
  ASSERT_TRUE(table.ok()) << table.status();
  ASSERT_EQ(table->blocks.size(), 4u);
  // row × row_bytes + slot × slot_bytes + j × bytes_per_block
  EXPECT_EQ(table->blocks[0].gpu_block, 7u);
  EXPECT_EQ(table->blocks[0].host_offset, 3 * 8192 + 2000 + 0u);
  EXPECT_EQ(table->blocks[1].gpu_block, 2u);
  EXPECT_EQ(table->blocks[1].host_offset, 3 * 8192 + 2000 + 1000u);
  EXPECT_EQ(table->blocks[2].host_offset, 0 * 8192 + 2000 + 0u);
  EXPECT_EQ(table->blocks[3].host_offset, 0 * 8192 + 2000 + 1000u);
  EXPECT_EQ(table->host_extent, 3 * 8192 + 2000 + 2000u);
  EXPECT_EQ(table->total_bytes(), 4000u);
}

// Loads block by block: region block = row × blocks_per_row + block, any start and end.
TEST(DescriptorTableTest, RegionBlocksAddressSingleBlocksOfRows) {
  CopyJob job = TwoCopyJob(/*slot=*/1, /*blocks_per_row=*/2);
  job.rows = {3, 4};
  job.region_blocks = {7, 8, 9};  // row 3 block 1, row 4 blocks 0 and 1
  job.gpu_blocks = {1, 2, 3};
  auto table = BuildDescriptorTable(job, /*num_blocks=*/10, /*bytes_per_block=*/1000);
  ASSERT_TRUE(table.ok()) << table.status();
  ASSERT_EQ(table->blocks.size(), 3u);
  EXPECT_EQ(table->blocks[0].host_offset, 3 * 8192 + 2000 + 1000u);
  EXPECT_EQ(table->blocks[1].host_offset, 4 * 8192 + 2000 + 0u);
  EXPECT_EQ(table->blocks[2].host_offset, 4 * 8192 + 2000 + 1000u);
  EXPECT_EQ(table->host_extent, 4 * 8192 + 2000 + 2000u);
  job.region_blocks.pop_back();  // one region block per GPU block
  EXPECT_EQ(BuildDescriptorTable(job, 10, 1000).status().code(),
            absl::StatusCode::kInvalidArgument);
  job.region_blocks = {7, 8, 9};
  job.gpu_blocks = {1, 2, 10};  // past the registered blocks
  EXPECT_EQ(BuildDescriptorTable(job, 10, 1000).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(DescriptorTableTest, EmptyJobIsEmpty) {
  CopyJob job = TwoCopyJob(0, 1);
  auto table = BuildDescriptorTable(job, 10, 1000);
  ASSERT_TRUE(table.ok()) << table.status();
  EXPECT_TRUE(table->blocks.empty());
  EXPECT_EQ(table->host_extent, 0u);
}

TEST(DescriptorTableTest, RejectsBrokenInvariants) {
  {
    CopyJob job = TwoCopyJob(0, 2);
    job.rows = {0};
    job.gpu_blocks = {1};  // needs 2
    EXPECT_EQ(BuildDescriptorTable(job, 10, 1000).status().code(),
              absl::StatusCode::kInvalidArgument);
  }
  {
    CopyJob job = TwoCopyJob(0, 1);
    job.rows = {0};
    job.gpu_blocks = {10};  // not below num_blocks
    EXPECT_EQ(BuildDescriptorTable(job, 10, 1000).status().code(),
              absl::StatusCode::kInvalidArgument);
  }
  {
    CopyJob job = TwoCopyJob(0, 1);
    job.rows = {0};
    job.gpu_blocks = {1};
    EXPECT_EQ(BuildDescriptorTable(job, 10, 1001).status().code(),  // slot holds 1000
              absl::StatusCode::kInvalidArgument);
  }
  {
    CopyJob job = TwoCopyJob(/*slot=*/9, 1);  // 9 × 1000 + 1000 > 8192
    job.rows = {0};
    job.gpu_blocks = {1};
    EXPECT_EQ(BuildDescriptorTable(job, 10, 1000).status().code(),
              absl::StatusCode::kInvalidArgument);
  }
  {
    CopyJob job = TwoCopyJob(0, 0);
    EXPECT_EQ(BuildDescriptorTable(job, 10, 1000).status().code(),
              absl::StatusCode::kInvalidArgument);
  }
  {
    CopyJob job = TwoCopyJob(0, 1);
    job.rows = {UINT64_MAX / 4096};  // row × row_bytes overflows
    job.gpu_blocks = {1};
    EXPECT_EQ(BuildDescriptorTable(job, 10, 1000).status().code(),
              absl::StatusCode::kInvalidArgument);
  }
}

}  // namespace
}  // namespace kvoffload::daemon
