#include "daemon/engine/engine_snapshot.h"

#include "daemon/region/region.h"

namespace kvoffload::daemon {

void AddRegionCounters(const EngineResources& resources, EngineSnapshot* s) {
  const Region& region = *resources.region;
  s->region_bytes = region.size();
  s->reserved_bytes = resources.reservation.bytes();
  s->populate_seconds = region.populate_seconds();
  const RegionReadiness readiness = ReadinessOf(region, resources.preparer.get());
  s->region_ready_bytes = readiness.ready_bytes;
  s->rows_not_durable = resources.rows_not_durable ? resources.rows_not_durable() : 0;
  s->region_first_ready_seconds = readiness.first_ready_seconds;
  s->region_fully_ready_seconds = readiness.fully_ready_seconds;
}

void AddJobCounters(const JobTable& jobs, const WorkerSessions& sessions, absl::Time now,
                    EngineSnapshot* s) {
  const JobCounters& c = jobs.counters();
  s->store_bytes = c.store_bytes;
  s->load_bytes = c.load_bytes;
  s->store_jobs = c.store_jobs;
  s->load_jobs = c.load_jobs;
  s->jobs_done = c.jobs_done;
  s->jobs_failed = c.jobs_failed;
  s->jobs_in_flight = jobs.size();
  s->workers = sessions.size();
  s->idle_seconds = sessions.empty() ? absl::ToDoubleSeconds(now - sessions.idle_since()) : 0.0;
}

}  // namespace kvoffload::daemon
