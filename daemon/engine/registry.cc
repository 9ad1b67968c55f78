#include "daemon/engine/registry.h"

#include <sys/random.h>
#include <unistd.h>

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/fd_usage.h"
#include "common/geometry.h"
#include "common/limits.h"
#include "common/logging.h"
#include "common/refusals.h"
#include "common/status_macros.h"
#include "common/thread_name.h"
#include "daemon/access/access.h"
#include "daemon/engine/engine_admission.h"

namespace kvoffload::daemon {
namespace {

spdlog::logger* Log() {
  static spdlog::logger* log = common::Logger("registry");
  return log;
}

uint64_t RandomEpoch() {
  uint64_t epoch = 0;
  if (getrandom(&epoch, sizeof(epoch), 0) != sizeof(epoch)) {
    epoch = static_cast<uint64_t>(absl::ToUnixNanos(absl::Now()));
  }
  // Leave room to count up; never 0 ("not checked").
  return (epoch >> 1) | 1;
}

// How long a worker's registration waits for its region's first chunk to become usable.
constexpr absl::Duration kFirstRowsWait = absl::Seconds(10);
// How long a registration waits for the previous session of its rank to end its copies (they
// end by their job's deadline at worst; usually within milliseconds of the session's end).
constexpr absl::Duration kPreviousSessionWait = absl::Seconds(2);

}  // namespace

EngineRegistry::EngineRegistry(const EngineDeps& deps, const RegistryOptions& options)
    : deps_(deps),
      options_(options),
      next_epoch_(options.first_region_epoch != 0 ? options.first_region_epoch : RandomEpoch()),
      pools_(options.pools, deps.budget, deps.release) {}

EngineRegistry::~EngineRegistry() {
  stop_.Notify();
  if (maintenance_.joinable()) maintenance_.join();
  // A member engine holds its pool and the pool holds its members' keepalives: without
  // Shutdown (tests, early exits) nothing else breaks that cycle.
  pools_.Clear();
}

void EngineRegistry::Start() {
  maintenance_ = std::thread([this] { RunMaintenance(); });
}

absl::StatusOr<EngineRegistry::ResolvedSpec> EngineRegistry::Resolve(
    const common::EngineSpec& requested) {
  ASSIGN_OR_RETURN(common::Geometry geometry, common::ComputeGeometry(requested));
  ResolvedSpec resolved{requested, geometry};
  resolved.spec.local_world_size = geometry.local_world_size;
  resolved.spec.worker_bytes_per_block = geometry.worker_bytes_per_block;
  return resolved;
}

absl::StatusOr<OpenedEngine> EngineRegistry::Open(const common::EngineSpec& requested,
                                                  uint64_t expected_epoch, const Caller* caller) {
  // Validate before anything else so a bad spec is rejected even if a same-key engine exists.
  ASSIGN_OR_RETURN(ResolvedSpec resolved, Resolve(requested));
  return OpenResolved(resolved, expected_epoch, caller);
}

absl::StatusOr<OpenedEngine> EngineRegistry::OpenResolved(const ResolvedSpec& resolved,
                                                          uint64_t expected_epoch,
                                                          const Caller* caller) {
  const common::EngineSpec& spec = resolved.spec;
  const common::Geometry& geometry = resolved.geometry;
  auto existing = [&]() -> absl::StatusOr<OpenedEngine> {
    absl::MutexLock lock(&mu_);
    if (engines_.shutting_down()) return absl::UnavailableError("kvoffloadd is shutting down");
    std::shared_ptr<Engine> engine = engines_.Find(spec.Key());
    if (engine == nullptr) return absl::NotFoundError("");
    // Access first: the spec mismatch message would show another owner's spec.
    if (caller != nullptr) {
      RETURN_IF_ERROR(CheckEngineUse(*caller, engine->owner_uid(), engine->spec(), "open"));
    }
    RETURN_IF_ERROR(engine->CheckSameSpec(spec));
    RETURN_IF_ERROR(common::CheckRegionEpoch(absl::StrCat("engine ", spec.Key()), expected_epoch,
                                             engine->region_epoch()));
    return OpenedEngine{std::move(engine), false};
  };
  // Joining an existing engine never waits behind another engine's region population.
  absl::StatusOr<OpenedEngine> found = existing();
  if (found.ok() || found.status().code() != absl::StatusCode::kNotFound) return found;
  absl::MutexLock create_lock(&create_mu_);
  found = existing();  // created while we waited?
  if (found.ok() || found.status().code() != absl::StatusCode::kNotFound) return found;
  // A caller that names a region finds it gone (epoch 0: none): a fresh one would serve zeroed
  // rows as stored.
  RETURN_IF_ERROR(common::CheckRegionEpoch(absl::StrCat("engine ", spec.Key()), expected_epoch,
                                           /*actual=*/0));
  const bool pooled = !spec.pool.empty();
  // A pool's rules come before anything is allocated: who may join, what members agree on.
  if (pooled) RETURN_IF_ERROR(pools_.Check(caller, spec, geometry));
  RETURN_IF_ERROR(AdmitNewEngine(spec.Key()));
  const uint64_t epoch = TakeEpoch();
  const uint32_t owner = caller != nullptr ? caller->uid : static_cast<uint32_t>(geteuid());
  std::shared_ptr<Engine> engine;
  if (Durable() && !pooled) {
    // The owner is known here, before the engine exists: it goes into the durable state.
    StateIdentity identity{spec, owner, epoch};
    ASSIGN_OR_RETURN(EngineResources resources,
                     AcquireDurableEngineResources(identity, geometry, deps_.budget, deps_.backend,
                                                   deps_.region_options, options_.durability));
    Log()->info(
        "engine {} ready: {} rows of {} bytes, region epoch {:x}, durable, populated in "
        "{:.2f}s",
        spec.Key(), geometry.num_rows, geometry.row_bytes, epoch,
        resources.region->populate_seconds());
    engine = Engine::FromResources(spec, geometry, deps_, epoch, std::move(resources));
  } else {
    ASSIGN_OR_RETURN(engine, Engine::Create(spec, deps_, epoch));
  }
  engine->set_owner_uid(owner);
  if (pooled) {
    // The pool keeps the engine (its region) alive while rows of its segment are in use, even
    // after the engine left; the engine keeps the pool.
    absl::StatusOr<PoolTable::Joined> joined =
        pools_.Join(caller, spec, geometry, owner, engine, engine->region_base(),
                    // The pool holds the engine while it may call this.
                    [raw = engine.get()] { return raw->region_ready_rows(); });
    if (!joined.ok()) {
      deps_.release->Defer(std::move(engine));
      return joined.status();
    }
    engine->set_pool(std::move(joined->pool), joined->member);
  }
  engine->LinkTier();
  absl::MutexLock lock(&mu_);
  if (engines_.shutting_down()) {
    engine->LeavePool();
    // Shutdown began while the region was populated: it will not drain this engine, and the
    // next daemon must not find it in the fd store either.
    if (Durable()) options_.durability->Forget(engine->region_epoch(), engine->key());
    deps_.release->Defer(std::move(engine));
    return absl::UnavailableError("kvoffloadd is shutting down");
  }
  engines_.Insert(spec.Key(), engine);
  return OpenedEngine{std::move(engine), true};
}

uint64_t EngineRegistry::TakeEpoch() {
  auto in_use = [&](uint64_t epoch) {
    absl::MutexLock lock(&mu_);
    return !engines_.HolderOfEpoch(epoch).empty();
  };
  uint64_t epoch = next_epoch_;
  while (in_use(epoch)) epoch = epoch + 1 == 0 ? 1 : epoch + 1;
  next_epoch_ = epoch + 1 == 0 ? 1 : epoch + 1;
  return epoch;
}

absl::StatusOr<EngineRegistry::RestoredEngine> EngineRegistry::Restore(
    Durability::Restorable restorable) {
  const StateIdentity identity = restorable.state.identity;
  const common::Geometry geometry = restorable.state.geometry;
  const std::string key = identity.spec.Key();
  absl::MutexLock create_lock(&create_mu_);
  {
    absl::MutexLock lock(&mu_);
    if (engines_.shutting_down()) return absl::UnavailableError("kvoffloadd is shutting down");
    if (engines_.Find(key) != nullptr) {
      return absl::AlreadyExistsError(absl::StrCat("engine ", key, " exists already"));
    }
    const std::string holder = engines_.HolderOfEpoch(identity.region_epoch);
    if (!holder.empty()) {
      return absl::AlreadyExistsError(absl::StrCat("engine ", holder, " holds region epoch ",
                                                   absl::Hex(identity.region_epoch)));
    }
  }
  RETURN_IF_ERROR(AdmitNewEngine(key));
  const absl::Time start = absl::Now();
  ASSIGN_OR_RETURN(AdoptedResources adopted,
                   AdoptEngineResources(std::move(restorable), deps_.budget, deps_.backend,
                                        deps_.region_options));
  std::shared_ptr<Engine> engine = Engine::FromResources(
      identity.spec, geometry, deps_, identity.region_epoch, std::move(adopted.resources));
  engine->set_owner_uid(identity.owner_uid);
  engine->LinkTier();
  {
    absl::MutexLock lock(&mu_);
    engines_.Insert(key, engine);
  }
  Log()->info(
      "engine {} restored: region epoch {:x}, {} READY rows of {} ({} refused), in "
      "{:.1f} ms",
      key, identity.region_epoch, adopted.rows_restored, geometry.num_rows, adopted.rows_dropped,
      absl::ToDoubleMilliseconds(absl::Now() - start));
  return RestoredEngine{key, identity.region_epoch, adopted.rows_restored, adopted.rows_dropped};
}

absl::Status EngineRegistry::AdmitNewEngine(const std::string& key) {
  size_t engines = 0;
  {
    absl::MutexLock lock(&mu_);
    engines = engines_.size();
  }
  RETURN_IF_ERROR(CheckEngineCount(key, engines, options_.max_engines));
  // An engine holds a memfd; its workers' connections and memory need more.
  ASSIGN_OR_RETURN(common::FdUsage fds, common::CurrentFdUsage());
  return CheckFdHeadroom(key, fds, options_.min_free_fds);
}

absl::StatusOr<AttachedWorker> EngineRegistry::AttachWorker(
    const common::EngineSpec& requested, uint64_t expected_epoch, uint32_t mp_rank,
    const WorkerRegistration& registration, JobListener* listener, const Caller* caller) {
  // Everything that can refuse the worker is checked before the engine is created or joined:
  // a refused registration leaves no engine and no reservation behind.
  ASSIGN_OR_RETURN(ResolvedSpec resolved, Resolve(requested));
  const common::EngineSpec& spec = resolved.spec;
  const common::Geometry& geometry = resolved.geometry;
  std::shared_ptr<Engine> existing;
  {
    absl::MutexLock lock(&mu_);
    existing = engines_.Find(spec.Key());
  }
  // Another uid's engine is refused before anything about it is compared or any memory opened.
  if (existing != nullptr && caller != nullptr) {
    RETURN_IF_ERROR(
        CheckEngineUse(*caller, existing->owner_uid(), existing->spec(), "register a worker in"));
  }
  // A differing spec is named first (it explains any rank or size error that follows).
  if (existing != nullptr) RETURN_IF_ERROR(existing->CheckSameSpec(spec));
  // A new engine's pool refuses it before the worker's memory is opened.
  if (existing == nullptr && !spec.pool.empty()) {
    RETURN_IF_ERROR(pools_.Check(caller, spec, geometry));
  }
  RETURN_IF_ERROR(CheckWorkerRegistration(spec, geometry, mp_rank, registration));
  // Refuse a taken rank or slot before opening the worker's memory (CUDA IPC handles are opened
  // once per process).
  if (existing != nullptr) {
    // A rank registering right after its previous session ended (a worker restarted, a test
    // reusing an engine id) often finds that session's last copies, or their deferred release,
    // still running: wait for them briefly rather than refuse with "register again shortly".
    existing->AwaitPreviousSession(mp_rank, absl::Now() + kPreviousSessionWait);
    RETURN_IF_ERROR(existing->CheckAttach(mp_rank, registration));
  }
  ASSIGN_OR_RETURN(std::unique_ptr<WorkerMemory> memory, deps_.backend->OpenWorker(registration));
  absl::StatusOr<OpenedEngine> opened = OpenResolved(resolved, expected_epoch, caller);
  if (!opened.ok()) {
    deps_.release->Defer(std::shared_ptr<WorkerMemory>(std::move(memory)));
    return opened.status();
  }
  absl::StatusOr<WorkerInfo> info =
      opened->engine->Attach(mp_rank, registration, std::move(memory), listener);
  if (!info.ok()) {
    if (opened->created) {
      // Only a concurrent registration can get here; undo our creation if nobody joined it.
      std::shared_ptr<Engine> undo;
      {
        absl::MutexLock lock(&mu_);
        if (engines_.Find(spec.Key()) == opened->engine && opened->engine->num_workers() == 0) {
          undo = engines_.Take(spec.Key());
        }
      }
      if (undo != nullptr) CloseAndForget(std::move(undo), info.status());
    }
    return info.status();
  }
  // The worker's context lets a CUDA region's first chunk be pinned now: its rows are usable
  // (and a pool member's segment online) before the worker hears it is registered, so a store
  // planned right after registration finds rows. A slow pin only delays; it refuses nothing.
  absl::Status usable = opened->engine->WaitFirstRowsUsable(kFirstRowsWait);
  if (!usable.ok()) {
    Log()->warn(
        "engine {}: a worker registered but its region's first rows are not usable yet "
        "({}); they come online as the region is pinned",
        spec.Key(), usable.ToString());
  }
  if (!spec.pool.empty()) pools_.Maintain();
  return AttachedWorker{std::move(opened->engine), *info};
}

absl::StatusOr<std::shared_ptr<Engine>> EngineRegistry::Find(const std::string& engine_id,
                                                             uint32_t dp_rank) const {
  const std::string key = EngineTable::KeyOf(engine_id, dp_rank);
  absl::MutexLock lock(&mu_);
  std::shared_ptr<Engine> engine = engines_.Find(key);
  if (engine == nullptr)
    return common::EngineNotFound(key, " on this node (call OpenEngine first)");
  return engine;
}

std::vector<std::shared_ptr<Engine>> EngineRegistry::List() const {
  absl::MutexLock lock(&mu_);
  return engines_.List();
}

absl::Status EngineRegistry::Drop(const std::string& engine_id, uint32_t dp_rank, bool force,
                                  const EngineCheck& may_drop) {
  const std::string key = EngineTable::KeyOf(engine_id, dp_rank);
  std::shared_ptr<Engine> engine;
  {
    absl::MutexLock lock(&mu_);
    engine = engines_.Find(key);
    if (engine == nullptr) return common::EngineNotFound(key);
    if (may_drop) RETURN_IF_ERROR(may_drop(*engine));
    const uint32_t workers = engine->num_workers();
    if (workers > 0 && !force) {
      return absl::FailedPreconditionError(
          absl::StrCat("engine ", key, " has ", workers,
                       " connected workers; drop with force to end their sessions"));
    }
    engines_.Take(key);
  }
  engine->Close(absl::AbortedError("engine dropped by an operator"));
  // Return only once the engine's copies have ended and every session has its verdicts and was
  // told to end; the backend ends each copy by its job's deadline.
  if (!engine->WaitClosed(absl::Now() + deps_.jobs.job_timeout + absl::Seconds(1))) {
    Log()->warn("dropping engine {}: copies still running after {}", engine->key(),
                absl::FormatDuration(deps_.jobs.job_timeout));
  }
  CloseAndForget(std::move(engine), absl::AbortedError("engine dropped by an operator"));
  return absl::OkStatus();
}

std::vector<std::string> EngineRegistry::DropIdle(const EngineCheck& may_drop) {
  std::vector<std::shared_ptr<Engine>> idle;
  {
    absl::MutexLock lock(&mu_);
    idle = engines_.TakeIf([&may_drop](const Engine& engine) {
      return engine.num_workers() == 0 && (!may_drop || may_drop(engine).ok());
    });
  }
  std::vector<std::string> keys;
  for (auto& engine : idle) {
    keys.push_back(engine->key());
    CloseAndForget(std::move(engine), absl::AbortedError("idle engine dropped by cleanup"));
  }
  return keys;
}

void EngineRegistry::CloseAndForget(std::shared_ptr<Engine> engine, const absl::Status& why) {
  Log()->info("dropping engine {}: {}", engine->key(), why.ToString());
  // Its memory must really go: the fd store lets go of its copies now, ours go with the engine.
  if (Durable()) options_.durability->Forget(engine->region_epoch(), engine->key());
  engine->Close(why);
  // Its segment drains: rows other members use stay until they are released.
  engine->LeavePool();
  deps_.release->Defer(std::move(engine));
}

void EngineRegistry::Maintain(absl::Time now) {
  std::vector<std::shared_ptr<Engine>> expired;
  for (const std::shared_ptr<Engine>& engine : List()) {
    engine->ExpireJobs(now);
    if (options_.idle_engine_ttl > absl::ZeroDuration() &&
        now - engine->idle_since() >= options_.idle_engine_ttl) {
      expired.push_back(engine);
    }
  }
  for (auto& engine : expired) {
    {
      absl::MutexLock lock(&mu_);
      // Re-check under the lock: a worker may have attached since.
      if (engines_.Find(engine->key()) != engine ||
          now - engine->idle_since() < options_.idle_engine_ttl) {
        continue;
      }
      engines_.Take(engine->key());
    }
    CloseAndForget(std::move(engine), absl::AbortedError(absl::StrCat(
                                          "engine idle for longer than ",
                                          absl::FormatDuration(options_.idle_engine_ttl))));
  }
  pools_.Maintain();
}

void EngineRegistry::RunMaintenance() {
  common::SetThreadName("kvo-maintain");
  while (!stop_.WaitForNotificationWithTimeout(options_.maintenance_period)) {
    Maintain(absl::Now());
  }
}

bool EngineRegistry::Shutdown(const absl::Status& why, absl::Duration grace) {
  std::vector<std::shared_ptr<Engine>> engines;
  {
    absl::MutexLock lock(&mu_);
    engines_.StartShutdown();
    engines = engines_.TakeAll();
  }
  // Running copies get `grace` to finish and be reported to their workers; then the rest fail
  // and every session ends.
  for (auto& engine : engines) engine->Drain(why);
  const absl::Time deadline = absl::Now() + grace;
  bool drained = false;
  while (true) {
    drained = true;
    for (auto& engine : engines) drained = drained && engine->Snapshot().jobs_in_flight == 0;
    if (drained || absl::Now() >= deadline) break;
    absl::SleepFor(absl::Milliseconds(5));
  }
  for (auto& engine : engines) engine->Close(why);
  pools_.Clear();  // the pools' references to closed engines
  if (!drained) {
    Log()->warn("shutdown: copies still in flight after {}", absl::FormatDuration(grace));
  }
  for (auto& engine : engines) deps_.release->Defer(std::move(engine));
  deps_.release->Flush();
  return drained;
}

}  // namespace kvoffload::daemon
