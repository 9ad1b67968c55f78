#include "daemon/copy/copy_plan.h"

#include <vector>

#include "gtest/gtest.h"

namespace kvoffload::daemon {
namespace {

DescriptorTable Table(uint64_t bpb, std::vector<std::pair<uint64_t, uint64_t>> blocks) {
  DescriptorTable t;
  t.bytes_per_block = bpb;
  for (auto [gpu, host] : blocks) t.blocks.push_back(BlockDescriptor{gpu, host});
  return t;
}

TEST(ValidateTensorGeometryTest, OneRuleForEveryBackend) {
  EXPECT_TRUE(ValidateTensorGeometry(0, 0, 4, 4096, 4096, 4 * 4096).ok());
  // A single block may have any stride (a size-1 dimension's stride is arbitrary).
  EXPECT_TRUE(ValidateTensorGeometry(0, 128, 1, 0, 4096, 128 + 4096).ok());
  absl::Status overlap = ValidateTensorGeometry(3, 0, 2, 1024, 4096, 1 << 20);
  EXPECT_EQ(overlap.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(overlap.message().find("tensor 3"), std::string::npos);
  EXPECT_EQ(ValidateTensorGeometry(0, 0, 0, 4096, 4096, 1 << 20).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ValidateTensorGeometry(0, 0, 4, 4096, 0, 1 << 20).code(),
            absl::StatusCode::kInvalidArgument);
  // Ends one byte past the allocation.
  EXPECT_EQ(ValidateTensorGeometry(0, 1, 4, 4096, 4096, 4 * 4096).code(),
            absl::StatusCode::kInvalidArgument);
  // Overflowing arithmetic is refused, not wrapped.
  EXPECT_EQ(ValidateTensorGeometry(0, 0, uint64_t{1} << 40, uint64_t{1} << 40, 4096, ~uint64_t{0})
                .code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ValidateTensorGeometry(0, ~uint64_t{0}, 1, 0, 1, ~uint64_t{0}).code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(VisitSegmentsTest, MergesOnlyWhatIsContiguousOnBothSides) {
  // One tensor, block-first: stride == page, so consecutive blocks into consecutive rows merge.
  std::vector<TensorDescriptor> one = {{0x10000, 4096, 4096, 0}};
  DescriptorTable t = Table(4096, {{0, 0}, {1, 4096}, {2, 8192}, {7, 12288}, {8, 65536}});
  std::vector<Segment> got;
  VisitSegments(t.blocks.data(), t.blocks.data() + t.blocks.size(), one,
                [&](const Segment& s) { got.push_back(s); });
  ASSERT_EQ(got.size(), 3u);
  EXPECT_EQ(got[0].gpu_address, 0x10000u);
  EXPECT_EQ(got[0].host_offset, 0u);
  EXPECT_EQ(got[0].bytes, 3 * 4096u);
  EXPECT_EQ(got[1].gpu_address, 0x10000u + 7 * 4096);
  EXPECT_EQ(got[1].bytes, 4096u);
  EXPECT_EQ(got[2].host_offset, 65536u);

  // Two tensors (K and V of a layer, apart on the GPU): pages never merge, block-major order.
  std::vector<TensorDescriptor> kv = {{0x100000, 8192, 4096, 0}, {0x900000, 8192, 4096, 4096}};
  DescriptorTable t2 = Table(8192, {{0, 0}, {1, 8192}});
  got.clear();
  VisitSegments(t2.blocks.data(), t2.blocks.data() + t2.blocks.size(), kv,
                [&](const Segment& s) { got.push_back(s); });
  ASSERT_EQ(got.size(), 4u);
  EXPECT_EQ(got[1].gpu_address, 0x900000u);
  EXPECT_EQ(got[1].host_offset, 4096u);
  EXPECT_EQ(got[2].gpu_address, 0x100000u + 8192);
  EXPECT_EQ(got[3].host_offset, 8192u + 4096);
  uint64_t total = 0;
  for (const Segment& s : got) total += s.bytes;
  EXPECT_EQ(total, t2.total_bytes());
}

TEST(CountHostRunsTest, AdjacentRowsMerge) {
  EXPECT_EQ(CountHostRuns(Table(100, {})), 0u);
  EXPECT_EQ(CountHostRuns(Table(100, {{5, 0}, {3, 100}, {9, 200}})), 1u);
  EXPECT_EQ(CountHostRuns(Table(100, {{5, 0}, {3, 300}, {9, 400}, {1, 100}})), 3u);
}

TEST(PlanStagedChunksTest, PacksWholeBlocksAndOneCopyPerHostRun) {
  // 5 blocks of 100 bytes, chunks of 250 bytes → 2 blocks per chunk → 3 chunks.
  DescriptorTable t = Table(100, {{0, 1000}, {1, 1100}, {2, 5000}, {3, 5100}, {4, 5200}});
  absl::StatusOr<StagedPlan> plan = PlanStagedChunks(t, 250, 2, 1);
  ASSERT_TRUE(plan.ok()) << plan.status();
  ASSERT_EQ(plan->chunks.size(), 3u);
  EXPECT_EQ(plan->chunks[0].block_begin, 0u);
  EXPECT_EQ(plan->chunks[0].block_end, 2u);
  EXPECT_EQ(plan->chunks[0].buffer, 1u);  // starts at first_buffer, alternates
  EXPECT_EQ(plan->chunks[1].buffer, 0u);
  EXPECT_EQ(plan->chunks[2].buffer, 1u);
  // Chunk 0: one run (1000..1200). Chunk 1: blocks 2, 3 one run (5000..5200); a run never
  // crosses a chunk, so block 4 starts a new copy in chunk 2.
  ASSERT_EQ(plan->copies.size(), 3u);
  EXPECT_EQ(plan->copies[0].host_offset, 1000u);
  EXPECT_EQ(plan->copies[0].staging_offset, 0u);
  EXPECT_EQ(plan->copies[0].bytes, 200u);
  EXPECT_EQ(plan->copies[1].host_offset, 5000u);
  EXPECT_EQ(plan->copies[1].bytes, 200u);
  EXPECT_EQ(plan->copies[2].host_offset, 5200u);
  EXPECT_EQ(plan->copies[2].staging_offset, 0u);
  EXPECT_EQ(plan->chunks[2].copy_begin, 2u);
  EXPECT_EQ(plan->chunks[2].copy_end, 3u);

  // Scattered rows: one copy per block, staging offsets follow the block's place in its chunk.
  DescriptorTable s = Table(100, {{0, 900}, {1, 100}, {2, 500}});
  plan = PlanStagedChunks(s, 1000, 3, 0);
  ASSERT_TRUE(plan.ok());
  ASSERT_EQ(plan->chunks.size(), 1u);
  ASSERT_EQ(plan->copies.size(), 3u);
  EXPECT_EQ(plan->copies[2].host_offset, 500u);
  EXPECT_EQ(plan->copies[2].staging_offset, 200u);

  EXPECT_EQ(PlanStagedChunks(t, 99, 2, 0).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(PlanStagedChunks(t, 1000, 0, 0).status().code(), absl::StatusCode::kInvalidArgument);
  absl::StatusOr<StagedPlan> empty = PlanStagedChunks(Table(100, {}), 1000, 2, 0);
  ASSERT_TRUE(empty.ok());
  EXPECT_TRUE(empty->chunks.empty());
}

TEST(ChooseCopyPathTest, PicksFromTheJobsShapeWhereSmPathsAreAllowed) {
  CopyPathPolicy policy;
  policy.sm_paths = true;
  policy.copy_engine_min_segment_bytes = 1 << 20;
  policy.staged_min_run_bytes = 64 << 10;
  policy.staging_chunk_bytes = 32 << 20;
  // Per-layer 32 KiB pages, rows contiguous: staged.
  std::vector<TensorDescriptor> layers;
  for (int l = 0; l < 8; ++l) layers.push_back({uint64_t(l) << 32, 32768, 32768, l * 32768ull});
  const uint64_t bpb = 8 * 32768;
  DescriptorTable contiguous = Table(bpb, {{0, 0}, {5, bpb}, {9, 2 * bpb}});
  EXPECT_EQ(ChooseCopyPath(contiguous, layers, policy), CopyPath::kStaged);
  // 2 MiB pages: every page goes by DMA directly.
  std::vector<TensorDescriptor> big = {{0, 4 << 20, 2 << 20, 0}, {1ull << 40, 4 << 20, 2 << 20, 2 << 20}};
  EXPECT_EQ(ChooseCopyPath(Table(4 << 20, {{0, 0}, {3, 8 << 20}}), big, policy),
            CopyPath::kCopyEngine);
  // One tensor with 4 KiB pages, but consecutive blocks into consecutive rows: long segments.
  std::vector<TensorDescriptor> block_first = {{0, 4096, 4096, 0}};
  std::vector<std::pair<uint64_t, uint64_t>> run;
  for (uint64_t i = 0; i < 1024; ++i) run.push_back({i, i * 4096});
  EXPECT_EQ(ChooseCopyPath(Table(4096, run), block_first, policy), CopyPath::kCopyEngine);
  // The same pages in scattered rows: short host runs, the kernel wins.
  std::vector<std::pair<uint64_t, uint64_t>> scattered;
  for (uint64_t i = 0; i < 1024; ++i) scattered.push_back({i, (1023 - i) * 4096});
  EXPECT_EQ(ChooseCopyPath(Table(4096, scattered), block_first, policy), CopyPath::kKernel);
  // A block larger than a staging chunk is never staged.
  policy.staging_chunk_bytes = bpb - 1;
  EXPECT_EQ(ChooseCopyPath(contiguous, layers, policy), CopyPath::kKernel);
  EXPECT_STREQ(CopyPathName(CopyPath::kStaged), "staged");
}

// No MPS, no explicit flag: every shape goes by copy engines, the ones the SM paths would win too.
TEST(ChooseCopyPathTest, WithoutSmPathsEveryJobGoesByCopyEngines) {
  const CopyPathPolicy policy;  // the default: sm_paths = false
  EXPECT_FALSE(policy.sm_paths);
  std::vector<TensorDescriptor> layers;
  for (int l = 0; l < 8; ++l) layers.push_back({uint64_t(l) << 32, 32768, 32768, l * 32768ull});
  const uint64_t bpb = 8 * 32768;
  EXPECT_EQ(ChooseCopyPath(Table(bpb, {{0, 0}, {5, bpb}, {9, 2 * bpb}}), layers, policy),
            CopyPath::kCopyEngine);
  std::vector<TensorDescriptor> block_first = {{0, 4096, 4096, 0}};
  std::vector<std::pair<uint64_t, uint64_t>> scattered;
  for (uint64_t i = 0; i < 1024; ++i) scattered.push_back({i, (1023 - i) * 4096});
  EXPECT_EQ(ChooseCopyPath(Table(4096, scattered), block_first, policy), CopyPath::kCopyEngine);
  EXPECT_EQ(ChooseCopyPath(Table(4096, {}), block_first, policy), CopyPath::kCopyEngine);
}

}  // namespace
}  // namespace kvoffload::daemon
