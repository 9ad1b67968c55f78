#include "daemon/copy/copy_plan.h"

#include <algorithm>
#include <random>
#include <tuple>
#include <vector>

#include "gtest/gtest.h"

namespace kvoffload::daemon {
namespace {

// A table of one-block runs (as a list of scattered blocks would give).
DescriptorTable Table(uint64_t bpb, std::vector<std::pair<uint64_t, uint64_t>> blocks) {
  DescriptorTable t;
  t.bytes_per_block = bpb;
  for (auto [gpu, host] : blocks) {
    t.runs.push_back(RunDescriptor{gpu, host, 1, t.num_blocks});
    ++t.num_blocks;
  }
  return t;
}

std::vector<Segment> Segments(const DescriptorTable& t, const std::vector<TensorDescriptor>& ts,
                              uint64_t first, uint64_t last) {
  std::vector<Segment> got;
  VisitSegments(t, first, last, ts, [&](const Segment& s) { got.push_back(s); });
  return got;
}
std::vector<Segment> Segments(const DescriptorTable& t, const std::vector<TensorDescriptor>& ts) {
  return Segments(t, ts, 0, t.num_blocks);
}

// The reference: every page of every block, merged greedily (what the planner did over its
// per-block list before runs).
std::vector<Segment> PageByPage(const DescriptorTable& t, const std::vector<TensorDescriptor>& ts,
                                uint64_t first, uint64_t last) {
  std::vector<Segment> got;
  Segment open;
  const std::vector<BlockDescriptor> blocks = ExpandBlocks(t);
  for (uint64_t i = first; i < last; ++i) {
    for (const TensorDescriptor& d : ts) {
      const uint64_t gpu = d.gpu_address + blocks[i].gpu_block * d.block_stride_bytes;
      const uint64_t host = blocks[i].host_offset + d.host_offset;
      if (open.bytes != 0 && open.gpu_address + open.bytes == gpu &&
          open.host_offset + open.bytes == host) {
        open.bytes += d.page_bytes;
        continue;
      }
      if (open.bytes != 0) got.push_back(open);
      open = Segment{gpu, host, d.page_bytes};
    }
  }
  if (open.bytes != 0) got.push_back(open);
  return got;
}

// vLLM's per-layer caches: `n` tensors of `page`-byte pages (stride = page), each in an
// allocation of its own, a block's pages back to back in the region.
std::vector<TensorDescriptor> PerLayer(uint64_t n, uint64_t page) {
  std::vector<TensorDescriptor> v;
  for (uint64_t i = 0; i < n; ++i) v.push_back({(i + 1) << 32, page, page, i * page});
  return v;
}

// A one-slot engine of two blocks a row (rows back to back), no runs yet.
CopyJob TwoBlocksARow(uint64_t bpb) {
  CopyJob job;
  job.blocks_per_row = 2;
  job.slot_bytes = 2 * bpb;
  job.row_bytes = 2 * bpb;
  return job;
}

std::vector<StridedSegment> Strided(const DescriptorTable& t,
                                    const std::vector<TensorDescriptor>& ts, uint64_t first,
                                    uint64_t last, uint64_t min_rows) {
  std::vector<StridedSegment> got;
  VisitStridedSegments(t, first, last, ts, min_rows,
                       [&](const StridedSegment& s) { got.push_back(s); });
  return got;
}

// Every `unit`-byte piece a list of segments moves, as (host offset, GPU address), sorted: two
// lists move the same bytes to the same places exactly when these agree.
std::vector<std::pair<uint64_t, uint64_t>> Units(const std::vector<StridedSegment>& segs,
                                                 uint64_t unit) {
  std::vector<std::pair<uint64_t, uint64_t>> got;
  for (const StridedSegment& s : segs) {
    for (uint64_t r = 0; r < s.rows; ++r) {
      for (uint64_t b = 0; b < s.bytes; b += unit) {
        got.emplace_back(s.host_offset + r * s.host_pitch + b, s.gpu_address + r * s.gpu_pitch + b);
      }
    }
  }
  std::sort(got.begin(), got.end());
  return got;
}
std::vector<StridedSegment> AsStrided(const std::vector<Segment>& segs) {
  std::vector<StridedSegment> got;
  for (const Segment& s : segs) got.push_back({s.gpu_address, 0, s.host_offset, 0, s.bytes, 1});
  return got;
}

bool SameSegments(const std::vector<Segment>& a, const std::vector<Segment>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::tie(a[i].gpu_address, a[i].host_offset, a[i].bytes) !=
        std::tie(b[i].gpu_address, b[i].host_offset, b[i].bytes)) {
      return false;
    }
  }
  return true;
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
  std::vector<Segment> got = Segments(t, one);
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
  got = Segments(t2, kv);
  ASSERT_EQ(got.size(), 4u);
  EXPECT_EQ(got[1].gpu_address, 0x900000u);
  EXPECT_EQ(got[1].host_offset, 4096u);
  EXPECT_EQ(got[2].gpu_address, 0x100000u + 8192);
  EXPECT_EQ(got[3].host_offset, 8192u + 4096);
  uint64_t total = 0;
  for (const Segment& s : got) total += s.bytes;
  EXPECT_EQ(total, t2.total_bytes());
}

