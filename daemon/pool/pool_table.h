// PoolTable: the node's pools by name. The registry asks it, under its engine-creation
// lock, whether a spec naming a pool may join (Check, before the engine's region is allocated),
// then joins the created engine (Join: into the existing pool, or a new one the engine creates
// and owns). Maintenance forgets pools whose last member left and drained.
//
//   RETURN_IF_ERROR(pools.Check(&caller, spec, geometry));       // nothing allocated yet
//   ... create the engine (its region is the new segment) ...
//   ASSIGN_OR_RETURN(PoolTable::Joined joined, pools.Join(&caller, spec, geometry, owner, ...));
//
// Thread-safety: thread-safe; mu_ is taken before any Pool's lock, never inside an engine's.
#ifndef KVOFFLOAD_DAEMON_POOL_POOL_TABLE_H_
#define KVOFFLOAD_DAEMON_POOL_POOL_TABLE_H_

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "common/engine_spec.h"
#include "common/geometry.h"
#include "daemon/access/caller.h"
#include "daemon/lifetime/deferred_release.h"
#include "daemon/pool/pool.h"
#include "daemon/region/memory_budget.h"

namespace kvoffload::daemon {

class PoolTable {
 public:
  PoolTable(const PoolOptions& options, MemoryBudget* budget, DeferredRelease* release)
      : options_(options), budget_(budget), release_(release) {}
  PoolTable(const PoolTable&) = delete;
  PoolTable& operator=(const PoolTable&) = delete;

  // For a spec that names a pool: INVALID_ARGUMENT for bad names; for an existing pool,
  // Pool::CheckJoin; for a new one, that its index fits (RESOURCE_EXHAUSTED on the node cap is
  // only known at Join). Changes nothing.
  absl::Status Check(const Caller* caller, const common::EngineSpec& spec,
                     const common::Geometry& geometry) const;

  struct Joined {
    std::shared_ptr<Pool> pool;
    uint32_t member = 0;
    bool created = false;
  };
  // Joins `spec.pool` (creating it, owned by `owner_uid`, when absent) with the engine's region.
  // Errors as Check's, plus RESOURCE_EXHAUSTED for a new pool's index on the node cap.
  absl::StatusOr<Joined> Join(const Caller* caller, const common::EngineSpec& spec,
                              const common::Geometry& geometry, uint32_t owner_uid,
                              std::shared_ptr<void> keepalive, uint8_t* region_base,
                              Pool::ReadyRows ready_rows = nullptr);

  // Pool::Maintain on each; forgets the empty ones.
  void Maintain();
  std::vector<std::shared_ptr<Pool>> List() const;
  // Shutdown: every pool lets go of its segments and is forgotten.
  void Clear();

 private:
  const PoolOptions options_;
  MemoryBudget* const budget_;
  DeferredRelease* const release_;
  mutable absl::Mutex mu_;
  std::map<std::string, std::shared_ptr<Pool>> pools_ ABSL_GUARDED_BY(mu_);
};

}  // namespace kvoffload::daemon

#endif  // KVOFFLOAD_DAEMON_POOL_POOL_TABLE_H_
