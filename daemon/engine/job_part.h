// JobPart: one worker's part of a job, as the service edge hands it to the engine, and the one
// function that checks it against the engine's geometry and the worker's registration. Plain
// data and a pure function: no lock, no engine state (what depends on other parts, e.g. that
// every part of a job names the same rows, is the engine's).
//
//   JobPart part = ...;  // from the wire (daemon/service/convert.h)
//   RETURN_IF_ERROR(ValidateJobPart(part, geometry, PartBounds{...}, "job 7 of mp_rank 1"));
#ifndef KVOFFLOAD_DAEMON_ENGINE_JOB_PART_H_
#define KVOFFLOAD_DAEMON_ENGINE_JOB_PART_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "common/geometry.h"
#include "daemon/copy/copy_backend.h"  // CopyDirection

namespace kvoffload::daemon {

struct JobPart {
  uint64_t job_id = 0;
  CopyDirection direction = CopyDirection::kStore;
  std::vector<uint64_t> gpu_blocks;
  // Whole rows: rows[i] takes gpu_blocks[i × bpr .. (i + 1) × bpr), bpr = blocks_per_row.
  std::vector<uint64_t> rows;
  // Loads only, block by block: when not empty, gpu_blocks[i] takes region block
  // region_blocks[i] (block region_blocks[i] % bpr of row region_blocks[i] / bpr), and `rows`
  // must be RowsCovered(region_blocks, bpr).
  std::vector<uint64_t> region_blocks;
  int32_t event_index = -1;
  // The region the part was planned against (from OpenEngine or registration); 0 = not checked.
  // A different value is FAILED_PRECONDITION: the region was re-created and holds no stored data.
  uint64_t region_epoch = 0;
};

// The rows that region blocks lie in, in order of appearance, each run of equal rows once.
std::vector<uint64_t> RowsCovered(const std::vector<uint64_t>& region_blocks,
                                  uint32_t blocks_per_row);

// What a part is checked against besides the geometry.
struct PartBounds {
  uint64_t region_epoch = 0;        // the engine's region
  uint64_t worker_blocks = 0;       // GPU blocks the worker registered
  uint64_t worker_events = 0;       // interprocess events the worker registered
  uint64_t max_blocks_per_job = 0;  // --max_blocks_per_job
};

// OK, or why the part cannot be copied, naming `who` (e.g. "job 7 of mp_rank 1"):
//   FAILED_PRECONDITION  planned against another region epoch
//   INVALID_ARGUMENT     no rows; block count ≠ rows × blocks_per_row (or ≠ region blocks);
//                        more blocks than max_blocks_per_job; region blocks in a store; rows
//                        that are not the rows the region blocks lie in; event index outside
//                        the pool
//   OUT_OF_RANGE         a GPU block, row or region block past the end
absl::Status ValidateJobPart(const JobPart& part, const common::Geometry& geometry,
                             const PartBounds& bounds, absl::string_view who);

}  // namespace kvoffload::daemon

#endif  // KVOFFLOAD_DAEMON_ENGINE_JOB_PART_H_
