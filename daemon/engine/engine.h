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
//
// Seams: the engine wires these pieces, each with one purpose —
//   EngineResources (engine_resources.h)  admission: node-cap reservation, region, index;
//   WorkerSessions  (worker_sessions.h)   attached workers, ranks, slots, layout identity;
//   JobTable        (job_table.h)         open jobs, the vote rule, retired outcomes, counters;
//   Verdicts        (verdicts.h)          verdicts collected under mu_, delivered after it;
//   and free functions: job_rows.h (the index's copy guard over a job's rows), engine_copy.h (a
//   worker's copy to the backend, per pool segment), engine_tier.h, engine_snapshot.h.
// The engine itself holds the lock story (mu_ over the sessions, the jobs and the index's copy
// bookkeeping; delivery_mu_ around delivery) and the order of steps in Submit and retirement.
#ifndef KVOFFLOAD_DAEMON_ENGINE_ENGINE_H_
#define KVOFFLOAD_DAEMON_ENGINE_ENGINE_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/engine_spec.h"
#include "common/geometry.h"
#include "daemon/copy/copy_backend.h"
#include "daemon/engine/engine_resources.h"
#include "daemon/engine/engine_snapshot.h"
#include "daemon/engine/job.h"
#include "daemon/engine/job_limits.h"
#include "daemon/engine/job_part.h"
#include "daemon/engine/job_table.h"
#include "daemon/engine/latency_histogram.h"
#include "daemon/engine/verdicts.h"
#include "daemon/engine/worker_sessions.h"
#include "daemon/index/slot_index.h"
#include "daemon/lifetime/deferred_release.h"
#include "daemon/pool/pool.h"
#include "daemon/region/memory_budget.h"
#include "daemon/region/region.h"
#include "daemon/tier/tier_link.h"

namespace kvoffload::daemon {

// Shared services an engine uses; all outlive every engine.
struct EngineDeps {
  CopyBackend* backend = nullptr;
  MemoryBudget* budget = nullptr;
  DeferredRelease* release = nullptr;
  RegionOptions region_options;
  JobLimits jobs;
  // Copy callbacks still running (incremented before a backend Submit, decremented as the
  // callback's last act): shutdown waits for zero before it frees what callbacks touch.
  std::atomic<int64_t>* callbacks_running = nullptr;
  // The node's tiers below the regions (tier_link.h); null when there are none.
  TierManager* tiers = nullptr;
};

struct WorkerInfo {
  uint64_t session_id = 0;
  uint32_t slot = 0;
  bool writer = true;
  uint64_t region_epoch = 0;
};

// Thread-safe. Shared-owned: sessions, in-flight copies and the registry hold references; the
// region (and its node-cap reservation) is released when the last reference goes, which the
// registry and the copy callbacks hand to DeferredRelease, so it never happens on the copy path.
class Engine : public std::enable_shared_from_this<Engine> {
 public:
  // Validates the spec (common::ComputeGeometry) and acquires its resources
  // (AcquireEngineResources: reservation, region, index — RESOURCE_EXHAUSTED in O(1) with
  // nothing allocated when it does not fit; nothing left behind on any failure). `region_epoch`
  // (non-zero) identifies this region among every region the daemon ever created.
  static absl::StatusOr<std::shared_ptr<Engine>> Create(const common::EngineSpec& spec,
                                                        const EngineDeps& deps,
                                                        uint64_t region_epoch);
  // An engine over resources acquired elsewhere (e.g. a region and index restored after a
  // restart); `geometry` must be ComputeGeometry(spec) and match them.
  static std::shared_ptr<Engine> FromResources(const common::EngineSpec& spec,
                                               const common::Geometry& geometry,
                                               const EngineDeps& deps, uint64_t region_epoch,
                                               EngineResources resources);
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  const common::EngineSpec& spec() const { return spec_; }
  const common::Geometry& geometry() const { return geometry_; }
  uint64_t max_blocks_per_job() const { return deps_.jobs.max_blocks_per_job; }
  std::string key() const { return spec_.Key(); }
  // The engine's row index: its own, or its pool's (pools) once it joined one.
  SlotIndex& index() { return *active_index_; }
  // The member tag its index calls pass (0 for a private engine).
  uint32_t index_member() const { return member_; }
  const std::shared_ptr<Pool>& pool() const { return pool_; }
  // Pools: the engine serves `pool`'s index as member `member` (its region is that member's
  // segment). Set once by the registry before the engine is published, like set_owner_uid.
  void set_pool(std::shared_ptr<Pool> pool, uint32_t member);
  // Leaves the pool (its segment drains); no-op for a private engine. Idempotent.
  void LeavePool();
  // Links the engine's rows — its own index, or its pool's — to the node's tiers (spill and
  // promote, tier_link.h). Called once by the registry before the engine is published, after
  // set_owner_uid and set_pool. Nothing without tiers, or for rows larger than every tier holds
  // (logged).
  void LinkTier();
  // Null when the rows are not tiered. Read-only once published.
  TierLink* tier_link() const { return tier_link_.get(); }
  std::shared_ptr<TierLink> shared_tier_link() const { return tier_link_; }
  uint8_t* region_base() const { return own_.region->data(); }
  // Rows of its own region usable now (serve while pinning; its own index tracks them even when
  // the engine serves a pool's): a pool brings the member's segment online as far as this.
  uint64_t region_ready_rows() const { return own_.index->ready_rows(); }
  // Serve while pinning: once a worker attached (its device context lets the CUDA backend pin),
  // the pin of chunk 0 is retried at once and awaited, at most `timeout`, so that the rows of
  // chunk 0 are usable when the registration is answered. OK at once without a preparer.
  absl::Status WaitFirstRowsUsable(absl::Duration timeout);
  uint64_t region_epoch() const { return region_epoch_; }
  // The uid whose call created the engine (daemon/access/access.h). Set once by the registry
  // before the engine is published to other threads; read-only afterwards.
  void set_owner_uid(uint32_t uid) { owner_uid_ = uid; }
  uint32_t owner_uid() const { return owner_uid_; }

