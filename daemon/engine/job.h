// Job: one store or load of an engine on this node, assembled from the parts (votes) of the
// engine's local workers. Owned by the engine's JobTable (job_table.h) and guarded by the
// engine's mu_. A job lives from its first part until it is due — every vote in, or failed, and
// no copy running — when it is reported and retired in one step: its rows may be reused and only
// its outcome is remembered.
#ifndef KVOFFLOAD_DAEMON_ENGINE_JOB_H_
#define KVOFFLOAD_DAEMON_ENGINE_JOB_H_

#include <cstdint>
#include <set>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "daemon/copy/copy_run.h"

namespace kvoffload::daemon {

struct Job {
  uint64_t id = 0;
  CopyDirection direction = CopyDirection::kStore;
  // The rows of the first part, with their tickets (ValidPart::rows): every part names the
  // same ones, and the index's copy of them ends when the job retires.
  std::vector<RowRun> rows;
  // The region blocks of the first part, as ranges (CopyRun with gpu_block 0; consecutive ones
  // merged): every part must name the same region blocks, its GPU blocks are its own.
  std::vector<CopyRun> region_ranges;
  std::set<uint32_t> voted;    // mp_ranks whose part is counted
  // Slots whose part is counted. A per-rank job needs every slot: a rank that voted and left
  // must not be counted again through a newcomer in the same slot.
  std::set<uint32_t> voted_slots;
  std::set<uint32_t> submitted;   // mp_ranks that submitted a part
  std::set<uint64_t> sessions;    // sessions that submitted a part (their jobs_in_flight)
  uint32_t copies_in_flight = 0;  // backend copies not yet done
  absl::Status status;            // first error, if any
  uint64_t bytes = 0;             // bytes copied on this node
  absl::Time started;             // first part submitted
  absl::Time deadline;            // votes and copies must be done by then
};

// What workers are told about a finished job.
struct JobResult {
  uint64_t job_id = 0;
  absl::Status status;
  uint64_t bytes = 0;
};

}  // namespace kvoffload::daemon

#endif  // KVOFFLOAD_DAEMON_ENGINE_JOB_H_
