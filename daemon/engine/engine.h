// Engine: one DP replica of one serving engine on this node. Owns the replica's region, its row
// index, its worker sessions and its jobs, and turns workers' parts into finished jobs (votes).
//
//   ASSIGN_OR_RETURN(auto engine, Engine::Create(spec, deps, epoch));
//   ASSIGN_OR_RETURN(auto memory, deps.backend->OpenWorker(registration));
//   ASSIGN_OR_RETURN(WorkerInfo w, engine->Attach(mp_rank, registration, std::move(memory),
//                                                 &listener));
//   RETURN_IF_ERROR(engine->Submit(w.session_id, part));   // listener hears OnJobFinished later
//   engine->Detach(w.session_id);                           // fails that worker's open jobs
//
// Vote rule (DESIGN.md §2/§4): a job finishes on this node when every local worker of the engine
// has voted and every copy has finished; its status is the first error. A worker votes when its
// copy is done; a replicated non-writer (mp_rank != 0) votes on submit without copying, so a job
// can never finish on non-writer votes alone: the writer's vote is always required.
//
// Verdicts (DESIGN.md §7, PegaFlow 403): every accepted job gets exactly one JobFinished per
// session, and only once no copy of it can touch any memory any more; a session hears
// OnEngineClosed only after every verdict of the engine was delivered to it.
#ifndef KVOFFLOAD_DAEMON_ENGINE_ENGINE_H_
#define KVOFFLOAD_DAEMON_ENGINE_ENGINE_H_

#include <atomic>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/engine_spec.h"
#include "common/geometry.h"
#include "daemon/copy/copy_backend.h"
#include "daemon/engine/deferred_release.h"
#include "daemon/engine/job.h"
#include "daemon/engine/job_part.h"
#include "daemon/engine/retired_jobs.h"
#include "daemon/engine/latency_histogram.h"
#include "daemon/index/slot_index.h"
#include "daemon/region/memory_budget.h"
#include "daemon/region/region.h"

namespace kvoffload::daemon {

// Hears about the jobs of one worker session. Implemented by the gRPC session. Called from
// daemon threads with no engine lock held; must not block (queue and return).
class JobListener {
 public:
  virtual ~JobListener() = default;
  virtual void OnJobFinished(const JobResult& result) = 0;
  // The engine was dropped or the daemon is stopping: the session should end with `why`. Called
  // once, after the last OnJobFinished of this engine: no copy of the engine's jobs is running.
  virtual void OnEngineClosed(const absl::Status& why) = 0;
};

// Shared services an engine uses; all outlive every engine.
struct EngineDeps {
  CopyBackend* backend = nullptr;
  MemoryBudget* budget = nullptr;
  DeferredRelease* release = nullptr;
  RegionOptions region_options;
  absl::Duration job_timeout = absl::Seconds(30);
  uint64_t max_blocks_per_job = 1u << 20;  // larger submits are INVALID_ARGUMENT
  // Jobs accepted and not yet reported, per engine and per worker session; a part beyond either
  // is refused with RESOURCE_EXHAUSTED and changes nothing (the session stays usable). They also
  // bound the verdicts an engine can queue for a session, and the host backend's per-job
  // descriptor tables (jobs × max_blocks_per_job × 16 bytes).
  uint64_t max_jobs_per_engine = 8192;
  uint64_t max_jobs_per_session = 4096;
  size_t finished_jobs_remembered = 1u << 16;
  // Copy callbacks still running (incremented before a backend Submit, decremented as the
  // callback's last act): shutdown waits for zero before it frees what callbacks touch.
  std::atomic<int64_t>* callbacks_running = nullptr;
};

struct WorkerInfo {
  uint64_t session_id = 0;
  uint32_t slot = 0;
  bool writer = true;
  uint64_t region_epoch = 0;
};

// What an engine costs the node, charged to the node cap before anything is allocated.
struct EngineCost {
  uint64_t region_bytes = 0;
  uint64_t index_bytes = 0;  // SlotIndex::MetadataBytesFor(num_rows)
  uint64_t total_bytes = 0;  // region + index; UINT64_MAX when the sum does not fit 64 bits
};

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
  LatencyHistogram::Snapshot latency;
};

