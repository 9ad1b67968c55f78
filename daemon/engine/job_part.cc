#include "daemon/engine/job_part.h"

#include <algorithm>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/limits.h"
#include "common/refusals.h"
#include "daemon/index/row_handle.h"

namespace kvoffload::daemon {
namespace {

bool AddOverflows(uint64_t a, uint64_t b, uint64_t* out) { return __builtin_add_overflow(a, b, out); }

// Structure and size, from the part alone: nothing is allocated for a hostile run.
absl::Status CheckShape(const JobPart& part, uint64_t bpr, uint64_t max_blocks,
                        absl::string_view who, bool* has_ranges) {
  uint64_t total = part.gpu_blocks.size();
  uint64_t run_rows = 0;      // for the message
  uint64_t range_blocks = 0;
  for (const PartRun& r : part.runs) {
    uint64_t end = 0;
    uint64_t blocks = 0;
    if (r.num_blocks > 0) {
      *has_ranges = true;
      if (r.num_rows != 0 || r.first_block >= bpr ||
          AddOverflows(r.gpu_block, r.num_blocks, &end) ||
          AddOverflows(total, r.num_blocks, &total) ||
          AddOverflows(range_blocks, r.num_blocks, &range_blocks)) {
        return absl::InvalidArgumentError(absl::StrCat(
            who, ": a block run needs num_rows 0, first_block < blocks_per_row (", bpr,
            ") and must not overflow (row ", r.row, ", first_block ", r.first_block,
            ", num_blocks ", r.num_blocks, ")"));
      }
      continue;
    }
    if (r.num_rows == 0 || r.first_block != 0 || AddOverflows(r.row, r.num_rows, &end) ||
        __builtin_mul_overflow(r.num_rows, bpr, &blocks) ||
        AddOverflows(r.gpu_block, blocks, &end) || AddOverflows(total, blocks, &total) ||
        AddOverflows(run_rows, r.num_rows, &run_rows)) {
      return absl::InvalidArgumentError(absl::StrCat(
          who, ": a run needs num_rows >= 1 (or num_blocks >= 1), first_block 0 unless "
          "num_blocks is set, and must not overflow (row ", r.row, ", num_rows ", r.num_rows,
          ", first_block ", r.first_block, ")"));
    }
  }
  if (total > max_blocks) {
    return absl::InvalidArgumentError(absl::StrCat(
        who, ": ", part.gpu_blocks.size(), " listed blocks, runs of ", run_rows,
        " rows and block runs of ", range_blocks, " blocks exceed the limit of ", max_blocks,
        " blocks per job"));
  }
  if (*has_ranges && part.direction != CopyDirection::kLoad) {
    return absl::InvalidArgumentError(absl::StrCat(
        who, ": a store must write whole rows; runs of single blocks (num_blocks) are for loads "
        "only"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<ValidPart> ValidatePart(const JobPart& part, const common::Geometry& geometry,
                                       const PartBounds& bounds, absl::string_view who) {
  const uint64_t bpr = std::max<uint64_t>(1, geometry.blocks_per_row);
  bool has_ranges = false;
  if (absl::Status s = CheckShape(part, bpr, bounds.max_blocks_per_job, who, &has_ranges);
      !s.ok()) {
    return s;
  }
  if (absl::Status s = common::CheckRegionEpoch(who, part.region_epoch, bounds.region_epoch);
      !s.ok()) {
    return s;
  }
  if (part.rows.empty() && part.runs.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(who, ": no rows"));
  }
  // rows.size() is bounded by the message (< 2^32) and bpr < 2^32: the product fits.
  if (part.gpu_blocks.size() != part.rows.size() * bpr) {
    return absl::InvalidArgumentError(absl::StrCat(
        who, ": ", part.gpu_blocks.size(), " gpu blocks for ", part.rows.size(), " rows of ", bpr,
        " blocks (want ", part.rows.size() * bpr, ")"));
  }

  ValidPart valid;
  valid.job_id = part.job_id;
  valid.direction = part.direction;
  valid.event_index = part.event_index;
  const uint64_t num_rows = geometry.num_rows;
  auto split = [&](uint64_t handle, uint64_t* row, uint32_t* ticket) {
    *row = bounds.row_handles ? RowOfHandle(handle) : handle;
    *ticket = bounds.row_handles ? TicketOfHandle(handle) : 0;
  };
  auto add_rows = [&](uint64_t first, uint64_t count, uint32_t ticket) {
    if (has_ranges && !valid.rows.empty()) {
      const RowRun& last = valid.rows.back();
      if (last.first_row + last.num_rows - 1 == first) {  // the row the last run ended in
        ++first;
        --count;
      }
    }
    if (count > 0) AppendRows(&valid.rows, RowRun{first, count, ticket});
  };
  auto check_gpu = [&](uint64_t gpu_block, uint64_t n) -> absl::Status {
    // n ≤ worker_blocks first: gpu_block + n wraps for gpu_block near 2^64.
    if (n <= bounds.worker_blocks && gpu_block <= bounds.worker_blocks - n) {
      return absl::OkStatus();
    }
    return absl::OutOfRangeError(absl::StrCat(who, ": gpu block ",
                                              std::max(gpu_block, bounds.worker_blocks),
                                              " >= registered ", bounds.worker_blocks, " blocks"));
  };
  // Rows [first, ...) run past the region: name the first row that does.
  auto row_out_of_range = [&](uint64_t first) {
    return absl::OutOfRangeError(
        absl::StrCat(who, ": row ", std::max(first, num_rows), " >= num_rows ", num_rows));
  };

  valid.runs.reserve(part.rows.size() + part.runs.size());
  for (size_t i = 0; i < part.rows.size(); ++i) {
    uint64_t row = 0;
    uint32_t ticket = 0;
    split(part.rows[i], &row, &ticket);
    if (row >= num_rows) return row_out_of_range(row);
    for (uint64_t j = 0; j < bpr; ++j) {
      const uint64_t gpu_block = part.gpu_blocks[i * bpr + j];
      if (absl::Status s = check_gpu(gpu_block, 1); !s.ok()) return s;
      AppendRun(&valid.runs, CopyRun{gpu_block, row * bpr + j, 1});
    }
    add_rows(row, 1, ticket);
  }
  for (const PartRun& r : part.runs) {
    uint64_t row = 0;
    uint32_t ticket = 0;
    split(r.row, &row, &ticket);
    if (r.num_blocks == 0) {  // whole rows
      if (row >= num_rows || r.num_rows > num_rows - row) {
        return row_out_of_range(row);
      }
      const uint64_t blocks = r.num_rows * bpr;  // ≤ max_blocks_per_job (CheckShape)
      if (absl::Status s = check_gpu(r.gpu_block, blocks); !s.ok()) return s;
      AppendRun(&valid.runs, CopyRun{r.gpu_block, row * bpr, blocks});
      add_rows(row, r.num_rows, ticket);
      continue;
    }
    // A range of blocks; row < num_rows keeps row × bpr + first_block + num_blocks in 64 bits
    // (the geometry's num_rows × bpr does, and num_blocks ≤ max_blocks_per_job).
    const uint64_t region_blocks = num_rows * bpr;
    const uint64_t first = row < num_rows ? row * bpr + r.first_block : region_blocks;
    if (first >= region_blocks || r.num_blocks > region_blocks - first) {
      uint64_t bad = std::max(first, region_blocks);
      if (row >= num_rows && (__builtin_mul_overflow(row, bpr, &bad) ||
                              AddOverflows(bad, r.first_block, &bad))) {
        bad = UINT64_MAX;
      }
      return absl::OutOfRangeError(absl::StrCat(who, ": region block ", bad, " (row ",
                                                row < num_rows ? bad / bpr : row,
                                                ") >= num_rows ", num_rows));
    }
    if (absl::Status s = check_gpu(r.gpu_block, r.num_blocks); !s.ok()) return s;
    AppendRun(&valid.runs, CopyRun{r.gpu_block, first, r.num_blocks});
    add_rows(first / bpr, (first + r.num_blocks - 1) / bpr - first / bpr + 1, ticket);
  }
  if (part.event_index < -1 ||
      part.event_index >= static_cast<int64_t>(bounds.worker_events)) {
    return absl::InvalidArgumentError(absl::StrCat(who, ": event index ", part.event_index,
                                                   " outside the pool of ",
                                                   bounds.worker_events, " events"));
  }
  valid.num_blocks = CountBlocks(valid.runs);
  return valid;
}

}  // namespace kvoffload::daemon
