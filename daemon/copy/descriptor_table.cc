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
  const bool by_block = !job.region_blocks.empty();
  uint64_t expected_blocks = 0;
  if (by_block) {
    if (job.region_blocks.size() != job.gpu_blocks.size()) {
      return absl::InvalidArgumentError(absl::StrCat("copy job: ", job.gpu_blocks.size(),
                                                     " gpu blocks but ", job.region_blocks.size(),
                                                     " region blocks"));
    }
  } else if (MulOverflows(job.rows.size(), job.blocks_per_row, &expected_blocks) ||
             job.gpu_blocks.size() != expected_blocks) {
    return absl::InvalidArgumentError(absl::StrCat("copy job: ", job.gpu_blocks.size(),
                                                   " gpu blocks but ", job.rows.size(), " rows x ",
                                                   job.blocks_per_row, " blocks per row"));
  }
  // The worker's part of a row: [slot × slot_bytes, slot × slot_bytes + slot_extent).
  uint64_t slot_extent = 0;
  uint64_t slot_offset = 0;
  uint64_t slot_end = 0;
  if (MulOverflows(job.blocks_per_row, bytes_per_block, &slot_extent) ||
      slot_extent > job.slot_bytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("copy job: ", job.blocks_per_row, " blocks per row x ", bytes_per_block,
                     " bytes per block do not fit a slot of ", job.slot_bytes, " bytes"));
  }
  if (MulOverflows(job.slot, job.slot_bytes, &slot_offset) ||
      AddOverflows(slot_offset, slot_extent, &slot_end) || slot_end > job.row_bytes) {
    return absl::InvalidArgumentError(absl::StrCat("copy job: slot ", job.slot, " of ",
                                                   job.slot_bytes, " bytes does not fit a row of ",
                                                   job.row_bytes, " bytes"));
  }

  DescriptorTable table;
  table.bytes_per_block = bytes_per_block;
  if (job.gpu_blocks.empty()) return table;

  const uint64_t max_row =
      by_block ? *std::max_element(job.region_blocks.begin(), job.region_blocks.end()) /
                     job.blocks_per_row
               : *std::max_element(job.rows.begin(), job.rows.end());
  uint64_t max_row_offset = 0;
  if (MulOverflows(max_row, job.row_bytes, &max_row_offset) ||
      AddOverflows(max_row_offset, slot_end, &table.host_extent)) {
    return absl::InvalidArgumentError(
        absl::StrCat("copy job: row ", max_row, " x ", job.row_bytes, " bytes overflows"));
  }

  table.blocks.resize(job.gpu_blocks.size());
  if (by_block) {
    for (size_t i = 0; i < job.gpu_blocks.size(); ++i) {
      const uint64_t gpu_block = job.gpu_blocks[i];
      if (gpu_block >= num_blocks) {
        return absl::InvalidArgumentError(absl::StrCat("copy job: gpu block ", gpu_block,
                                                       " (entry ", i, ") is not below the ",
                                                       num_blocks, " registered blocks"));
      }
      const uint64_t row = job.region_blocks[i] / job.blocks_per_row;  // ≤ max_row
      const uint64_t block = job.region_blocks[i] % job.blocks_per_row;
      table.blocks[i] =
          BlockDescriptor{gpu_block, row * job.row_bytes + slot_offset + block * bytes_per_block};
    }
    return table;
  }
  size_t i = 0;
  for (uint64_t row : job.rows) {
    const uint64_t row_offset = row * job.row_bytes + slot_offset;  // ≤ host_extent: no overflow
    for (uint32_t j = 0; j < job.blocks_per_row; ++j, ++i) {
      const uint64_t gpu_block = job.gpu_blocks[i];
      if (gpu_block >= num_blocks) {
        return absl::InvalidArgumentError(absl::StrCat("copy job: gpu block ", gpu_block,
                                                       " (entry ", i, ") is not below the ",
                                                       num_blocks, " registered blocks"));
      }
      table.blocks[i] = BlockDescriptor{gpu_block, row_offset + j * bytes_per_block};
    }
  }
  return table;
}

}  // namespace kvoffload::daemon