// Thread-safe. Shared-owned: sessions, in-flight copies and the registry hold references; the
// region (and its node-cap reservation) is released when the last reference goes, which the
// registry and the copy callbacks hand to DeferredRelease, so it never happens on the copy path.
class Engine : public std::enable_shared_from_this<Engine> {
 public:
  // The whole cost of an engine of `geometry`, arithmetically (nothing is allocated).
  // RESOURCE_EXHAUSTED when it cannot be held by any node: more rows than one index can number.
  static absl::StatusOr<EngineCost> CostOf(const common::Geometry& geometry);

  // Validates the spec (common::ComputeGeometry), reserves its whole cost (CostOf) against the
  // node cap, then creates and populates the region, registers it with the backend and builds
  // the index, in that order. An engine that does not fit is RESOURCE_EXHAUSTED in O(1) time with
  // nothing allocated; nothing is left allocated or reserved on any failure. `region_epoch`
  // (non-zero) identifies this region among every region the daemon ever created.
  static absl::StatusOr<std::shared_ptr<Engine>> Create(const common::EngineSpec& spec,
                                                        const EngineDeps& deps,
                                                        uint64_t region_epoch);

  // Checks a registration against an engine spec without an engine: mp_rank in the world, at
  // least one tensor, Σ page_bytes == worker_bytes_per_block. What depends on other workers
  // (slot taken, layout identity) is checked by CheckAttach and Attach.
  static absl::Status CheckRegistration(const common::EngineSpec& spec,
                                        const common::Geometry& geometry, uint32_t mp_rank,
                                        const WorkerRegistration& registration);
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  const common::EngineSpec& spec() const { return spec_; }
  const common::Geometry& geometry() const { return geometry_; }
  uint64_t max_blocks_per_job() const { return deps_.max_blocks_per_job; }
  std::string key() const { return spec_.Key(); }
  SlotIndex& index() { return *index_; }
  uint64_t region_epoch() const { return region_epoch_; }
  // The uid whose call created the engine (daemon/engine/access.h). Set once by the registry
  // before the engine is published to other threads; read-only afterwards.
  void set_owner_uid(uint32_t uid) { owner_uid_ = uid; }
  uint32_t owner_uid() const { return owner_uid_; }

  // FAILED_PRECONDITION with both specs and geometries when `spec` differs from this engine's.
  absl::Status CheckSameSpec(const common::EngineSpec& spec) const;

  // What Attach would refuse because of the workers already attached (rank or slot taken, a
  // different layout, all local workers present, engine closed), before the worker's memory is
  // opened. Attach checks it again.
  absl::Status CheckAttach(uint32_t mp_rank, const WorkerRegistration& registration) const;
  // Registers a local worker whose memory was opened by the backend: CheckRegistration and
  // CheckAttach, then a session. On failure `memory` is released (deferred) and nothing changes.
  // `listener` must stay valid until Detach returns.
  absl::StatusOr<WorkerInfo> Attach(uint32_t mp_rank, const WorkerRegistration& registration,
                                    std::unique_ptr<WorkerMemory> memory, JobListener* listener);
  // Ends a session: its unvoted jobs fail (UNAVAILABLE), its memory is released once its
  // in-flight copies are done. Idempotent.
  void Detach(uint64_t session_id);

  // Validates and applies one worker's part of a job. A rejected part changes nothing and returns
  // the error (INVALID_ARGUMENT, OUT_OF_RANGE, ALREADY_EXISTS, FAILED_PRECONDITION, ...).
  absl::Status Submit(uint64_t session_id, JobPart part);

  // Fails jobs past their deadline (DEADLINE_EXCEEDED). Called by the registry's maintenance.
  void ExpireJobs(absl::Time now);
  // Graceful stop, first half: new parts fail with `why`, jobs still waiting for parts fail now,
  // jobs whose copies are running finish on their own (and fail with `why` if a vote is missing).
  void Drain(const absl::Status& why);
  // Fails every open job with `why`; each is reported once its copies have ended (the backend
  // ends them by their deadline). Once the last job is reported, every session is told to end
  // (OnEngineClosed) — never earlier, so no worker hears that its session is over while a copy
  // may still write its memory. Idempotent.
  void Close(const absl::Status& why);
  // Waits until a closed engine has reported every job and told its sessions to end; false if
  // that has not happened by `deadline`.
  bool WaitClosed(absl::Time deadline) const;

  EngineSnapshot Snapshot() const;
  uint32_t num_workers() const;
  // When the last worker left (or the engine was created without workers); InfiniteFuture while
  // any worker is attached.
  absl::Time idle_since() const;

