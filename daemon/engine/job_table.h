// JobTable: the open jobs of one engine on this node and the vote rule that finishes them
// (DESIGN.md §2/§4). A job opens with its first worker's part, collects one vote per local
// worker (a worker votes when its copy ends; a replicated non-writer votes on submit), and is
// due once every vote is in — or once it failed — and no copy of it is running. The engine then
// reports it to its sessions and retires it: the table forgets the job and remembers only its
// outcome (RetiredJobs), so a late part gets the job's verdict instead of reusing its id.
//
//   JobTable jobs(VoteRule::For(geometry, spec), limits, spec.Key());
//   RETURN_IF_ERROR(jobs.CheckNew(part, mp_rank));       // a ValidPart; or CheckJoin
//   Job& job = jobs.Open(part, absl::Now());
//   ... copy ends ...
//   jobs.Vote(job, mp_rank, slot, status);
//   if (jobs.Due(job)) { report job; end the index's copy of its rows; jobs.Retire(job); }
//
// Thread-safety: none of its own. Its owner serialises every call (Engine holds its mu_ around
// each). Ownership: owns its jobs; a Job& or Job* stays valid until the next Open or Retire.
#ifndef KVOFFLOAD_DAEMON_ENGINE_JOB_TABLE_H_
#define KVOFFLOAD_DAEMON_ENGINE_JOB_TABLE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/time/time.h"
#include "common/engine_spec.h"
#include "common/geometry.h"
#include "daemon/engine/job.h"
#include "daemon/engine/job_limits.h"
#include "daemon/engine/job_part.h"
#include "daemon/engine/retired_jobs.h"

namespace kvoffload::daemon {

// Whose votes finish a job. Replicated layouts: every local rank (all share slot 0), or the
// writer (mp_rank 0) alone for stores when the spec says stores_by_writer_only. Per-rank
// layouts: every slot of the row, counted by slot so that a rank that voted and left is not
// counted again through a newcomer in the same slot.
struct VoteRule {
  bool replicated = false;
  uint32_t local_world_size = 1;
  bool stores_by_writer_only = false;  // only with `replicated`

  static VoteRule For(const common::Geometry& geometry, const common::EngineSpec& spec);
  bool AllVoted(const Job& job) const;
  // Whether a job in `direction` waits for mp_rank's vote at all.
  bool NeedsVoteOf(CopyDirection direction, uint32_t mp_rank) const;
};

// Totals of the jobs this table reported, and their bytes.
struct JobCounters {
  uint64_t store_bytes = 0;
  uint64_t load_bytes = 0;
  uint64_t store_jobs = 0;  // done OK
  uint64_t load_jobs = 0;
  uint64_t jobs_done = 0;
  uint64_t jobs_failed = 0;
};

class JobTable {
 public:
  JobTable(VoteRule rule, JobLimits limits, std::string engine_key);
  JobTable(const JobTable&) = delete;
  JobTable& operator=(const JobTable&) = delete;

  // The open job `id`, or nullptr.
  Job* Find(uint64_t id);
  size_t size() const { return jobs_.size(); }
  bool empty() const { return jobs_.empty(); }
  const VoteRule& rule() const { return rule_; }

  // Whether `part` (from mp_rank, whose id names no open job) may open a job. A retired id is
  // ALREADY_EXISTS — except a late part of a failed job from a rank whose part had not arrived,
  // which gets the job's verdict; RESOURCE_EXHAUSTED at the open-job limit; a store naming a row
  // twice is INVALID_ARGUMENT.
  absl::Status CheckNew(const ValidPart& part, uint32_t mp_rank) const;
  // Opens the job of a part CheckNew accepted (the caller has begun the index's copy of its
  // rows in between). The job keeps the part's row runs (with their tickets) and runs.
  Job& Open(const ValidPart& part, absl::Time now);
  // Whether mp_rank's `part` may join open `job`: ALREADY_EXISTS when the rank's part is in;
  // INVALID_ARGUMENT when it names other rows, tickets, region blocks or direction (the ranks
  // of a replicated layout must copy the same bytes). O(runs).
  absl::Status CheckJoin(const Job& job, const ValidPart& part, uint32_t mp_rank) const;

  // Records mp_rank's vote (in `slot`) and its error, the first of which becomes the job's.
  void Vote(Job& job, uint32_t mp_rank, uint32_t slot, const absl::Status& status);
  // Adds a copy's bytes to the job and the counters.
  void CountCopied(Job& job, uint64_t bytes);
  // A copy of mp_rank's part of open job `job_id` ended, `bytes` copied or why not: counts the
  // bytes (CountCopied) or names the job and rank in the error, and records the vote. Fatal when
  // the job is not open (retired while a copy of it ran). Returns the job.
  Job& CopyEnded(uint64_t job_id, uint32_t mp_rank, uint32_t slot, absl::Status status,
                 uint64_t bytes);
  // Fails the job with `why` unless it already failed. It is due only once no copy runs: a
  // worker told "failed" reuses its GPU blocks, and a load landing afterwards would corrupt them.
  void Fail(Job& job, const absl::Status& why);
  // Graceful stop: from now on a job that can get no copy and misses votes fails with `why` (the
  // missing parts will never be accepted).
  void StartDraining(const absl::Status& why);

  // Whether `job` is to be reported and retired now: every vote in, or failed, and no copy
  // running. Applies the drain rule first.
  bool Due(Job& job);
  // Counts the outcome of a due job (and logs a failure); returns what its workers are told.
  JobResult Report(const Job& job);
  // Forgets a reported job, remembering its outcome. `job` is dangling afterwards.
  void Retire(Job& job);

  // Open jobs that wait for mp_rank's vote and have not had it.
  std::vector<uint64_t> AwaitingVoteOf(uint32_t mp_rank) const;
  // Open jobs past their deadline at `now`, with the error each fails with.
  std::vector<std::pair<uint64_t, absl::Status>> Expired(absl::Time now,
                                                         uint32_t world_size) const;
  // Open jobs with no copy running (they wait for parts only).
  std::vector<uint64_t> WaitingForParts() const;
  std::vector<uint64_t> Ids() const;

  const JobCounters& counters() const { return counters_; }

 private:
  const VoteRule rule_;
  const JobLimits limits_;
  const std::string engine_key_;
  absl::flat_hash_map<uint64_t, Job> jobs_;
  RetiredJobs retired_;
  bool draining_ = false;
  absl::Status drain_why_;
  JobCounters counters_;
};

}  // namespace kvoffload::daemon

#endif  // KVOFFLOAD_DAEMON_ENGINE_JOB_TABLE_H_
