#include "daemon/engine/job_part.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace kvoffload::daemon {

std::vector<uint64_t> RowsCovered(const std::vector<uint64_t>& region_blocks,
                                  uint32_t blocks_per_row) {
  std::vector<uint64_t> rows;
  const uint64_t bpr = blocks_per_row == 0 ? 1 : blocks_per_row;
  for (uint64_t block : region_blocks) {
    const uint64_t row = block / bpr;
    if (rows.empty() || rows.back() != row) rows.push_back(row);
  }
  return rows;
}

absl::Status ValidateJobPart(const JobPart& part, const common::Geometry& geometry,
                             const PartBounds& bounds, absl::string_view who) {
  if (part.region_epoch != 0 && part.region_epoch != bounds.region_epoch) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "%s: planned against region epoch %016x but the engine now has region epoch %016x: the "
        "region was dropped and re-created, so rows stored before hold no data",
        who, part.region_epoch, bounds.region_epoch));
  }
  if (part.rows.empty()) return absl::InvalidArgumentError(absl::StrCat(who, ": no rows"));
  const uint64_t bpr = geometry.blocks_per_row;
  const bool by_block = !part.region_blocks.empty();
  // Rows (and so row × bpr) were bounded by the service edge's block limit; still checked here,
  // before any multiplication, for parts that come from elsewhere.
  if (!by_block && part.rows.size() > bounds.max_blocks_per_job) {
    return absl::InvalidArgumentError(absl::StrCat(who, ": ", part.rows.size(),
                                                   " rows exceed the limit of ",
                                                   bounds.max_blocks_per_job, " blocks per job"));
  }
  const uint64_t expected_blocks = by_block ? part.region_blocks.size() : part.rows.size() * bpr;
  if (expected_blocks > bounds.max_blocks_per_job) {
    return absl::InvalidArgumentError(absl::StrCat(who, ": ", expected_blocks,
                                                   " blocks exceed the limit of ",
                                                   bounds.max_blocks_per_job, " per job"));
  }
  if (part.gpu_blocks.size() != expected_blocks) {
    return absl::InvalidArgumentError(
        by_block ? absl::StrCat(who, ": ", part.gpu_blocks.size(), " gpu blocks for ",
                                part.region_blocks.size(), " region blocks")
                 : absl::StrCat(who, ": ", part.gpu_blocks.size(), " gpu blocks for ",
                                part.rows.size(), " rows of ", bpr, " blocks (want ",
                                expected_blocks, ")"));
  }
  if (by_block) {
    if (part.direction != CopyDirection::kLoad) {
      return absl::InvalidArgumentError(
          absl::StrCat(who, ": a store must write whole rows (block runs are for loads only)"));
    }
    const uint64_t region_blocks = geometry.num_rows * bpr;  // the geometry fits 64 bits
    for (uint64_t b : part.region_blocks) {
      if (b >= region_blocks) {
        return absl::OutOfRangeError(absl::StrCat(who, ": region block ", b, " (row ", b / bpr,
                                                  ") >= num_rows ", geometry.num_rows));
      }
    }
    if (part.rows != RowsCovered(part.region_blocks, bpr)) {
      return absl::InvalidArgumentError(
          absl::StrCat(who, ": rows differ from the rows its region blocks lie in"));
    }
  }
  for (uint64_t b : part.gpu_blocks) {
    if (b >= bounds.worker_blocks) {
      return absl::OutOfRangeError(absl::StrCat(who, ": gpu block ", b, " >= registered ",
                                                bounds.worker_blocks, " blocks"));
    }
  }
  for (uint64_t r : part.rows) {
    if (r >= geometry.num_rows) {
      return absl::OutOfRangeError(
          absl::StrCat(who, ": row ", r, " >= num_rows ", geometry.num_rows));
    }
  }
  if (part.event_index < -1 || part.event_index >= static_cast<int64_t>(bounds.worker_events)) {
    return absl::InvalidArgumentError(absl::StrCat(who, ": event index ", part.event_index,
                                                   " outside the pool of ",
                                                   bounds.worker_events, " events"));
  }
  return absl::OkStatus();
}

}  // namespace kvoffload::daemon