// Cross-layer blocks (a block's tensors back to back on the GPU, stride = the block): a run of
// consecutive blocks into consecutive region blocks is one segment across tensors and rows.
TEST(VisitSegmentsTest, MergesAcrossTensorsAndRowsWhereBothSidesAreContiguous) {
  std::vector<TensorDescriptor> cross = {{0x100000, 8192, 4096, 0}, {0x101000, 8192, 4096, 4096}};
  CopyJob job;
  job.blocks_per_row = 2;
  job.slot_bytes = 2 * 8192;
  job.row_bytes = 2 * 8192;  // one slot filling the row: rows back to back
  job.runs = {CopyRun{3, 1, 5}};  // starts mid-row 0, ends mid-row 2
  auto table = BuildDescriptorTable(job, 16, 8192);
  ASSERT_TRUE(table.ok()) << table.status();
  std::vector<Segment> got = Segments(*table, cross);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].gpu_address, 0x100000u + 3 * 8192);
  EXPECT_EQ(got[0].host_offset, 8192u);
  EXPECT_EQ(got[0].bytes, 5 * 8192u);
  EXPECT_TRUE(SameSegments(got, PageByPage(*table, cross, 0, table->num_blocks)));
  // The same blocks, two slots per row: one segment per row the run touches.
  job.row_bytes = 4 * 8192;
  table = BuildDescriptorTable(job, 16, 8192);
  ASSERT_TRUE(table.ok()) << table.status();
  got = Segments(*table, cross);
  ASSERT_EQ(got.size(), 3u);
  EXPECT_EQ(got[0].bytes, 8192u);
  EXPECT_EQ(got[1].host_offset, 4 * 8192u);
  EXPECT_EQ(got[1].bytes, 2 * 8192u);
  EXPECT_EQ(got[2].bytes, 2 * 8192u);
  EXPECT_TRUE(SameSegments(got, PageByPage(*table, cross, 0, table->num_blocks)));
}

