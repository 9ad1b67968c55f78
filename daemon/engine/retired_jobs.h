// RetiredJobs: the outcomes of an engine's last N retired jobs, so that a late or repeated part
// of a job that already ended gets a precise answer (its verdict, or ALREADY_EXISTS) instead of
// starting a new job with a used id. Bounded: the oldest outcome is forgotten first.
//
//   RetiredJobs retired(/*capacity=*/1 << 16);
//   retired.Remember(job.id, job.status, job.submitted);
//   if (const RetiredJobs::Outcome* done = retired.Find(id)) ...
//
// Not thread-safe: the engine guards it with its mutex. Owns its entries.
#ifndef KVOFFLOAD_DAEMON_ENGINE_RETIRED_JOBS_H_
#define KVOFFLOAD_DAEMON_ENGINE_RETIRED_JOBS_H_

#include <cstddef>
#include <cstdint>
#include <deque>
#include <set>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"

namespace kvoffload::daemon {

class RetiredJobs {
 public:
  struct Outcome {
    absl::Status status;
    std::set<uint32_t> submitted;  // mp_ranks whose part arrived before the job retired
  };

  explicit RetiredJobs(size_t capacity) : capacity_(capacity) {}
  RetiredJobs(const RetiredJobs&) = delete;
  RetiredJobs& operator=(const RetiredJobs&) = delete;

  // Records a job's outcome; forgets the oldest one beyond the capacity. A job id is retired
  // once (the engine never reuses an id it remembers).
  void Remember(uint64_t job_id, absl::Status status, std::set<uint32_t> submitted);
  // The outcome of `job_id`, or nullptr when it was never retired or is forgotten. Valid until
  // the next Remember.
  const Outcome* Find(uint64_t job_id) const;
  size_t size() const { return outcomes_.size(); }

 private:
  const size_t capacity_;
  absl::flat_hash_map<uint64_t, Outcome> outcomes_;
  std::deque<uint64_t> order_;  // oldest first
};

}  // namespace kvoffload::daemon

#endif  // KVOFFLOAD_DAEMON_ENGINE_RETIRED_JOBS_H_
