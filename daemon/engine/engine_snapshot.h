// EngineSnapshot: a consistent copy of an engine's counters (kvoffloadctl, metrics), and the
// free functions that fill in the parts the engine's pieces own — its region (EngineResources)
// and its jobs and sessions (JobTable, WorkerSessions). Engine::Snapshot assembles them.
//
//   EngineSnapshot s;  // spec, geometry, index, ... from the engine itself
//   AddRegionCounters(resources, &s);
//   { absl::MutexLock lock(&mu_); AddJobCounters(jobs_, sessions_, absl::Now(), &s); }
//
// Thread-safety: a snapshot is a plain value. AddRegionCounters is thread-safe (the region, its
// preparer and the durable state are); AddJobCounters reads `jobs` and `sessions`, so the caller
// holds the lock that guards them. Ownership: nothing is kept; every argument is borrowed for the call.
#ifndef KVOFFLOAD_DAEMON_ENGINE_ENGINE_SNAPSHOT_H_
#define KVOFFLOAD_DAEMON_ENGINE_ENGINE_SNAPSHOT_H_

#include <cstdint>
#include <string>

#include "absl/time/time.h"
#include "common/engine_spec.h"
#include "common/geometry.h"
#include "daemon/engine/engine_resources.h"
#include "daemon/engine/job_table.h"
#include "daemon/engine/latency_histogram.h"
#include "daemon/engine/worker_sessions.h"
#include "daemon/index/slot_index.h"

namespace kvoffload::daemon {

// A consistent copy of an engine's counters.
struct EngineSnapshot {
  common::EngineSpec spec;
  common::Geometry geometry;
  SlotIndex::Counts index;
  uint64_t region_epoch = 0;
  uint32_t owner_uid = 0;
  uint64_t region_bytes = 0;
  uint64_t reserved_bytes = 0;  // charged to the node cap: region + index metadata
  uint64_t store_bytes = 0;
  uint64_t load_bytes = 0;
  uint64_t store_jobs = 0;
  uint64_t load_jobs = 0;
  uint64_t jobs_done = 0;
  uint64_t jobs_failed = 0;
  uint64_t jobs_in_flight = 0;
  uint32_t workers = 0;
  double idle_seconds = 0;
  double populate_seconds = 0;
  // Serve while pinning (durable regions): bytes of the region usable now (populated and registered;
  // == region_bytes once fully ready) and when the first / the last chunk became ready, in
  // seconds after the engine was opened (-1: not yet).
  uint64_t region_ready_bytes = 0;
  // Rows whose key was too long for the durable state: they do not outlive the daemon.
  uint64_t rows_not_durable = 0;
  double region_first_ready_seconds = 0;
  double region_fully_ready_seconds = 0;
  LatencyHistogram::Snapshot latency;
  std::string pool;  // pools: empty for a private engine
  uint32_t pool_member = 0;
};

// The part of the engine's own resources: its region's bytes, the node-cap charge, the
// populate time, the region's readiness (ReadinessOf) and the rows that do not outlive the daemon.
void AddRegionCounters(const EngineResources& resources, EngineSnapshot* s);
// The jobs' and sessions' part: job counters, jobs in flight, workers and idle time at `now`.
void AddJobCounters(const JobTable& jobs, const WorkerSessions& sessions, absl::Time now,
                    EngineSnapshot* s);

}  // namespace kvoffload::daemon

#endif  // KVOFFLOAD_DAEMON_ENGINE_ENGINE_SNAPSHOT_H_
