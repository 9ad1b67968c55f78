// Descriptor tables: the per-job description of a copy that every copy backend executes. A job
// becomes one table of (gpu_block, host_offset) pairs, built once when the job is submitted; the
// copy then iterates (pair x tensor) with the worker's tensor table, built once per worker
// session. The host backend walks the tables with memcpy; the CUDA backend uploads the same POD
// arrays to the device and a gather/scatter kernel walks them, so the host's work per job does not
// grow with the number of pages (vLLM 48434) and one job of a million pages is one table, not a
// million API calls (vLLM 49276).
//
//   ASSIGN_OR_RETURN(DescriptorTable table,
//                    BuildDescriptorTable(job, memory.num_blocks(), memory.bytes_per_block()));
//   for (const BlockDescriptor& d : table.blocks)
//     for (const TensorDescriptor& t : tensors)
//       memcpy(region_base + d.host_offset + t.host_offset,
//              (uint8_t*)t.gpu_address + d.gpu_block * t.block_stride_bytes, t.page_bytes);
//
// Shared by every backend (the CUDA backend builds the same table; copy_plan.h plans its chunks).
//
// Thread-safety: plain values; a built table is immutable and may be read from many threads.
#ifndef KVOFFLOAD_DAEMON_COPY_DESCRIPTOR_TABLE_H_
#define KVOFFLOAD_DAEMON_COPY_DESCRIPTOR_TABLE_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "daemon/copy/copy_backend.h"

namespace kvoffload::daemon {

// One GPU block of a job and where its bytes live in the region.
struct BlockDescriptor {
  uint64_t gpu_block = 0;
  // From the job's region_base to the block's first byte (its first tensor's page):
  // row × row_bytes + slot × slot_bytes + j × bytes_per_block, for the j-th block of the row.
  uint64_t host_offset = 0;
};
static_assert(sizeof(BlockDescriptor) == 16, "uploaded to the device as is");

// One tensor of a worker, resolved against its opened allocation.
struct TensorDescriptor {
  uint64_t gpu_address = 0;         // allocation base + offset (host backend: a pointer)
  uint64_t block_stride_bytes = 0;  // GPU block b's page starts at gpu_address + b × stride
  uint64_t page_bytes = 0;
  uint64_t host_offset = 0;  // Σ page_bytes of the tensors before it
};
static_assert(sizeof(TensorDescriptor) == 32, "uploaded to the device as is");

struct DescriptorTable {
  std::vector<BlockDescriptor> blocks;  // in job order: row 0's blocks, then row 1's, ...
  uint64_t bytes_per_block = 0;         // Σ page_bytes: bytes moved per descriptor
  // One past the last region byte any descriptor touches, counted from the job's region_base;
  // 0 for an empty job. The backend checks it against the registered region.
  uint64_t host_extent = 0;

  uint64_t total_bytes() const { return blocks.size() * bytes_per_block; }
};

// Builds the table of `job` for a worker whose tensors hold `num_blocks` blocks of
// `bytes_per_block` bytes each. Asserts the cheap invariants the caller already validated and
// returns INVALID_ARGUMENT (never aborts) when one does not hold:
//   blocks_per_row ≥ 1 and gpu_blocks.size() == rows.size() × blocks_per_row;
//   every gpu block id < num_blocks;
//   blocks_per_row × bytes_per_block ≤ slot_bytes, and slot × slot_bytes + that ≤ row_bytes;
//   no offset overflows 64 bits.
absl::StatusOr<DescriptorTable> BuildDescriptorTable(const CopyJob& job, uint64_t num_blocks,
                                                     uint64_t bytes_per_block);

}  // namespace kvoffload::daemon

#endif  // KVOFFLOAD_DAEMON_COPY_DESCRIPTOR_TABLE_H_
