// Copy planning shared by every backend, with no GPU call in it (unit-tested in CI):
//
//   * ValidateTensorGeometry — the one rule for a registered tensor, for both backends;
//   * VisitSegments          — a job's pages as maximal segments contiguous on both sides (what
//                              the copy engines, or memcpy in the host backend, move directly),
//                              walking the table's runs: a run of blocks contiguous on the GPU
//                              too is one step, not one per block;
//   * VisitStridedSegments   — the same, but stretches of consecutive blocks into consecutive
//                              rows as 2D runs (a page per block at a fixed pitch each side);
//   * PlanStagedChunks       — the staged path's layout: blocks packed into staging chunks laid
//                              out like the host side, one copy per contiguous host run;
//   * ChooseCopyPath         — which path moves a job: copy engines unless SM paths are allowed,
//                              then from the job's shape.
//
//   ASSIGN_OR_RETURN(DescriptorTable table, BuildDescriptorTable(job, num_blocks, bpb));
//   switch (ChooseCopyPath(table, tensors, policy)) { ... }
//
// Thread-safety: pure functions over values.
#ifndef KVOFFLOAD_DAEMON_COPY_COPY_PLAN_H_
#define KVOFFLOAD_DAEMON_COPY_COPY_PLAN_H_

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "daemon/copy/descriptor_table.h"

namespace kvoffload::daemon {

// A registered tensor: `num_blocks` pages of `page_bytes` at offset + b × block_stride_bytes in
// an allocation of `allocation_bytes`. INVALID_ARGUMENT naming tensor `index` unless:
// num_blocks ≥ 1, page_bytes ≥ 1, block_stride_bytes ≥ page_bytes when num_blocks > 1 (a single
// block has no neighbour to overlap, and frameworks report any stride for a size-1 dimension),
// and the last page ends inside the allocation (no 64-bit overflow on the way).
absl::Status ValidateTensorGeometry(size_t index, uint64_t offset, uint64_t num_blocks,
                                    uint64_t block_stride_bytes, uint64_t page_bytes,
                                    uint64_t allocation_bytes);

// A run of bytes contiguous on the GPU and in the region.
struct Segment {
  uint64_t gpu_address = 0;
  uint64_t host_offset = 0;  // from the job's region_base
  uint64_t bytes = 0;
};

// How a worker's tensors lay out one block on the GPU, for VisitSegments' shortcuts.
struct BlockShape {
  // A block's pages follow each other on the GPU (equal strides, tensor i + 1 starting where
  // tensor i's page ends): each block is one contiguous span of bytes_per_block bytes.
  bool block_contiguous = false;
  // And consecutive blocks follow each other (stride == bytes_per_block): n consecutive blocks
  // are one span of n × bytes_per_block bytes.
  bool blocks_contiguous = false;
};
BlockShape ShapeOf(const std::vector<TensorDescriptor>& tensors, uint64_t bytes_per_block);

// Greedy merging of spans in order: a span that follows the open segment on both sides extends
// it; otherwise the open one is emitted. Emitting a span contiguous in itself at once gives the
// same segments as emitting its pages one by one.
template <typename Visit>
class SegmentMerger {
 public:
  explicit SegmentMerger(Visit& visit) : visit_(visit) {}
  void Add(uint64_t gpu, uint64_t host, uint64_t bytes) {
    if (open_.bytes != 0 && open_.gpu_address + open_.bytes == gpu &&
        open_.host_offset + open_.bytes == host) {
      open_.bytes += bytes;
      return;
    }
    if (open_.bytes != 0) visit_(static_cast<const Segment&>(open_));
    open_ = Segment{gpu, host, bytes};
  }
  void Flush() {
    if (open_.bytes != 0) visit_(static_cast<const Segment&>(open_));
    open_ = Segment{};
  }