// Runs give exactly the segments the page-by-page merge gives, for every tensor layout (block
// contiguous, each block contiguous, pages apart), consecutive and random blocks, runs starting
// mid-row, one or several slots, and any slice [first, last) of the job (the host backend's
// chunks).
TEST(VisitSegmentsTest, RunsGiveThePageByPageSegments) {
  std::mt19937_64 rng(17);
  auto pick = [&](uint64_t n) { return std::uniform_int_distribution<uint64_t>(0, n - 1)(rng); };
  const uint64_t kBlocks = 64;
  for (int iteration = 0; iteration < 400; ++iteration) {
    // Tensors: 1..3, page 512 or 1024 bytes, laid out in one of three ways.
    const size_t num_tensors = 1 + pick(3);
    const int layout = static_cast<int>(pick(3));
    std::vector<TensorDescriptor> tensors;
    uint64_t bpb = 0;
    for (size_t i = 0; i < num_tensors; ++i) {
      const uint64_t page = 512u << pick(2);
      tensors.push_back({0, 0, page, bpb});
      bpb += page;
    }
    for (size_t i = 0; i < num_tensors; ++i) {
      TensorDescriptor& t = tensors[i];
      if (layout == 0) {  // cross-layer: a block is one span, blocks back to back
        t.gpu_address = 0x1000000 + t.host_offset;
        t.block_stride_bytes = bpb;
      } else if (layout == 1) {  // each block one span, blocks apart
        t.gpu_address = 0x1000000 + t.host_offset;
        t.block_stride_bytes = 2 * bpb;
      } else {  // per-layer: each tensor its own allocation, stride = its page
        t.gpu_address = (uint64_t{i} + 1) << 32;
        t.block_stride_bytes = t.page_bytes;
      }
    }
    CopyJob job;
    job.blocks_per_row = static_cast<uint32_t>(1 + pick(4));
    job.slot_bytes = job.blocks_per_row * bpb;
    const uint32_t slots = static_cast<uint32_t>(1 + pick(2));
    job.slot = static_cast<uint32_t>(pick(slots));
    job.row_bytes = slots * job.slot_bytes;
    const bool consecutive = pick(2) == 0;
    uint64_t gpu = pick(8);
    for (int r = 0, n = static_cast<int>(1 + pick(6)); r < n; ++r) {
      const uint64_t len = 1 + pick(6);
      if (!consecutive) gpu = pick(kBlocks - len);
      const uint64_t region = consecutive && !job.runs.empty()
                                  ? job.runs.back().region_block + job.runs.back().num_blocks
                                  : pick(40);
      if (gpu + len > kBlocks) break;
      job.runs.push_back(CopyRun{gpu, region, len});
      gpu += len;
    }
    if (job.runs.empty()) continue;
    auto table = BuildDescriptorTable(job, kBlocks, bpb);
    ASSERT_TRUE(table.ok()) << table.status();
    const uint64_t first = pick(table->num_blocks);
    const uint64_t last = first + 1 + pick(table->num_blocks - first);
    ASSERT_TRUE(SameSegments(Segments(*table, tensors),
                             PageByPage(*table, tensors, 0, table->num_blocks)))
        << "iteration " << iteration << " layout " << layout;
    ASSERT_TRUE(SameSegments(Segments(*table, tensors, first, last),
                             PageByPage(*table, tensors, first, last)))
        << "iteration " << iteration << " slice " << first << ".." << last;
    // The strided form moves the same 512-byte units to the same places; its 2D runs have at
    // least min_rows rows whose pages never overlap on either side.
    const uint64_t min_rows = pick(4);
    const std::vector<StridedSegment> strided =
        Strided(*table, tensors, first, last, min_rows);
    ASSERT_EQ(Units(strided, 512), Units(AsStrided(PageByPage(*table, tensors, first, last)), 512))
        << "iteration " << iteration << " slice " << first << ".." << last << " min_rows "
        << min_rows;
    for (const StridedSegment& s : strided) {
      if (s.rows == 1) continue;
      EXPECT_GE(s.rows, std::max<uint64_t>(min_rows, 2));
      EXPECT_NE(min_rows, 0u);
      EXPECT_GE(s.gpu_pitch, s.bytes);
      EXPECT_GE(s.host_pitch, s.bytes);
    }
  }
}

// Random blocks of a block-first tensor merge only where they happen to be consecutive;
// consecutive blocks into consecutive rows of a one-slot engine are one segment.
TEST(VisitSegmentsTest, RandomVersusConsecutiveBlocks) {
  std::vector<TensorDescriptor> one = {{0x10000, 4096, 4096, 0}};
  CopyJob job;
  job.blocks_per_row = 1;
  job.slot_bytes = 4096;
  job.row_bytes = 4096;
  job.runs = {CopyRun{0, 10, 1000}};
  auto table = BuildDescriptorTable(job, 1000, 4096);
  ASSERT_TRUE(table.ok());
  EXPECT_EQ(Segments(*table, one).size(), 1u);
  job.runs = RunsOfLists({5, 2, 9, 3}, {0, 1, 2, 3}, 1);
  table = BuildDescriptorTable(job, 1000, 4096);
  ASSERT_TRUE(table.ok());
  EXPECT_EQ(Segments(*table, one).size(), 4u);
}

