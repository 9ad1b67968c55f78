// Copy planning shared by every backend, with no GPU call in it (unit-tested in CI):
//
//   * ValidateTensorGeometry — the one rule for a registered tensor, for both backends;
//   * VisitSegments          — a job's pages as maximal segments contiguous on both sides (what
//                              the copy engines, or memcpy in the host backend, move directly);
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

// Calls visit(const Segment&) for the pages of blocks [first, last) × tensors, block-major (the
// region's order), merging a page into the previous segment when it follows it on both sides.
template <typename Visit>
void VisitSegments(const BlockDescriptor* first, const BlockDescriptor* last,
                   const std::vector<TensorDescriptor>& tensors, Visit&& visit) {
  Segment open;
  for (const BlockDescriptor* d = first; d != last; ++d) {
    for (const TensorDescriptor& t : tensors) {
      const uint64_t gpu = t.gpu_address + d->gpu_block * t.block_stride_bytes;
      const uint64_t host = d->host_offset + t.host_offset;
      if (open.bytes != 0 && open.gpu_address + open.bytes == gpu &&
          open.host_offset + open.bytes == host) {
        open.bytes += t.page_bytes;
        continue;
      }
      if (open.bytes != 0) visit(static_cast<const Segment&>(open));
      open = Segment{gpu, host, t.page_bytes};
    }
  }
  if (open.bytes != 0) visit(static_cast<const Segment&>(open));
}

// Number of maximal contiguous host runs of a table (adjacent blocks merge).
uint64_t CountHostRuns(const DescriptorTable& table);

// Staged copies: the job's blocks, in job order, packed into chunks of at most `chunk_bytes`
// (whole blocks). Chunk c uses staging buffer (first_buffer + c) % num_buffers; block k of a chunk
// sits at staging offset (k − block_begin) × bytes_per_block, so the staging buffer is laid out
// like the host side and each contiguous host run within a chunk is one copy.
struct StagedCopy {
  uint64_t host_offset = 0;  // from the job's region_base
  uint64_t staging_offset = 0;
  uint64_t bytes = 0;
};
struct StagedChunk {
  size_t block_begin = 0;  // into table.blocks
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
absl::StatusOr<StagedPlan> PlanStagedChunks(const DescriptorTable& table, uint64_t chunk_bytes,
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
  // model a time slice each (issue 17: GEMM +17.6 %, decode +30 % against 0.7 % / 3.4 % by DMA).
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

// Picks the path for a job: kCopyEngine without SM paths; else by shape. Host work: O(blocks) when
// the worker has one tensor, O(tensors) otherwise (plus one pass over the host runs for the
// staged decision).
CopyPath ChooseCopyPath(const DescriptorTable& table, const std::vector<TensorDescriptor>& tensors,
                        const CopyPathPolicy& policy);

}  // namespace kvoffload::daemon

#endif  // KVOFFLOAD_DAEMON_COPY_COPY_PLAN_H_