 private:
  struct Session {
    uint64_t id = 0;
    uint32_t mp_rank = 0;
    uint32_t slot = 0;
    bool writer = true;
    std::shared_ptr<WorkerMemory> memory;
    JobListener* listener = nullptr;
    uint64_t jobs_in_flight = 0;  // jobs it submitted a part of that are not reported yet
  };
  // Collected under mu_, delivered after it is released (listeners must not be called with it).
  struct Notices {
    std::vector<std::pair<JobListener*, JobResult>> finished;
    std::vector<JobListener*> closed;  // told OnEngineClosed(closed_why_) after `finished`
    absl::Status closed_why;
    bool announces_close = false;  // these notices end the engine's sessions
  };

  Engine(const common::EngineSpec& spec, const common::Geometry& geometry, const EngineDeps& deps,
         uint64_t region_epoch, MemoryReservation reservation, std::unique_ptr<Region> region,
         std::unique_ptr<SlotIndex> index);

  absl::Status CheckAttachLocked(uint32_t mp_rank, uint32_t slot,
                                 const std::vector<uint64_t>& pages) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // After Close: once no job is left, tells every session to end (once).
  void MaybeAnnounceClosed(Notices* notices) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool CloseDelivered() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return close_delivered_; }

  absl::Status ValidatePart(const Session& session, const JobPart& part) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The replicated layout with writer-only stores (EngineSpec::stores_by_writer_only).
  bool StoresByWriterOnly() const { return geometry_.replicated && spec_.stores_by_writer_only; }
  void OnCopyDone(uint64_t job_id, uint32_t mp_rank, uint32_t slot, absl::Status status,
                  uint64_t bytes);
  // Records `mp_rank`'s vote (and error); finishes or reports the job when due.
  void Vote(Job& job, uint32_t mp_rank, uint32_t slot, const absl::Status& status, Notices* notices)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void FailJob(Job& job, const absl::Status& why, Notices* notices)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Reports the outcome to every session once; retires the job when its copies are done.
  void MaybeFinish(Job& job, Notices* notices) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Report(Job& job, Notices* notices) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Deliver(Notices& notices) ABSL_LOCKS_EXCLUDED(mu_);  // delivery_mu_ held

  const common::EngineSpec spec_;
  const common::Geometry geometry_;
  const EngineDeps deps_;
  const uint64_t region_epoch_;
  uint32_t owner_uid_ = 0;  // see set_owner_uid
  MemoryReservation reservation_;
  std::unique_ptr<Region> region_;
  const std::unique_ptr<SlotIndex> index_;

  // Held shared from collecting notices until they are delivered, exclusively by Detach: a
  // listener is never called after Detach returns.
  absl::Mutex delivery_mu_ ABSL_ACQUIRED_BEFORE(mu_);
  mutable absl::Mutex mu_;
  std::map<uint64_t, Session> sessions_ ABSL_GUARDED_BY(mu_);
  uint64_t next_session_id_ ABSL_GUARDED_BY(mu_) = 1;
  // The memory of each mp_rank's last departed session while its copies may still run (they
  // hold it): a new session of that rank is refused until they end, so a part it resubmits can
  // never race a copy of the old session into the same GPU blocks.
  std::map<uint32_t, std::weak_ptr<WorkerMemory>> departed_ ABSL_GUARDED_BY(mu_);
  // Per-tensor page sizes set by the first worker; later workers must match (layout identity).
  std::vector<uint64_t> tensor_pages_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<uint64_t, Job> jobs_ ABSL_GUARDED_BY(mu_);
  RetiredJobs retired_ ABSL_GUARDED_BY(mu_);
  absl::Time idle_since_ ABSL_GUARDED_BY(mu_);
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
  bool closed_announced_ ABSL_GUARDED_BY(mu_) = false;  // OnEngineClosed was collected
  // ... and delivered, with every verdict before it: WaitClosed returns only then.
  bool close_delivered_ ABSL_GUARDED_BY(mu_) = false;
  bool draining_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status drain_why_ ABSL_GUARDED_BY(mu_);
  absl::Status closed_why_ ABSL_GUARDED_BY(mu_);

  uint64_t store_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t load_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t store_jobs_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t load_jobs_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t jobs_done_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t jobs_failed_ ABSL_GUARDED_BY(mu_) = 0;
  LatencyHistogram latency_;  // thread-safe itself
};

}  // namespace kvoffload::daemon

#endif  // KVOFFLOAD_DAEMON_ENGINE_ENGINE_H_