// vLLM's per-layer caches (a tensor per layer and K/V, stride = page): consecutive GPU blocks
// into consecutive rows are one 2D copy per tensor, however the job's runs cut them; a slot of a
// two-slot engine strides by the row; random blocks stay pages; a short stretch stays pages.
TEST(VisitStridedSegmentsTest, PerLayerStretchesAreOneStridedSegmentPerTensor) {
  const uint64_t page = 4096;
  const std::vector<TensorDescriptor> per_layer = PerLayer(4, page);
  const uint64_t bpb = 4 * page;
  CopyJob job = TwoBlocksARow(bpb);
  // GPU blocks 10..17 into region blocks 4..11 (rows 2..5), cut into three runs.
  job.runs = {CopyRun{10, 4, 3}, CopyRun{13, 7, 1}, CopyRun{14, 8, 4}};
  auto table = BuildDescriptorTable(job, 64, bpb);
  ASSERT_TRUE(table.ok()) << table.status();
  std::vector<StridedSegment> got = Strided(*table, per_layer, 0, table->num_blocks, 2);
  ASSERT_EQ(got.size(), 4u);
  for (uint64_t i = 0; i < 4; ++i) {
    EXPECT_EQ(got[i].gpu_address, ((i + 1) << 32) + 10 * page);
    EXPECT_EQ(got[i].gpu_pitch, page);
    EXPECT_EQ(got[i].host_offset, 4 * bpb + i * page);
    EXPECT_EQ(got[i].host_pitch, bpb);
    EXPECT_EQ(got[i].bytes, page);
    EXPECT_EQ(got[i].rows, 8u);
  }
  // min_rows above the stretch: the pages, as VisitSegments gives them (8 blocks × 4 tensors).
  got = Strided(*table, per_layer, 0, table->num_blocks, 9);
  EXPECT_EQ(got.size(), 32u);
  for (const StridedSegment& s : got) EXPECT_EQ(s.rows, 1u);
  EXPECT_EQ(Strided(*table, per_layer, 0, table->num_blocks, 0).size(), 32u);

  // Slot 1 of a two-slot engine, one block a row: its blocks are row_bytes apart.
  job.blocks_per_row = 1;
  job.slot_bytes = bpb;
  job.row_bytes = 2 * bpb;
  job.slot = 1;
  job.runs = {CopyRun{20, 3, 5}};
  table = BuildDescriptorTable(job, 64, bpb);
  ASSERT_TRUE(table.ok()) << table.status();
  got = Strided(*table, per_layer, 0, table->num_blocks, 2);
  ASSERT_EQ(got.size(), 4u);
  EXPECT_EQ(got[0].host_offset, 3 * 2 * bpb + bpb);
  EXPECT_EQ(got[0].host_pitch, 2 * bpb);
  EXPECT_EQ(got[0].gpu_pitch, page);
  EXPECT_EQ(got[0].rows, 5u);

  // Random blocks: no two consecutive on the GPU, so pages only.
  job.slot = 0;
  job.runs = RunsOfLists({5, 2, 9, 3}, {0, 1, 2, 3}, 1);
  table = BuildDescriptorTable(job, 64, bpb);
  ASSERT_TRUE(table.ok()) << table.status();
  got = Strided(*table, per_layer, 0, table->num_blocks, 2);
  EXPECT_EQ(got.size(), 16u);
  for (const StridedSegment& s : got) EXPECT_EQ(s.rows, 1u);
}

// A block that is one span on the GPU but apart from the next (vLLM's cross-layer tensor with
// padding): one 2D copy of whole blocks; blocks back to back on the GPU: one plain segment.
TEST(VisitStridedSegmentsTest, BlockSpansStrideAsWholeBlocks) {
  const uint64_t bpb = 8192;
  std::vector<TensorDescriptor> padded = {{0x100000, 2 * bpb, 4096, 0},
                                          {0x100000 + 4096, 2 * bpb, 4096, 4096}};
  CopyJob job;
  job.blocks_per_row = 1;
  job.slot_bytes = bpb;
  job.row_bytes = bpb;
  job.runs = {CopyRun{2, 0, 6}};
  auto table = BuildDescriptorTable(job, 16, bpb);
  ASSERT_TRUE(table.ok()) << table.status();
  std::vector<StridedSegment> got = Strided(*table, padded, 0, table->num_blocks, 2);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].gpu_address, 0x100000 + 2 * 2 * bpb);
  EXPECT_EQ(got[0].gpu_pitch, 2 * bpb);
  EXPECT_EQ(got[0].host_pitch, bpb);
  EXPECT_EQ(got[0].bytes, bpb);
  EXPECT_EQ(got[0].rows, 6u);
  // Two tensors that alias each other's pages (tensor 1's block b is tensor 0's block b + 1):
  // a block is one span, but blocks overlap on the GPU, so no row of a whole block; one 2D copy
  // per tensor, each no wider than its pitches.
  std::vector<TensorDescriptor> aliased = {{0x100000, 4096, 4096, 0},
                                           {0x100000 + 4096, 4096, 4096, 4096}};
  got = Strided(*table, aliased, 0, table->num_blocks, 2);
  ASSERT_EQ(got.size(), 2u);
  for (const StridedSegment& s : got) {
    EXPECT_EQ(s.rows, 6u);
    EXPECT_EQ(s.bytes, 4096u);
    EXPECT_EQ(s.gpu_pitch, 4096u);
    EXPECT_EQ(s.host_pitch, bpb);
  }
  EXPECT_EQ(got[1].gpu_address, 0x100000 + 4096 + 2 * 4096);
  EXPECT_EQ(got[1].host_offset, 4096u);
  EXPECT_EQ(Units(got, 512), Units(AsStrided(PageByPage(*table, aliased, 0, table->num_blocks)),
                                   512));
  std::vector<TensorDescriptor> packed = {{0x100000, bpb, bpb, 0}};
  got = Strided(*table, packed, 0, table->num_blocks, 2);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].rows, 1u);
  EXPECT_EQ(got[0].bytes, 6 * bpb);
}

