#include "daemon/copy/descriptor_table.h"

#include <algorithm>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace kvoffload::daemon {
namespace {

bool MulOverflows(uint64_t a, uint64_t b, uint64_t* out) {
  return __builtin_mul_overflow(a, b, out);
}
bool AddOverflows(uint64_t a, uint64_t b, uint64_t* out) {
  return __builtin_add_overflow(a, b, out);
}

}  // namespace

absl::StatusOr<DescriptorTable> BuildDescriptorTable(const CopyJob& job, uint64_t num_blocks,
                                                     uint64_t bytes_per_block) {
  if (job.blocks_per_row == 0) {
    return absl::InvalidArgumentError("copy job: blocks_per_row must be >= 1");
  }
  if (bytes_per_block == 0) {
    return absl::InvalidArgumentError("copy job: the worker has 0 bytes per block");
  }
  // The worker's part of a row: [slot × slot_bytes, slot × slot_bytes + slot_extent).
  const uint64_t bpr = job.blocks_per_row;
  uint64_t slot_extent = 0;
  uint64_t slot_offset = 0;
  uint64_t slot_end = 0;
  if (MulOverflows(bpr, bytes_per_block, &slot_extent) || slot_extent > job.slot_bytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("copy job: ", bpr, " blocks per row x ", bytes_per_block,
                     " bytes per block do not fit a slot of ", job.slot_bytes, " bytes"));
  }
  if (MulOverflows(job.slot, job.slot_bytes, &slot_offset) ||
      AddOverflows(slot_offset, slot_extent, &slot_end) || slot_end > job.row_bytes) {
    return absl::InvalidArgumentError(absl::StrCat("copy job: slot ", job.slot, " of ",
                                                   job.slot_bytes, " does not fit a row of ",
                                                   job.row_bytes, " bytes"));
  }
  // Rows back to back in the region: a run crossing rows stays contiguous (one slot filling the
  // row). Otherwise it is cut at every row boundary it crosses.
  const bool rows_contiguous = slot_extent == job.row_bytes;

  DescriptorTable table;
  table.bytes_per_block = bytes_per_block;
  table.runs.reserve(job.runs.size());
  auto append = [&](uint64_t gpu_block, uint64_t host_offset, uint64_t n) {
    if (!table.runs.empty()) {
      RunDescriptor& last = table.runs.back();
      if (last.gpu_block + last.num_blocks == gpu_block &&
          last.host_offset + last.num_blocks * bytes_per_block == host_offset) {
        last.num_blocks += n;
        table.num_blocks += n;
        return;
      }
    }
    table.runs.push_back(RunDescriptor{gpu_block, host_offset, n, table.num_blocks});
    table.num_blocks += n;
  };
  for (size_t i = 0; i < job.runs.size(); ++i) {
    const CopyRun& run = job.runs[i];
    uint64_t gpu_end = 0;
    uint64_t region_end = 0;
    if (run.num_blocks == 0 || AddOverflows(run.gpu_block, run.num_blocks, &gpu_end) ||
        gpu_end > num_blocks) {
      return absl::InvalidArgumentError(absl::StrCat(
          "copy job: run ", i, " of gpu blocks [", run.gpu_block, ", +", run.num_blocks,
          ") is empty or not below the ", num_blocks, " registered blocks"));
    }
    // One past the worker's bytes in the run's last row: bounds every offset of the run, so
    // overflow is checked once per run, not per block.
    uint64_t last_row_offset = 0;
    if (AddOverflows(run.region_block, run.num_blocks, &region_end) ||
        MulOverflows((region_end - 1) / bpr, job.row_bytes, &last_row_offset) ||
        AddOverflows(last_row_offset, slot_end, &last_row_offset)) {
      return absl::InvalidArgumentError(absl::StrCat("copy job: run ", i, " at region block ",
                                                     run.region_block, " overflows"));
    }
    table.host_extent = std::max(table.host_extent, last_row_offset);
    uint64_t gpu = run.gpu_block;
    uint64_t block = run.region_block;
    while (block < region_end) {
      const uint64_t row = block / bpr;
      const uint64_t j = block % bpr;
      const uint64_t n = rows_contiguous ? region_end - block : std::min(bpr - j, region_end - block);
      append(gpu, row * job.row_bytes + slot_offset + j * bytes_per_block, n);  // ≤ extent
      gpu += n;
      block += n;
    }
  }
  return table;
}

std::vector<BlockDescriptor> ExpandBlocks(const DescriptorTable& table) {
  std::vector<BlockDescriptor> blocks;
  blocks.reserve(table.num_blocks);
  for (const RunDescriptor& r : table.runs) {
    for (uint64_t k = 0; k < r.num_blocks; ++k) {
      blocks.push_back(
          BlockDescriptor{r.gpu_block + k, r.host_offset + k * table.bytes_per_block});
    }
  }
  return blocks;
}

}  // namespace kvoffload::daemon
