// EngineRegistry: every engine (DP replica) on this node, keyed by "engine_id/dp_rank", plus the
// maintenance that ages them: job deadlines and the idle TTL of engines without workers.
//
//   EngineRegistry registry(deps, options);
//   registry.Start();                                      // maintenance thread
//   ASSIGN_OR_RETURN(auto opened, registry.Open(spec));   // scheduler: creates or joins
//   ASSIGN_OR_RETURN(auto attached,                        // worker: validates, opens its
//                    registry.AttachWorker(spec, 0, mp_rank, registration, &listener));  // memory
//
// Pools: a spec naming a pool is checked against it (PoolTable::Check: access, model
// identity, layout fingerprint) before its engine is created, and the created engine joins it
// (its region becomes a segment). An engine that goes — dropped, idle past TTL, undone — leaves
// its pool; maintenance releases drained segments and forgets empty pools.
//
// Admission: an engine is created only when it fits the node cap (Engine::Create), the engine
// cap (max_engines) and the descriptor headroom (min_free_fds below RLIMIT_NOFILE), so that a
// client creating engines can never starve accept() of descriptors.
//
// Seams: the registry wires three pieces, each with its own tests —
//   EngineTable     (engine_table.h)       the engines by key and region epoch, the shutdown flag;
//   engine admission (engine_admission.h)  the engine count and the descriptor headroom;
//   PoolTable       (daemon/pool/pool_table.h)  the node's pools, their rules and members.
// The registry itself holds the lock story (create_mu_ serialises creation and is taken before
// mu_, which guards the table), the order of steps in Open, AttachWorker and Restore, and the
// ends of engines (Drop, DropIdle, maintenance, Shutdown).
//
// Thread-safety: thread-safe. Ownership: engines are shared-owned; Drop removes the registry's
// reference and closes the engine (its sessions end); the region goes when in-flight copies
// release theirs. EngineDeps and RegistryOptions::durability are borrowed and outlive it.
#ifndef KVOFFLOAD_DAEMON_ENGINE_REGISTRY_H_
#define KVOFFLOAD_DAEMON_ENGINE_REGISTRY_H_

#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "common/engine_spec.h"
#include "common/geometry.h"
#include "daemon/access/caller.h"
#include "daemon/engine/engine.h"
#include "daemon/engine/engine_table.h"
#include "daemon/pool/pool_table.h"
#include "daemon/restart/durability.h"

namespace kvoffload::daemon {

struct RegistryOptions {
  // An engine with no worker attached for this long is dropped; 0 disables.
  absl::Duration idle_engine_ttl = absl::Minutes(10);
  absl::Duration maintenance_period = absl::Milliseconds(100);
  // Most engines at once; one more is RESOURCE_EXHAUSTED. Each holds a memfd and a mapping.
  uint32_t max_engines = 256;
  // A new engine is refused (RESOURCE_EXHAUSTED) unless at least this many descriptors stay
  // free below the soft RLIMIT_NOFILE, kept for connections, worker memory and the daemon.
  uint64_t min_free_fds = 256;
  // First region epoch; 0 picks a random one (each daemon start numbers its regions afresh,
  // so an epoch from an earlier daemon never matches unless its region was restored).
  uint64_t first_region_epoch = 0;
  // Durable regions: engines' regions and states go to the fd store and come back after a restart.
  // Not owned; must outlive the registry. Null or disabled: nothing outlives the daemon.
  Durability* durability = nullptr;
  // Pools (their members are never durable: a pool does not outlive the daemon).
  PoolOptions pools;
};

struct OpenedEngine {
  std::shared_ptr<Engine> engine;
  bool created = false;
};

struct AttachedWorker {
  std::shared_ptr<Engine> engine;
  WorkerInfo info;
};

// Decides, under the registry's lock, whether an engine may be dropped (OK) or not (the error is
// returned and the engine is kept). Must not call back into the registry.
using EngineCheck = std::function<absl::Status(const Engine& engine)>;

class EngineRegistry {
 public:
  EngineRegistry(const EngineDeps& deps, const RegistryOptions& options);
  ~EngineRegistry();  // stops maintenance; does not wait for copies (see Shutdown)
  EngineRegistry(const EngineRegistry&) = delete;
  EngineRegistry& operator=(const EngineRegistry&) = delete;

  void Start();