// The estimate from the runs alone is what the visit makes: random blocks a copy per page,
// consecutive blocks cut into runs by rows one 2D copy per tensor, contiguous blocks a copy per
// run; a stretch shorter than min_rows pages.
TEST(EstimateCopiesTest, MatchesTheVisitForRandomAndConsecutiveBlocks) {
  const uint64_t page = 4096;
  const std::vector<TensorDescriptor> per_layer = PerLayer(4, page);
  const uint64_t bpb = 4 * page;
  CopyJob job = TwoBlocksARow(bpb);
  job.runs = {CopyRun{10, 4, 3}, CopyRun{13, 7, 1}, CopyRun{14, 8, 4}};  // one stretch of 8
  auto table = BuildDescriptorTable(job, 64, bpb);
  ASSERT_TRUE(table.ok()) << table.status();
  EXPECT_EQ(EstimateCopies(*table, per_layer, 2), 4u);
  EXPECT_EQ(EstimateCopies(*table, per_layer, 2),
            Strided(*table, per_layer, 0, table->num_blocks, 2).size());
  EXPECT_EQ(EstimateCopies(*table, per_layer, 0), 32u);  // no 2D copies: a copy per page
  EXPECT_EQ(EstimateCopies(*table, per_layer, 9), 32u);  // a stretch too short for 2D
  // Random GPU blocks into consecutive rows of a one-block-a-row engine: a copy per page.
  job.blocks_per_row = 1;
  job.slot_bytes = bpb;
  job.row_bytes = bpb;
  job.runs = RunsOfLists({7, 2, 40, 3, 19}, {0, 1, 2, 3, 4}, 1);
  table = BuildDescriptorTable(job, 64, bpb);
  ASSERT_TRUE(table.ok()) << table.status();
  EXPECT_EQ(EstimateCopies(*table, per_layer, 2), 20u);
  EXPECT_EQ(EstimateCopies(*table, per_layer, 2),
            Strided(*table, per_layer, 0, table->num_blocks, 2).size());
  // Blocks contiguous on the GPU (one cross-layer tensor): a copy per run at most.
  std::vector<TensorDescriptor> packed = {{0x10000, bpb, bpb, 0}};
  EXPECT_EQ(EstimateCopies(*table, packed, 2), table->runs.size());
  EXPECT_EQ(EstimateCopies(DescriptorTable{}, per_layer, 2), 0u);
  EXPECT_EQ(EstimateCopies(*table, {}, 2), 0u);
}

// Random jobs (runs of random length at random or following GPU blocks, into random or
// following region blocks, one to four blocks a row, a slot of a two-slot row): the estimate is
// the visit's count exactly where no two pages merge (per-layer tensors, a page never adjacent to
// another on both sides), for 2D copies from 2 or 3 blocks and for none.
TEST(EstimateCopiesTest, EqualsTheVisitOnRandomJobsWherePagesNeverMerge) {
  const uint64_t page = 4096;
  const std::vector<TensorDescriptor> per_layer = PerLayer(3, page);
  const uint64_t bpb = 3 * page;
  std::mt19937_64 rng(17);
  for (int round = 0; round < 2000; ++round) {
    CopyJob job;
    job.blocks_per_row = 1 + rng() % 4;
    job.slot_bytes = job.blocks_per_row * bpb;
    job.row_bytes = 2 * job.slot_bytes;
    job.slot = rng() % 2;
    uint64_t gpu = rng() % 64, region = rng() % 64;
    for (int r = 0, n = 1 + rng() % 12; r < n; ++r) {
      const uint64_t blocks = 1 + rng() % 6;
      job.runs.push_back(CopyRun{gpu, region, blocks});
      gpu = rng() % 2 ? gpu + blocks : rng() % 512;        // often following on the GPU
      region = rng() % 2 ? region + blocks : rng() % 512;  // and in the region
    }
    auto table = BuildDescriptorTable(job, 1024, bpb);
    ASSERT_TRUE(table.ok()) << table.status();
    for (uint64_t min_rows : {0, 2, 3}) {
      ASSERT_EQ(EstimateCopies(*table, per_layer, min_rows),
                Strided(*table, per_layer, 0, table->num_blocks, min_rows).size())
          << "round " << round << " min_rows " << min_rows;
    }
  }
}

