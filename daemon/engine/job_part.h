// JobPart: one worker's part of a job as the service edge hands it to the engine (the wire's
// shape: explicit lists, runs of whole rows, ranges of blocks), and ValidatePart, the one place
// where a part's rules live. It turns the part into a ValidPart — runs (copy_run.h) and the row
// runs they lie in — which the engine, the index's copy guards, the descriptor table and the
// planner all take as is: nothing is expanded into per-block lists and merged again. Explicit
// lists become one-row runs here (consecutive entries merge). Plain data and a pure function:
// no lock, no engine state (what depends on other parts, e.g. that every part of a job names
// the same rows, is the job table's).
//
//   JobPart part = ...;  // from the wire (daemon/service/convert.h)
//   ASSIGN_OR_RETURN(ValidPart valid, ValidatePart(part, geometry, PartBounds{...}, "job 7"));
#ifndef KVOFFLOAD_DAEMON_ENGINE_JOB_PART_H_
#define KVOFFLOAD_DAEMON_ENGINE_JOB_PART_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/geometry.h"
#include "daemon/copy/copy_run.h"

namespace kvoffload::daemon {

// One run as the wire sends it (v1.BlockRun): whole rows [row, row + num_rows) taking GPU
// blocks from gpu_block (num_blocks 0, first_block 0), or, in loads, num_blocks blocks from
// block first_block of row (num_rows 0). `row` is a row handle (StoreHandle).
struct PartRun {
  uint64_t gpu_block = 0;
  uint64_t row = 0;
  uint64_t num_rows = 0;
  uint32_t first_block = 0;
  uint64_t num_blocks = 0;
};

struct JobPart {
  uint64_t job_id = 0;
  CopyDirection direction = CopyDirection::kStore;
  // Explicit lists: row handle rows[i] takes gpu_blocks[i × bpr .. (i + 1) × bpr).
  std::vector<uint64_t> gpu_blocks;
  std::vector<uint64_t> rows;
  std::vector<PartRun> runs;  // after the lists, in order
  int32_t event_index = -1;
  // The region the part was planned against (from OpenEngine or registration);
  // common::kUncheckedRegionEpoch = not checked. A different value is FAILED_PRECONDITION: the
  // region was re-created and holds no stored data.
  uint64_t region_epoch = 0;
};

// A part that passed ValidatePart: every run inside the worker's blocks and the region.
struct ValidPart {
  uint64_t job_id = 0;
  CopyDirection direction = CopyDirection::kStore;
  int32_t event_index = -1;
  std::vector<CopyRun> runs;  // in the part's order
  // The rows the runs lie in, in order, with the tickets of their handles (0 = not checked).
  // When the part has ranges of blocks, a row that continues the previous run's last row is
  // listed once (its first ticket kept); otherwise every listed row counts.
  std::vector<RowRun> rows;
  uint64_t num_blocks = 0;
};

// What a part is checked against besides the geometry.
struct PartBounds {
  uint64_t region_epoch = 0;        // the engine's region
  uint64_t worker_blocks = 0;       // GPU blocks the worker registered
  uint64_t worker_events = 0;       // interprocess events the worker registered
  uint64_t max_blocks_per_job = 0;  // --max_blocks_per_job
  // Rows are the index's handles (ticket << 32 | row): split them. False for engines that
  // assign rows themselves: a row is the plain value, and a ticket in it is out of range.
  bool row_handles = true;
};

// The part as runs, or why it cannot be copied, naming `who` (e.g. "job 7 of mp_rank 1"). In
// this order:
//   INVALID_ARGUMENT     a run with both or neither of num_rows / num_blocks, first_block past
//                        the row, or overflowing; more blocks than max_blocks_per_job; ranges
//                        of blocks in a store (stores write whole rows)
//   FAILED_PRECONDITION  planned against another region epoch
//   INVALID_ARGUMENT     no rows; list blocks ≠ listed rows × blocks_per_row
//   OUT_OF_RANGE         a row, region block or GPU block past the end
//   INVALID_ARGUMENT     event index outside the pool
// Work: O(listed blocks + runs), never O(blocks of a run).
absl::StatusOr<ValidPart> ValidatePart(const JobPart& part, const common::Geometry& geometry,
                                       const PartBounds& bounds, absl::string_view who);

}  // namespace kvoffload::daemon

#endif  // KVOFFLOAD_DAEMON_ENGINE_JOB_PART_H_