  // Idempotent: returns the engine of spec.Key(), creating it (validation, admission, region)
  // when absent. FAILED_PRECONDITION when it exists with a different spec. With a non-zero
  // `expected_epoch`, the caller knew a region that must still be the one (FAILED_PRECONDITION
  // naming both epochs otherwise, and nothing is created). Creation of different engines is
  // serialised (it is rare and bounded by region population).
  // With a `caller` (every gRPC call has one), an existing engine is joined only if the caller may
  // use it (CheckEngineUse; PERMISSION_DENIED before its spec is compared, so nothing about it
  // leaks), and a created engine belongs to caller->uid. Without one (in-process users), no check
  // is made and a created engine belongs to the daemon's effective uid.
  absl::StatusOr<OpenedEngine> Open(const common::EngineSpec& spec, uint64_t expected_epoch = 0,
                                    const Caller* caller = nullptr);
  // A worker's registration: validates it against the spec and opens the worker's memory BEFORE
  // the engine is created or joined, so a refused registration creates and reserves nothing.
  // `listener` must stay valid until the engine's Detach of the session returns.
  // `caller` as for Open: checked before anything else, so a refused caller opens no memory.
  absl::StatusOr<AttachedWorker> AttachWorker(const common::EngineSpec& spec,
                                              uint64_t expected_epoch, uint32_t mp_rank,
                                              const WorkerRegistration& registration,
                                              JobListener* listener,
                                              const Caller* caller = nullptr);
  // NOT_FOUND when absent.
  absl::StatusOr<std::shared_ptr<Engine>> Find(const std::string& engine_id,
                                               uint32_t dp_rank) const;
  std::vector<std::shared_ptr<Engine>> List() const;
  // FAILED_PRECONDITION when workers are attached and !force; NOT_FOUND when absent. Returns
  // once every job of the engine has its verdict and its sessions were told to end, i.e. once
  // no copy can touch a worker's memory; that wait is bounded by the job timeout (the backend
  // ends every copy by its deadline), after which it returns anyway and logs it.
  // `may_drop` (when set) is asked first, under the lock, so the engine it approves is the one
  // dropped; its error is returned as is.
  absl::Status Drop(const std::string& engine_id, uint32_t dp_rank, bool force,
                    const EngineCheck& may_drop = nullptr);
  // Drops every engine without workers that `may_drop` (when set) approves; returns their keys.
  std::vector<std::string> DropIdle(const EngineCheck& may_drop = nullptr);

  // Durable regions: recreates an engine a previous daemon left in the fd store, with the same region
  // epoch, owner, members and READY rows (AdoptEngineResources), before any client can see it.
  // ALREADY_EXISTS when its key is taken, RESOURCE_EXHAUSTED when it no longer fits the node
  // cap (or --max_engines). On failure the caller Forgets its descriptors.
  struct RestoredEngine {
    std::string key;
    uint64_t region_epoch = 0;
    uint64_t rows_restored = 0;
    uint64_t rows_dropped = 0;
  };
  absl::StatusOr<RestoredEngine> Restore(Durability::Restorable restorable);

  // The node's pools (stats).
  std::vector<std::shared_ptr<Pool>> ListPools() const { return pools_.List(); }

  // One maintenance pass (tests call it directly): expires jobs, drops engines idle past TTL,
  // releases pools' drained segments and forgets empty pools.
  void Maintain(absl::Time now);

  // Stops new engines and new jobs, lets running copies finish for up to `grace` (their jobs are
  // reported normally), then closes every engine: open jobs fail with `why`, sessions end.
  // Returns false if copies were still running at the deadline.
  bool Shutdown(const absl::Status& why, absl::Duration grace);

 private:
  // A spec with its defaults resolved (local_world_size 0 and the declared value are one
  // engine, as are worker_bytes_per_block 0 and page_bytes x num_layers) and its geometry.
  // Computed once per call: Open and AttachWorker compare, check and create the same spec.
  struct ResolvedSpec {
    common::EngineSpec spec;
    common::Geometry geometry;
  };
  static absl::StatusOr<ResolvedSpec> Resolve(const common::EngineSpec& requested);
  absl::StatusOr<OpenedEngine> OpenResolved(const ResolvedSpec& resolved, uint64_t expected_epoch,
                                            const Caller* caller);
  void RunMaintenance();
  void CloseAndForget(std::shared_ptr<Engine> engine, const absl::Status& why);
  // Engine cap and descriptor headroom; RESOURCE_EXHAUSTED when a new engine must be refused.
  absl::Status AdmitNewEngine(const std::string& key) ABSL_EXCLUSIVE_LOCKS_REQUIRED(create_mu_);
  // A region epoch no engine holds (restored engines keep theirs).
  uint64_t TakeEpoch() ABSL_EXCLUSIVE_LOCKS_REQUIRED(create_mu_);
  bool Durable() const { return options_.durability != nullptr && options_.durability->enabled(); }

  const EngineDeps deps_;
  const RegistryOptions options_;

  absl::Mutex create_mu_;  // serialises engine creation; taken before mu_
  uint64_t next_epoch_ ABSL_GUARDED_BY(create_mu_);
  mutable absl::Mutex mu_;
  EngineTable engines_ ABSL_GUARDED_BY(mu_);  // and whether the node is shutting down

  PoolTable pools_;

  absl::Notification stop_;
  std::thread maintenance_;
};

}  // namespace kvoffload::daemon

#endif  // KVOFFLOAD_DAEMON_ENGINE_REGISTRY_H_