// A block whose pages are contiguous on the GPU (K and V stacked, blocks apart) counts as one
// copy, and a stretch of such blocks as one 2D copy of whole blocks, as the visit makes them.
TEST(EstimateCopiesTest, CountsAContiguousBlockAsOneCopy) {
  const uint64_t page = 4096;
  std::vector<TensorDescriptor> stacked = {{0x10000, 4 * page, page, 0},
                                           {0x10000 + page, 4 * page, page, page}};
  CopyJob job;
  job.blocks_per_row = 1;
  job.slot_bytes = 2 * page;
  job.row_bytes = 2 * page;
  job.runs = RunsOfLists({9, 2, 40}, {0, 1, 2}, 1);
  auto table = BuildDescriptorTable(job, 64, 2 * page);
  ASSERT_TRUE(table.ok()) << table.status();
  EXPECT_EQ(Strided(*table, stacked, 0, table->num_blocks, 2).size(), 3u);
  EXPECT_EQ(EstimateCopies(*table, stacked, 2), 3u);
  job.runs = {CopyRun{5, 0, 8}};
  table = BuildDescriptorTable(job, 64, 2 * page);
  ASSERT_TRUE(table.ok()) << table.status();
  EXPECT_EQ(Strided(*table, stacked, 0, table->num_blocks, 2).size(), 1u);
  EXPECT_EQ(EstimateCopies(*table, stacked, 2), 1u);
}

TEST(IssueSharesTest, OneSharePerMinimumUpToTheMost) {
  EXPECT_EQ(IssueShares(16384, 4, 1024), 4u);
  EXPECT_EQ(IssueShares(2048, 4, 1024), 2u);
  EXPECT_EQ(IssueShares(2047, 4, 1024), 1u);
  EXPECT_EQ(IssueShares(256, 4, 1024), 1u);
  EXPECT_EQ(IssueShares(0, 4, 1024), 1u);
  EXPECT_EQ(IssueShares(16384, 1, 1024), 1u);
  EXPECT_EQ(IssueShares(16384, 4, 0), 1u);
  EXPECT_EQ(IssueShares(5, 16, 1), 5u);
}

TEST(CountHostRunsTest, AdjacentRowsMerge) {
  EXPECT_EQ(CountHostRuns(Table(100, {})), 0u);
  EXPECT_EQ(CountHostRuns(Table(100, {{5, 0}, {3, 100}, {9, 200}})), 1u);
  EXPECT_EQ(CountHostRuns(Table(100, {{5, 0}, {3, 300}, {9, 400}, {1, 100}})), 3u);
}

TEST(PlanStagedChunksTest, PacksWholeBlocksAndOneCopyPerHostRun) {
  // 5 blocks of 100 bytes, chunks of 250 bytes → 2 blocks per chunk → 3 chunks.
  DescriptorTable t = Table(100, {{0, 1000}, {1, 1100}, {2, 5000}, {3, 5100}, {4, 5200}});
  absl::StatusOr<StagedPlan> plan = PlanStagedChunks(ExpandBlocks(t), 100, 250, 2, 1);
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
  plan = PlanStagedChunks(ExpandBlocks(s), 100, 1000, 3, 0);
  ASSERT_TRUE(plan.ok());
  ASSERT_EQ(plan->chunks.size(), 1u);
  ASSERT_EQ(plan->copies.size(), 3u);
  EXPECT_EQ(plan->copies[2].host_offset, 500u);
  EXPECT_EQ(plan->copies[2].staging_offset, 200u);

  EXPECT_EQ(PlanStagedChunks(ExpandBlocks(t), 100, 99, 2, 0).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(PlanStagedChunks(ExpandBlocks(t), 100, 1000, 0, 0).status().code(),
            absl::StatusCode::kInvalidArgument);
  absl::StatusOr<StagedPlan> empty = PlanStagedChunks({}, 100, 1000, 2, 0);
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
