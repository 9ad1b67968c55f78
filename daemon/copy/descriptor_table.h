// Descriptor tables: the per-job description of a copy that every copy backend executes. A job's
// runs (copy_run.h) become runs of blocks contiguous in the region — (gpu_block, host_offset,
// num_blocks) — built once when the job is submitted, in O(runs): a run that crosses rows is one
// table run when the slot's rows lie back to back in the region, one per row otherwise. The copy
// then walks (run × block × tensor) with the worker's tensor table, built once per worker
// session; copy_plan.h's VisitSegments merges what is contiguous on both sides without touching
// each block when the worker's blocks are contiguous on the GPU too. Nothing per block is
// allocated: one job of a million consecutive blocks is one table run (vLLM 48434, 49276).
//
//   ASSIGN_OR_RETURN(DescriptorTable table,
//                    BuildDescriptorTable(job, memory.num_blocks(), memory.bytes_per_block()));
//   VisitSegments(table, 0, table.num_blocks, tensors, [&](const Segment& s) { memcpy(...); });
//
// The SM paths' kernels take one (gpu_block, host_offset) pair per block: ExpandBlocks makes
// them, only for those paths.
//
// Thread-safety: plain values; a built table is immutable and may be read from many threads.
#ifndef KVOFFLOAD_DAEMON_COPY_DESCRIPTOR_TABLE_H_
#define KVOFFLOAD_DAEMON_COPY_DESCRIPTOR_TABLE_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "daemon/copy/copy_backend.h"

namespace kvoffload::daemon {

// One GPU block of a job and where its bytes live in the region (the SM paths' device pairs).
struct BlockDescriptor {
  uint64_t gpu_block = 0;
  // From the job's region_base to the block's first byte (its first tensor's page):
  // row × row_bytes + slot × slot_bytes + j × bytes_per_block, for the j-th block of the row.
  uint64_t host_offset = 0;
};
static_assert(sizeof(BlockDescriptor) == 16, "a job holds one per block: keep it two words");

// One tensor of a worker, resolved against its opened allocation.
struct TensorDescriptor {
  uint64_t gpu_address = 0;         // allocation base + offset (host backend: a pointer)
  uint64_t block_stride_bytes = 0;  // GPU block b's page starts at gpu_address + b × stride
  uint64_t page_bytes = 0;
  uint64_t host_offset = 0;  // Σ page_bytes of the tensors before it
};
static_assert(sizeof(TensorDescriptor) == 32, "four words a tensor");

// Blocks [first_block, first_block + num_blocks) of a job (counted in job order): GPU block
// gpu_block + k has its bytes at host_offset + k × bytes_per_block.
struct RunDescriptor {
  uint64_t gpu_block = 0;
  uint64_t host_offset = 0;  // from the job's region_base: row × row_bytes + slot offset + j × bpb
  uint64_t num_blocks = 0;
  uint64_t first_block = 0;  // Σ num_blocks of the runs before it

  bool operator==(const RunDescriptor& o) const {
    return gpu_block == o.gpu_block && host_offset == o.host_offset &&
           num_blocks == o.num_blocks && first_block == o.first_block;
  }
};

struct DescriptorTable {
  // In job order; adjacent runs never continue each other on both sides (they were merged).
  std::vector<RunDescriptor> runs;
  uint64_t num_blocks = 0;       // Σ runs' num_blocks
  uint64_t bytes_per_block = 0;  // Σ page_bytes: bytes moved per block
  // One past the last region byte any run touches, counted from the job's region_base;
  // 0 for an empty job. The backend checks it against the registered region.
  uint64_t host_extent = 0;

  uint64_t total_bytes() const { return num_blocks * bytes_per_block; }
};

// Builds the table of `job` for a worker whose tensors hold `num_blocks` blocks of
// `bytes_per_block` bytes each, in O(runs + rows crossed where rows are not back to back). The
// part was validated (engine/job_part.h); what is checked here keeps the backend's memory safe
// whatever the caller did, and is INVALID_ARGUMENT (never an abort):
//   blocks_per_row ≥ 1, bytes_per_block ≥ 1, every run non-empty;
//   every run's GPU blocks < num_blocks;
//   blocks_per_row × bytes_per_block ≤ slot_bytes, and slot × slot_bytes + that ≤ row_bytes;
//   no offset overflows 64 bits.
absl::StatusOr<DescriptorTable> BuildDescriptorTable(const CopyJob& job, uint64_t num_blocks,
                                                     uint64_t bytes_per_block);

// One pair per block, in job order (the SM paths' kernels read them; O(blocks)).
std::vector<BlockDescriptor> ExpandBlocks(const DescriptorTable& table);

}  // namespace kvoffload::daemon

#endif  // KVOFFLOAD_DAEMON_COPY_DESCRIPTOR_TABLE_H_
