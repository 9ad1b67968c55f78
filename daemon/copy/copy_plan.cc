#include "daemon/copy/copy_plan.h"

#include <algorithm>
#include <string>

#include "absl/strings/str_cat.h"

namespace kvoffload::daemon {

absl::Status ValidateTensorGeometry(size_t index, uint64_t offset, uint64_t num_blocks,
                                    uint64_t block_stride_bytes, uint64_t page_bytes,
                                    uint64_t allocation_bytes) {
  const std::string what = absl::StrCat("tensor ", index, ": ");
  if (num_blocks == 0 || page_bytes == 0) {
    return absl::InvalidArgumentError(absl::StrCat(what, "num_blocks ", num_blocks,
                                                   " and page_bytes ", page_bytes,
                                                   " must both be > 0"));
  }
  if (num_blocks > 1 && block_stride_bytes < page_bytes) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, "block_stride_bytes ", block_stride_bytes,
                     " is smaller than page_bytes ", page_bytes, " (blocks would overlap)"));
  }
  uint64_t end = 0;
  if (__builtin_mul_overflow(num_blocks - 1, block_stride_bytes, &end) ||
      __builtin_add_overflow(end, offset, &end) || __builtin_add_overflow(end, page_bytes, &end) ||
      end > allocation_bytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        what, "offset ", offset, " + (", num_blocks, " - 1) x stride ", block_stride_bytes,
        " + page ", page_bytes, " runs past its allocation of ", allocation_bytes, " bytes"));
  }
  return absl::OkStatus();
}

BlockShape ShapeOf(const std::vector<TensorDescriptor>& tensors, uint64_t bytes_per_block) {
  BlockShape shape;
  if (tensors.empty()) return shape;
  shape.block_contiguous = true;
  for (size_t i = 1; i < tensors.size(); ++i) {
    const TensorDescriptor& a = tensors[i - 1];
    const TensorDescriptor& b = tensors[i];
    if (b.block_stride_bytes != a.block_stride_bytes ||
        b.gpu_address != a.gpu_address + a.page_bytes) {
      shape.block_contiguous = false;
      break;
    }
  }
  shape.blocks_contiguous =
      shape.block_contiguous && tensors.front().block_stride_bytes == bytes_per_block;
  return shape;
}

uint64_t EstimateCopies(const DescriptorTable& table, const std::vector<TensorDescriptor>& tensors,
                        uint64_t min_rows) {
  if (tensors.empty() || table.runs.empty()) return 0;
  const BlockShape shape = ShapeOf(tensors, table.bytes_per_block);
  if (shape.blocks_contiguous) return table.runs.size();
  // As VisitStridedSegments: a whole block a row only where blocks do not overlap on the GPU.
  const uint64_t per_row =
      shape.block_contiguous && tensors.front().block_stride_bytes >= table.bytes_per_block
          ? 1
          : tensors.size();
  const uint64_t per_block = shape.block_contiguous ? 1 : tensors.size();
  uint64_t copies = 0;
  ForEachStretch(table, 0, table.num_blocks,
                 [&](uint64_t begin, uint64_t end, uint64_t, uint64_t, uint64_t) {
                   const uint64_t rows = end - begin;
                   copies += min_rows != 0 && rows >= std::max<uint64_t>(min_rows, 2)
                                 ? per_row
                                 : rows * per_block;
                 });
  return copies;
}

size_t IssueShares(uint64_t copies, size_t max_shares, uint64_t min_copies_per_share) {
  if (min_copies_per_share == 0 || max_shares <= 1) return 1;
  return static_cast<size_t>(
      std::clamp<uint64_t>(copies / min_copies_per_share, 1, static_cast<uint64_t>(max_shares)));
}

uint64_t CountHostRuns(const DescriptorTable& table) {
  uint64_t runs = 0;
  uint64_t previous_end = kNever;
  for (const RunDescriptor& r : table.runs) {
    if (r.host_offset != previous_end) ++runs;
    previous_end = r.host_offset + r.num_blocks * table.bytes_per_block;
  }
  return runs;
}

absl::StatusOr<StagedPlan> PlanStagedChunks(const std::vector<BlockDescriptor>& blocks,
                                            uint64_t bytes_per_block, uint64_t chunk_bytes,
                                            uint32_t num_buffers, uint64_t first_buffer) {
  const uint64_t bpb = bytes_per_block;
  if (num_buffers == 0) return absl::InvalidArgumentError("staged plan: no staging buffers");
  if (bpb == 0 || bpb > chunk_bytes) {
    return absl::InvalidArgumentError(absl::StrCat("staged plan: a block of ", bpb,
                                                   " bytes does not fit a staging chunk of ",
                                                   chunk_bytes, " bytes"));
  }
  const uint64_t blocks_per_chunk = chunk_bytes / bpb;
  StagedPlan plan;
  const size_t n = blocks.size();
  plan.chunks.reserve((n + blocks_per_chunk - 1) / blocks_per_chunk);
  for (size_t begin = 0; begin < n; begin += blocks_per_chunk) {
    StagedChunk c;
    c.block_begin = begin;
    c.block_end = std::min<size_t>(n, begin + blocks_per_chunk);
    c.buffer = static_cast<uint32_t>((first_buffer + plan.chunks.size()) % num_buffers);
    c.copy_begin = plan.copies.size();
    for (size_t i = c.block_begin; i < c.block_end; ++i) {
      const uint64_t host = blocks[i].host_offset;
      const uint64_t staged = (i - c.block_begin) * bpb;
      if (plan.copies.size() > c.copy_begin &&
          plan.copies.back().host_offset + plan.copies.back().bytes == host) {
        plan.copies.back().bytes += bpb;
      } else {
        plan.copies.push_back(StagedCopy{host, staged, bpb});
      }
    }
    c.copy_end = plan.copies.size();
    plan.chunks.push_back(c);
  }
  return plan;
}

const char* CopyPathName(CopyPath path) {
  switch (path) {
    case CopyPath::kCopyEngine:
      return "copy_engine";
    case CopyPath::kStaged:
      return "staged";
    case CopyPath::kKernel:
      return "kernel";
  }
  return "unknown";
}

CopyPath ChooseCopyPath(const DescriptorTable& table, const std::vector<TensorDescriptor>& tensors,
                        const CopyPathPolicy& policy) {
  if (!policy.sm_paths) return CopyPath::kCopyEngine;
  if (table.num_blocks == 0 || tensors.empty()) return CopyPath::kStaged;
  uint64_t segment_bytes = kNever;
  if (tensors.size() == 1) {
    uint64_t segments = 0;
    VisitSegments(table, 0, table.num_blocks, tensors, [&](const Segment&) { ++segments; });
    segment_bytes = table.total_bytes() / segments;
  } else {
    for (const TensorDescriptor& t : tensors) segment_bytes = std::min(segment_bytes, t.page_bytes);
  }
  if (segment_bytes >= policy.copy_engine_min_segment_bytes) return CopyPath::kCopyEngine;
  if (table.bytes_per_block <= policy.staging_chunk_bytes &&
      table.total_bytes() / CountHostRuns(table) >= policy.staged_min_run_bytes) {
    return CopyPath::kStaged;
  }
  return CopyPath::kKernel;
}

}  // namespace kvoffload::daemon