 private:
  Visit& visit_;
  Segment open_;
};

// The run holding job block `block`: the last whose first_block is not after it (the first run
// when none is).
inline std::vector<RunDescriptor>::const_iterator RunHolding(const DescriptorTable& table,
                                                             uint64_t block) {
  auto it = std::upper_bound(
      table.runs.begin(), table.runs.end(), block,
      [](uint64_t b, const RunDescriptor& r) { return b < r.first_block; });
  return it == table.runs.begin() ? it : it - 1;
}

// Calls visit(const Segment&) for the pages of the job's blocks [first_block, last_block)
// (counted in job order) × tensors, block-major (the region's order), merging a page into the
// previous segment when it follows it on both sides. Work: O(runs) when the worker's blocks are
// contiguous on the GPU (BlockShape::blocks_contiguous), O(blocks) when each block is, and
// O(blocks × tensors) otherwise — the segments are the same in every case.
template <typename Visit>
void VisitSegments(const DescriptorTable& table, uint64_t first_block, uint64_t last_block,
                   const std::vector<TensorDescriptor>& tensors, Visit&& visit) {
  if (first_block >= last_block || tensors.empty()) return;
  const uint64_t bpb = table.bytes_per_block;
  const BlockShape shape = ShapeOf(tensors, bpb);
  const TensorDescriptor& t0 = tensors.front();
  SegmentMerger<Visit> merger(visit);
  auto it = RunHolding(table, first_block);
  for (; it != table.runs.end() && it->first_block < last_block; ++it) {
    const uint64_t from = std::max(first_block, it->first_block) - it->first_block;
    const uint64_t to = std::min(last_block, it->first_block + it->num_blocks) - it->first_block;
    if (from >= to) continue;
    const uint64_t gpu_block = it->gpu_block + from;
    const uint64_t host = it->host_offset + from * bpb;
    if (shape.blocks_contiguous) {
      merger.Add(t0.gpu_address + gpu_block * t0.block_stride_bytes, host, (to - from) * bpb);
      continue;
    }
    for (uint64_t k = 0; k < to - from; ++k) {
      if (shape.block_contiguous) {
        merger.Add(t0.gpu_address + (gpu_block + k) * t0.block_stride_bytes, host + k * bpb, bpb);
        continue;
      }
      for (const TensorDescriptor& t : tensors) {
        merger.Add(t.gpu_address + (gpu_block + k) * t.block_stride_bytes,
                   host + k * bpb + t.host_offset, t.page_bytes);
      }
    }
  }
  merger.Flush();
}

// Pages that repeat at a fixed pitch on both sides: row k is `bytes` at gpu_address + k ×
// gpu_pitch and at host_offset + k × host_pitch. The copy engines move such a run as one 2D copy
// (cudaMemcpy2DAsync) at the link's rate from 16-32 KiB pages, where one DMA per page reaches a
// fraction of it (copy path v3, runs/2026-12-02-93f6b6c-gpu/dma2d.jsonl: 4 KiB pages of
// consecutive blocks 33.6 GB/s as 2D copies against 5-10 as pages; 32 KiB 54-55 against 30-42).
struct StridedSegment {
  uint64_t gpu_address = 0;
  uint64_t gpu_pitch = 0;
  uint64_t host_offset = 0;  // from the job's region_base
  uint64_t host_pitch = 0;
  uint64_t bytes = 0;  // of one row
  uint64_t rows = 1;
};

// The stretches of a table's blocks [first_block, last_block), in job order: maximal spans of
// job blocks [begin, end) consecutive on the GPU (the first is GPU block gpu_block) whose region
// offsets are equally spaced (block k at host + k × pitch; pitch 0 for a one-block stretch).
// Within a run blocks are bytes_per_block apart; across runs at any pitch that keeps rows apart
// (one block per stretch row, so no two rows overlap). Calls on(begin, end, gpu_block, host,
// pitch) for each. O(runs).
template <typename OnStretch>
void ForEachStretch(const DescriptorTable& table, uint64_t first_block, uint64_t last_block,
                    OnStretch&& on) {
  const uint64_t bpb = table.bytes_per_block;
  uint64_t begin = 0, end = 0, gpu_block = 0, host = 0, pitch = 0;
  auto it = RunHolding(table, first_block);
  for (; it != table.runs.end() && it->first_block < last_block; ++it) {
    const uint64_t from = std::max(first_block, it->first_block);
    const uint64_t to = std::min(last_block, it->first_block + it->num_blocks);
    if (from >= to) continue;
    const uint64_t g = it->gpu_block + (from - it->first_block);
    const uint64_t h = it->host_offset + (from - it->first_block) * bpb;
    const uint64_t rows = end - begin;
    const uint64_t p = pitch != 0 ? pitch : (h > host ? h - host : 0);
    if (rows > 0 && from == end && g == gpu_block + rows && p >= bpb &&
        h == host + rows * p && (to - from == 1 || p == bpb)) {
      end = to;
      pitch = p;
      continue;
    }
    if (rows > 0) on(begin, end, gpu_block, host, pitch);
    begin = from;
    end = to;
    gpu_block = g;
    host = h;
    pitch = to - from > 1 ? bpb : 0;
  }
  if (end > begin) on(begin, end, gpu_block, host, pitch);
}

// As VisitSegments, but a stretch (ForEachStretch) of at least `min_rows` blocks in job order
// that are consecutive on the GPU and equally spaced in the region (consecutive blocks of a row,
// or the same slot of consecutive rows: the pitch is bytes_per_block or row_bytes) is visited as
// strided segments of one row per block: one per tensor, or one for the whole block when a
// block's pages are contiguous on the GPU. Everything else is visited as VisitSegments would, as
// segments of rows == 1 (pitches 0). Not strided: workers whose blocks are contiguous on the GPU
// (their stretches are already one segment), or min_rows == 0. Work: O(runs + strided stretches
// × tensors), plus VisitSegments' for the rest.
template <typename Visit>
void VisitStridedSegments(const DescriptorTable& table, uint64_t first_block, uint64_t last_block,
                          const std::vector<TensorDescriptor>& tensors, uint64_t min_rows,
                          Visit&& visit) {
  if (first_block >= last_block || tensors.empty()) return;
  const uint64_t bpb = table.bytes_per_block;
  const BlockShape shape = ShapeOf(tensors, bpb);
  auto plain = [&](const Segment& s) {
    visit(StridedSegment{s.gpu_address, 0, s.host_offset, 0, s.bytes, 1});
  };
  if (shape.blocks_contiguous || min_rows == 0) {
    VisitSegments(table, first_block, last_block, tensors, plain);
    return;
  }
  ForEachStretch(table, first_block, last_block, [&](uint64_t begin, uint64_t end,
                                                     uint64_t gpu_block, uint64_t host,
                                                     uint64_t pitch) {
    const uint64_t rows = end - begin;
    if (rows >= std::max<uint64_t>(min_rows, 2)) {
      // A whole block a row only where blocks do not overlap on the GPU (tensors may alias each
      // other's pages: nothing forbids it, and a row wider than its pitch is no 2D copy).
      if (shape.block_contiguous && tensors.front().block_stride_bytes >= bpb) {
        const TensorDescriptor& t0 = tensors.front();
        visit(StridedSegment{t0.gpu_address + gpu_block * t0.block_stride_bytes,
                             t0.block_stride_bytes, host, pitch, bpb, rows});
      } else {
        for (const TensorDescriptor& t : tensors) {
          visit(StridedSegment{t.gpu_address + gpu_block * t.block_stride_bytes,
                               t.block_stride_bytes, host + t.host_offset, pitch, t.page_bytes,
                               rows});
        }
      }
    } else {
      VisitSegments(table, begin, end, tensors, plain);
    }
  });
}

// Number of maximal contiguous host runs of a table (adjacent blocks merge).
uint64_t CountHostRuns(const DescriptorTable& table);

// Staged copies (SM paths only): the job's blocks (ExpandBlocks), in job order, packed into chunks of at most `chunk_bytes`
// (whole blocks). Chunk c uses staging buffer (first_buffer + c) % num_buffers; block k of a chunk
// sits at staging offset (k − block_begin) × bytes_per_block, so the staging buffer is laid out
// like the host side and each contiguous host run within a chunk is one copy.
struct StagedCopy {
  uint64_t host_offset = 0;  // from the job's region_base
  uint64_t staging_offset = 0;
  uint64_t bytes = 0;
};
struct StagedChunk {
  size_t block_begin = 0;  // into the expanded blocks
  size_t block_end = 0;
  uint32_t buffer = 0;
  size_t copy_begin = 0;  // into StagedPlan::copies
  size_t copy_end = 0;
};
struct StagedPlan {
  std::vector<StagedChunk> chunks;
  std::vector<StagedCopy> copies;
};
// INVALID_ARGUMENT when a block does not fit a chunk or num_buffers is 0.
absl::StatusOr<StagedPlan> PlanStagedChunks(const std::vector<BlockDescriptor>& blocks,
                                            uint64_t bytes_per_block, uint64_t chunk_bytes,
                                            uint32_t num_buffers, uint64_t first_buffer);

enum class CopyPath {
  kCopyEngine,  // every segment straight between GPU memory and the region by DMA: no SM at all
  kStaged,      // pages gathered into / scattered from device staging by short kernels on a few
                // SMs; the copy engines carry the bytes over the link
  kKernel,      // a kernel reads or writes the mapped region directly for the whole transfer
};
const char* CopyPathName(CopyPath path);

inline constexpr uint64_t kNever = std::numeric_limits<uint64_t>::max();

struct CopyPathPolicy {
  // Whether the SM paths (staged, kernel) may be used at all: only where the daemon's kernels
  // share SMs with the model (MPS) or the operator says so. Without them every job goes by copy
  // engines, whatever its shape: even short staging launches from another process cost the
  // model a time slice each (copy path v3: GEMM +17.6 %, decode +30 % against 0.7 % / 3.4 % by DMA).
  bool sm_paths = false;
  // Direct DMA when the job's segments average at least this many bytes (one tensor: merged
  // segments; several: the smallest page, since their pages never merge across blocks).
  uint64_t copy_engine_min_segment_bytes = uint64_t{1} << 20;
  // Staged when the job's host runs average at least this many bytes (copy engines lose to a
  // kernel on short scattered runs: a D2H copy per 4 KiB run moves ~5 GB/s).
  uint64_t staged_min_run_bytes = uint64_t{64} << 10;
  // A block larger than a staging chunk cannot be staged.
  uint64_t staging_chunk_bytes = uint64_t{32} << 20;
};

// About how many copies the copy engines make of `table` (what VisitStridedSegments visits),
// from its stretches alone (ForEachStretch: O(runs), no page visited): a stretch of at least
// `min_rows` blocks counts one (2D) copy per tensor, or one where a block's pages are contiguous
// on the GPU; a shorter one a copy per page (per block where a block's pages are contiguous);
// workers whose blocks are contiguous on the GPU one per run. An upper bound: pages adjacent on
// both sides that VisitSegments merges count apart. Decides whether a job is split over issuing
// threads.
uint64_t EstimateCopies(const DescriptorTable& table, const std::vector<TensorDescriptor>& tensors,
                        uint64_t min_rows);

// How many threads issue a job of `copies` copies: one per `min_copies_per_share`, at least one,
// at most `max_shares` (min_copies_per_share 0: one).
size_t IssueShares(uint64_t copies, size_t max_shares, uint64_t min_copies_per_share);

// Picks the path for a job: kCopyEngine without SM paths; else by shape. Host work: as
// VisitSegments when the worker has one tensor, O(tensors) otherwise (plus one pass over the
// table's runs for the staged decision).
CopyPath ChooseCopyPath(const DescriptorTable& table, const std::vector<TensorDescriptor>& tensors,
                        const CopyPathPolicy& policy);

}  // namespace kvoffload::daemon

#endif  // KVOFFLOAD_DAEMON_COPY_COPY_PLAN_H_
