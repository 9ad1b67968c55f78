#include "daemon/engine/registry.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "common/geometry.h"
#include "common/logging.h"
#include "common/status_macros.h"

namespace kvoffload::daemon {
namespace {

spdlog::logger* Log() {
  static spdlog::logger* log = common::Logger("registry");
  return log;
}

std::string KeyOf(const std::string& engine_id, uint32_t dp_rank) {
  return absl::StrCat(engine_id, "/", dp_rank);
}

}  // namespace

EngineRegistry::EngineRegistry(const EngineDeps& deps, const RegistryOptions& options)
    : deps_(deps), options_(options) {}

EngineRegistry::~EngineRegistry() {
  stop_.Notify();
  if (maintenance_.joinable()) maintenance_.join();
}

void EngineRegistry::Start() {
  maintenance_ = std::thread([this] { RunMaintenance(); });
}

absl::StatusOr<OpenedEngine> EngineRegistry::Open(const common::EngineSpec& requested) {
  // Validate before anything else so a bad spec is rejected even if a same-key engine exists.
  ASSIGN_OR_RETURN(common::Geometry geometry, common::ComputeGeometry(requested));
  // Compare specs with their defaults resolved: local_world_size 0 (undeclared) and the same
  // value declared are one engine, as are worker_bytes_per_block 0 and page_bytes × num_layers.
  common::EngineSpec spec = requested;
  spec.local_world_size = geometry.local_world_size;
  spec.worker_bytes_per_block = geometry.worker_bytes_per_block;
  auto existing = [&]() -> absl::StatusOr<OpenedEngine> {
    absl::MutexLock lock(&mu_);
    if (shutting_down_) return absl::UnavailableError("kvoffloadd is shutting down");
    auto it = engines_.find(spec.Key());
    if (it == engines_.end()) return absl::NotFoundError("");
    RETURN_IF_ERROR(it->second->CheckSameSpec(spec));
    return OpenedEngine{it->second, false};
  };
  // Joining an existing engine never waits behind another engine's region population.
  absl::StatusOr<OpenedEngine> found = existing();
  if (found.ok() || found.status().code() != absl::StatusCode::kNotFound) return found;
  absl::MutexLock create_lock(&create_mu_);
  found = existing();  // created while we waited?
  if (found.ok() || found.status().code() != absl::StatusCode::kNotFound) return found;
  ASSIGN_OR_RETURN(std::shared_ptr<Engine> engine, Engine::Create(spec, deps_));
  absl::MutexLock lock(&mu_);
  if (shutting_down_) {
    // Shutdown began while the region was populated: it will not drain this engine.
    deps_.release->Defer(std::move(engine));
    return absl::UnavailableError("kvoffloadd is shutting down");
  }
  engines_.emplace(spec.Key(), engine);
  return OpenedEngine{std::move(engine), true};
}

absl::StatusOr<std::shared_ptr<Engine>> EngineRegistry::Find(const std::string& engine_id,
                                                             uint32_t dp_rank) const {
  absl::MutexLock lock(&mu_);
  auto it = engines_.find(KeyOf(engine_id, dp_rank));
  if (it == engines_.end()) {
    return absl::NotFoundError(absl::StrCat("no engine ", KeyOf(engine_id, dp_rank),
                                            " on this node (call OpenEngine first)"));
  }
  return it->second;
}

std::vector<std::shared_ptr<Engine>> EngineRegistry::List() const {
  absl::MutexLock lock(&mu_);
  std::vector<std::shared_ptr<Engine>> out;
  for (const auto& [key, engine] : engines_) out.push_back(engine);
  return out;
}

absl::Status EngineRegistry::Drop(const std::string& engine_id, uint32_t dp_rank, bool force) {
  std::shared_ptr<Engine> engine;
  {
    absl::MutexLock lock(&mu_);
    auto it = engines_.find(KeyOf(engine_id, dp_rank));
    if (it == engines_.end()) {
      return absl::NotFoundError(absl::StrCat("no engine ", KeyOf(engine_id, dp_rank)));
    }
    const uint32_t workers = it->second->num_workers();
    if (workers > 0 && !force) {
      return absl::FailedPreconditionError(
          absl::StrCat("engine ", it->first, " has ", workers,
                       " connected workers; drop with force to end their sessions"));
    }
    engine = std::move(it->second);
    engines_.erase(it);
  }
  CloseAndForget(std::move(engine), absl::AbortedError("engine dropped by an operator"));
  return absl::OkStatus();
}

std::vector<std::string> EngineRegistry::DropIdle() {
  std::vector<std::shared_ptr<Engine>> idle;
  {
    absl::MutexLock lock(&mu_);
    for (auto it = engines_.begin(); it != engines_.end();) {
      if (it->second->num_workers() == 0) {
        idle.push_back(std::move(it->second));
        it = engines_.erase(it);
      } else {
        ++it;
      }
    }
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
  engine->Close(why);
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
      auto it = engines_.find(engine->key());
      // Re-check under the lock: a worker may have attached since.
      if (it == engines_.end() || it->second != engine ||
          now - engine->idle_since() < options_.idle_engine_ttl) {
        continue;
      }
      engines_.erase(it);
    }
    CloseAndForget(std::move(engine), absl::AbortedError(absl::StrCat(
                                          "engine idle for longer than ",
                                          absl::FormatDuration(options_.idle_engine_ttl))));
  }
}

void EngineRegistry::RunMaintenance() {
  while (!stop_.WaitForNotificationWithTimeout(options_.maintenance_period)) {
    Maintain(absl::Now());
  }
}

bool EngineRegistry::Shutdown(const absl::Status& why, absl::Duration grace) {
  std::vector<std::shared_ptr<Engine>> engines;
  {
    absl::MutexLock lock(&mu_);
    shutting_down_ = true;
    for (auto& [key, engine] : engines_) engines.push_back(std::move(engine));
    engines_.clear();
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
  if (!drained) {
    Log()->warn("shutdown: copies still in flight after {}", absl::FormatDuration(grace));
  }
  for (auto& engine : engines) deps_.release->Defer(std::move(engine));
  deps_.release->Flush();
  return drained;
}

}  // namespace kvoffload::daemon