  // FAILED_PRECONDITION with both specs and geometries when `spec` differs from this engine's.
  absl::Status CheckSameSpec(const common::EngineSpec& spec) const;

  // What Attach would refuse because of the workers already attached (rank or slot taken, a
  // different layout, all local workers present, engine closed), before the worker's memory is
  // opened; the registration itself is CheckWorkerRegistration's. Attach checks both again.
  absl::Status CheckAttach(uint32_t mp_rank, const WorkerRegistration& registration) const;
  // Waits until mp_rank's previous session has no copy left in flight (its memory released), or
  // `deadline`; false on the deadline. No lock held while waiting.
  bool AwaitPreviousSession(uint32_t mp_rank, absl::Time deadline) const;
  // Registers a local worker whose memory was opened by the backend: CheckWorkerRegistration and
  // CheckAttach, then a session. On failure `memory` is released (deferred) and nothing changes.
  // `listener` must stay valid until Detach returns.
  absl::StatusOr<WorkerInfo> Attach(uint32_t mp_rank, const WorkerRegistration& registration,
                                    std::unique_ptr<WorkerMemory> memory, JobListener* listener);
  // Ends a session: its unvoted jobs fail (UNAVAILABLE), its memory is released once its
  // in-flight copies are done. Idempotent.
  void Detach(uint64_t session_id);

  // Validates and applies one worker's part of a job. A rejected part changes nothing and returns
  // the error (INVALID_ARGUMENT, OUT_OF_RANGE, ALREADY_EXISTS, FAILED_PRECONDITION, ...).
  absl::Status Submit(uint64_t session_id, const JobPart& part);

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
  Engine(const common::EngineSpec& spec, const common::Geometry& geometry, const EngineDeps& deps,
         uint64_t region_epoch, EngineResources resources);

  // After Close: once no job is left, marks `verdicts` as the ones that end the sessions (once).
  void MaybeAnnounceClosed(Verdicts* verdicts) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool CloseDelivered() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return close_delivered_; }

  // Opens the job of a first part (index copy begun) or joins an open one; the part is counted
  // as submitted. Returns the job, or why the part is refused (nothing changed).
  absl::StatusOr<Job*> OpenOrJoin(const WorkerSession& session, const ValidPart& part)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void OnCopyDone(uint64_t job_id, uint32_t mp_rank, uint32_t slot, absl::Status status,
                  uint64_t bytes);
  // Reports and retires `job` when it is due (JobTable::Due): every session is told its result,
  // the index's copy of its rows ends (a store says whether its rows were written), its outcome
  // is remembered. `job` is dangling when this returns true.
  bool SettleIfDue(Job& job, Verdicts* verdicts) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void FailAndSettle(uint64_t job_id, const absl::Status& why, Verdicts* verdicts)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Delivers the verdicts (delivery_mu_ held, shared or not); true when they end the engine's
  // sessions: the caller then announces the close with delivery_mu_ held exclusively.
  bool Deliver(const Verdicts& verdicts) ABSL_LOCKS_EXCLUDED(mu_);
  // Tells every session still attached that the engine closed, once no other thread is
  // delivering a verdict (delivery_mu_ exclusive: taken, or held by the caller).
  void AnnounceClose() ABSL_LOCKS_EXCLUDED(delivery_mu_, mu_);
  void AnnounceCloseLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(delivery_mu_) ABSL_LOCKS_EXCLUDED(mu_);

  const common::EngineSpec spec_;
  const common::Geometry geometry_;
  const EngineDeps deps_;
  const uint64_t region_epoch_;
  uint32_t owner_uid_ = 0;  // see set_owner_uid
  // Its reservation, region, index, preparer and durable hooks (engine_resources.h); the
  // destructor stops the preparer and unregisters the region before they go.
  EngineResources own_;
  // See set_pool: written before the engine is shared, read-only afterwards.
  std::shared_ptr<Pool> pool_;
  uint32_t member_ = 0;
  SlotIndex* active_index_;              // own_.index or the pool's
  std::shared_ptr<TierLink> tier_link_;  // see LinkTier: its own, or the pool's
  common::Geometry part_geometry_;       // geometry_, num_rows = the index's rows

  // Held shared from collecting verdicts until they are delivered; exclusively by Detach (a
  // listener is never called after Detach returns), by Close and by every delivery of the close
  // notice (which so follows every verdict already collected).
  absl::Mutex delivery_mu_ ABSL_ACQUIRED_BEFORE(mu_);
  mutable absl::Mutex mu_;
  WorkerSessions sessions_ ABSL_GUARDED_BY(mu_);
  JobTable jobs_ ABSL_GUARDED_BY(mu_);
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
  bool closed_announced_ ABSL_GUARDED_BY(mu_) = false;  // OnEngineClosed was collected
  // ... and delivered, with every verdict before it: WaitClosed returns only then.
  bool close_delivered_ ABSL_GUARDED_BY(mu_) = false;
  bool draining_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status drain_why_ ABSL_GUARDED_BY(mu_);
  absl::Status closed_why_ ABSL_GUARDED_BY(mu_);
  LatencyHistogram latency_;  // thread-safe itself
};

}  // namespace kvoffload::daemon

#endif  // KVOFFLOAD_DAEMON_ENGINE_ENGINE_H_
