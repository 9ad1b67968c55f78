// JobLimits: the per-engine bounds on jobs, with their one written default (--job_timeout_s,
// --max_blocks_per_job, --max_jobs_per_engine and --max_jobs_per_session take theirs from here).
// A plain value; DaemonOptions carries one and every engine gets a copy through EngineDeps.
#ifndef KVOFFLOAD_DAEMON_ENGINE_JOB_LIMITS_H_
#define KVOFFLOAD_DAEMON_ENGINE_JOB_LIMITS_H_

#include <cstddef>
#include <cstdint>

#include "absl/time/time.h"

namespace kvoffload::daemon {

struct JobLimits {
  // A job that has not collected its votes and copies in this long fails (DEADLINE_EXCEEDED).
  absl::Duration job_timeout = absl::Seconds(30);
  // Largest job part in GPU blocks; a larger submit is INVALID_ARGUMENT. Also sizes the gRPC
  // message limit (common/limits.h).
  uint64_t max_blocks_per_job = 1u << 20;
  // Jobs accepted and not yet reported, per engine and per worker session; a part beyond either
  // is refused with RESOURCE_EXHAUSTED and changes nothing (the session stays usable). They also
  // bound the verdicts an engine can queue for a session, and the host backend's per-job
  // descriptor tables (jobs x max_blocks_per_job x 16 bytes).
  uint64_t max_jobs_per_engine = 8192;
  uint64_t max_jobs_per_session = 4096;
  // Finished jobs an engine remembers (RetiredJobs), so a late vote for one is answered.
  size_t finished_remembered = 1u << 16;
};

}  // namespace kvoffload::daemon

#endif  // KVOFFLOAD_DAEMON_ENGINE_JOB_LIMITS_H_
