// EngineRegistry: every engine (DP replica) on this node, keyed by "engine_id/dp_rank", plus the
// maintenance that ages them: job deadlines and the idle TTL of engines without workers.
//
//   EngineRegistry registry(deps, options);
//   ASSIGN_OR_RETURN(auto opened, registry.Open(spec));   // creates or joins
//   registry.Start();                                      // maintenance thread
#ifndef KVOFFLOAD_DAEMON_ENGINE_REGISTRY_H_
#define KVOFFLOAD_DAEMON_ENGINE_REGISTRY_H_

#include <map>
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
#include "daemon/engine/engine.h"

namespace kvoffload::daemon {

struct RegistryOptions {
  // An engine with no worker attached for this long is dropped; 0 disables.
  absl::Duration idle_engine_ttl = absl::Minutes(10);
  absl::Duration maintenance_period = absl::Milliseconds(100);
};

struct OpenedEngine {
  std::shared_ptr<Engine> engine;
  bool created = false;
};

// Thread-safe. Engines are shared-owned; Drop removes the registry's reference and closes the
// engine (its sessions end); the region goes when in-flight copies release theirs.
class EngineRegistry {
 public:
  EngineRegistry(const EngineDeps& deps, const RegistryOptions& options);
  ~EngineRegistry();  // stops maintenance; does not wait for copies (see Shutdown)
  EngineRegistry(const EngineRegistry&) = delete;
  EngineRegistry& operator=(const EngineRegistry&) = delete;

  void Start();

  // Idempotent: returns the engine of spec.Key(), creating it (validation, budget, region) when
  // absent. FAILED_PRECONDITION when it exists with a different spec. Creation of different
  // engines is serialised (it is rare and bounded by region population).
  absl::StatusOr<OpenedEngine> Open(const common::EngineSpec& spec);
  // NOT_FOUND when absent.
  absl::StatusOr<std::shared_ptr<Engine>> Find(const std::string& engine_id,
                                               uint32_t dp_rank) const;
  std::vector<std::shared_ptr<Engine>> List() const;
  // FAILED_PRECONDITION when workers are attached and !force; NOT_FOUND when absent.
  absl::Status Drop(const std::string& engine_id, uint32_t dp_rank, bool force);
  // Drops every engine without workers; returns their keys.
  std::vector<std::string> DropIdle();

  // One maintenance pass (tests call it directly): expires jobs, drops engines idle past TTL.
  void Maintain(absl::Time now);

  // Stops new engines and new jobs, lets running copies finish for up to `grace` (their jobs are
  // reported normally), then closes every engine: open jobs fail with `why`, sessions end.
  // Returns false if copies were still running at the deadline.
  bool Shutdown(const absl::Status& why, absl::Duration grace);

 private:
  void RunMaintenance();
  void CloseAndForget(std::shared_ptr<Engine> engine, const absl::Status& why);

  const EngineDeps deps_;
  const RegistryOptions options_;

  absl::Mutex create_mu_;  // serialises engine creation; taken before mu_
  mutable absl::Mutex mu_;
  std::map<std::string, std::shared_ptr<Engine>> engines_ ABSL_GUARDED_BY(mu_);
  bool shutting_down_ ABSL_GUARDED_BY(mu_) = false;

  absl::Notification stop_;
  std::thread maintenance_;
};

}  // namespace kvoffload::daemon

#endif  // KVOFFLOAD_DAEMON_ENGINE_REGISTRY_H_
