// WorkerSessions: the local workers attached to one engine — who holds which mp_rank and slot,
// the layout identity they share, and the memory of ranks that left while their copies may still
// run (DESIGN.md §2 "Topology", §4 "Sessions").
//
//   RETURN_IF_ERROR(CheckWorkerRegistration(spec, geometry, mp_rank, registration));
//   RETURN_IF_ERROR(sessions.CheckAttach(mp_rank, slot, PagesOf(registration)));
//   WorkerSession& s = sessions.Add(mp_rank, slot, writer, std::move(memory), listener);
//   ...
//   std::shared_ptr<WorkerMemory> memory = sessions.Remove(s.id);  // remembered as departed
//
// Rules: one session per mp_rank; per-rank layouts one per slot; at most local_world_size
// sessions; every worker's per-tensor page sizes equal the first worker's (the layout the rows
// were laid out for); a rank whose previous session's memory is still held by running copies is
// refused (UNAVAILABLE) so a part it resubmits can never race a copy of the old session into the
// same GPU blocks.
//
// Thread-safety: none of its own; the engine serialises every call under its mu_.
// Ownership: owns the sessions and their references to worker memory; listeners are borrowed
// (valid until their session is removed).
#ifndef KVOFFLOAD_DAEMON_ENGINE_WORKER_SESSIONS_H_
#define KVOFFLOAD_DAEMON_ENGINE_WORKER_SESSIONS_H_

#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "common/engine_spec.h"
#include "common/geometry.h"
#include "daemon/copy/copy_backend.h"
#include "daemon/engine/job.h"

namespace kvoffload::daemon {

class JobListener;

// Checks a registration against an engine spec, without an engine: mp_rank in the world, at
// least one tensor, Σ page_bytes == worker_bytes_per_block (INVALID_ARGUMENT otherwise). What
// depends on other workers is WorkerSessions::CheckAttach's.
absl::Status CheckWorkerRegistration(const common::EngineSpec& spec,
                                     const common::Geometry& geometry, uint32_t mp_rank,
                                     const WorkerRegistration& registration);

// Per-tensor page sizes of a registration, in registration order (the layout identity).
std::vector<uint64_t> PagesOf(const WorkerRegistration& registration);

struct WorkerSession {
  uint64_t id = 0;
  uint32_t mp_rank = 0;
  uint32_t slot = 0;
  bool writer = true;
  std::shared_ptr<WorkerMemory> memory;
  JobListener* listener = nullptr;
  uint64_t jobs_in_flight = 0;  // jobs it submitted a part of that are not reported yet
};

class WorkerSessions {
 public:
  // `layout`: the per-tensor page sizes the engine's rows were stored with (restored after a
  // restart), or empty to let the first worker fix it.
  WorkerSessions(const common::Geometry& geometry, std::string engine_key,
                 std::vector<uint64_t> layout = {});
  WorkerSessions(const WorkerSessions&) = delete;
  WorkerSessions& operator=(const WorkerSessions&) = delete;

  // OK, or why a worker of mp_rank in `slot` with `pages` cannot attach now: UNAVAILABLE (its
  // previous session's copies still run), FAILED_PRECONDITION (another layout), ALREADY_EXISTS
  // (rank or slot taken), RESOURCE_EXHAUSTED (every local worker is attached).
  absl::Status CheckAttach(uint32_t mp_rank, uint32_t slot,
                           const std::vector<uint64_t>& pages) const;
  // Whether mp_rank's previous session still has copies (or their release) in flight.
  bool PreviousSessionCopying(uint32_t mp_rank) const;
  // Attaches a worker CheckAttach accepted; the first one fixes the layout, and *fixed_layout
  // (if given) tells whether this call did.
  WorkerSession& Add(uint32_t mp_rank, uint32_t slot, bool writer,
                     const std::vector<uint64_t>& pages, std::shared_ptr<WorkerMemory> memory,
                     JobListener* listener, bool* fixed_layout = nullptr);
  // Whether `session` may submit a part of job `job_id` in `direction` now: FAILED_PRECONDITION
  // for a non-writer's store when only the writer stores, RESOURCE_EXHAUSTED at
  // `max_jobs_per_session` jobs in flight (--max_jobs_per_session).
  absl::Status CheckMaySubmit(const WorkerSession& session, uint64_t job_id,
                              CopyDirection direction, bool stores_by_writer_only,
                              uint64_t max_jobs_per_session) const;
  // The layout identity, or empty before the first worker.
  const std::vector<uint64_t>& layout() const { return tensor_pages_; }
  // The session, or nullptr.
  WorkerSession* Find(uint64_t session_id);
  // Detaches a session and returns its memory reference, which is also remembered (weakly) as
  // its rank's departed memory. nullptr if there is no such session.
  std::shared_ptr<WorkerMemory> Remove(uint64_t session_id, uint32_t* mp_rank);

  // Queues `result` for every session and ends it for those in `submitters` (their jobs in
  // flight go down by one).
  void Tell(const JobResult& result, const std::set<uint64_t>& submitters,
            std::vector<std::pair<JobListener*, JobResult>>* out);
  std::vector<JobListener*> Listeners() const;

  size_t size() const { return sessions_.size(); }
  bool empty() const { return sessions_.empty(); }
  // When the last worker left (or construction); InfiniteFuture while any is attached.
  absl::Time idle_since() const { return idle_since_; }

 private:
  const common::Geometry geometry_;
  const std::string engine_key_;
  std::map<uint64_t, WorkerSession> sessions_;
  uint64_t next_session_id_ = 1;
  std::map<uint32_t, std::weak_ptr<WorkerMemory>> departed_;
  std::vector<uint64_t> tensor_pages_;  // set by the first worker (or restored)
  absl::Time idle_since_;
};

}  // namespace kvoffload::daemon

#endif  // KVOFFLOAD_DAEMON_ENGINE_WORKER_SESSIONS_H_
