// EngineTestEnv: what an engine needs (backend, node budget, deferred release) with a
// FaultCopyBackend around the host backend, plus RecordingListener, which records every verdict
// and close notice a worker session would receive. Shared by the engine, registry and service
// tests.
//
//   EngineTestEnv env;                       // 64 MiB node cap, 2 copy threads
//   auto engine = Engine::Create(PerRankSpec(2), env.deps());
//   env.backend().AddRule({.fault = FaultCopyBackend::Fault::kHold});
//   ...
//   env.Settle();                            // every held copy released, every callback done
#ifndef KVOFFLOAD_DAEMON_ENGINE_TESTING_ENGINE_TEST_ENV_H_
#define KVOFFLOAD_DAEMON_ENGINE_TESTING_ENGINE_TEST_ENV_H_

#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/engine_spec.h"
#include "daemon/copy/testing/fault_copy_backend.h"
#include "daemon/engine/engine.h"
#include "daemon/lifetime/deferred_release.h"
#include "daemon/region/memory_budget.h"

namespace kvoffload::daemon::testing {

// Per-rank layout: `world_size` local ranks, each block 2 layers of 4 KiB (8 KiB per worker),
// 16 rows.
common::EngineSpec PerRankSpec(uint32_t world_size, const std::string& engine_id = "engine");
// Replicated MLA layout (tp = world_size = 2): one copy per row, mp_rank 0 writes.
common::EngineSpec ReplicatedSpec(const std::string& engine_id = "mla");
inline constexpr uint64_t kPageBytes = 4096;
inline constexpr uint32_t kLayers = 2;
inline constexpr uint64_t kBytesPerBlock = kPageBytes * kLayers;
inline constexpr uint64_t kNumRows = 16;
inline constexpr uint64_t kWorkerBlocks = 32;
// What an engine of `spec` reserves against the node cap: its region and its index metadata
// (CostOfEngine). Aborts on a spec the tests did not mean to be invalid.
uint64_t ReservedFor(const common::EngineSpec& spec);

// Thread-safe: the engine calls it from its threads, the test reads it.
class RecordingListener final : public JobListener {
 public:
  void OnJobFinished(const JobResult& result) override ABSL_LOCKS_EXCLUDED(mu_);
  void OnEngineClosed(const absl::Status& why) override ABSL_LOCKS_EXCLUDED(mu_);

  std::vector<JobResult> results() const ABSL_LOCKS_EXCLUDED(mu_);
  // Verdicts for `job_id` so far.
  std::vector<JobResult> ResultsFor(uint64_t job_id) const ABSL_LOCKS_EXCLUDED(mu_);
  // "finished <id> <code>" and "closed <code>" in the order they arrived.
  std::vector<std::string> events() const ABSL_LOCKS_EXCLUDED(mu_);
  // Waits until `n` verdicts arrived. False on timeout.
  bool WaitForResults(size_t n, absl::Duration timeout = absl::Seconds(10))
      ABSL_LOCKS_EXCLUDED(mu_);

  // The next OnJobFinished blocks (before recording) until ReleaseHeldVerdict: the verdict's
  // delivery stays in progress, as on a slow thread. WaitUntilVerdictHeld: false on timeout.
  void HoldNextVerdict() ABSL_LOCKS_EXCLUDED(mu_);
  bool WaitUntilVerdictHeld(absl::Duration timeout = absl::Seconds(10)) ABSL_LOCKS_EXCLUDED(mu_);
  void ReleaseHeldVerdict() ABSL_LOCKS_EXCLUDED(mu_);

 private:
  enum class Hold { kNone, kArmed, kHolding, kReleased };
  mutable absl::Mutex mu_;
  absl::CondVar changed_;
  Hold hold_ ABSL_GUARDED_BY(mu_) = Hold::kNone;
  std::vector<JobResult> results_ ABSL_GUARDED_BY(mu_);
  std::vector<std::string> events_ ABSL_GUARDED_BY(mu_);
};

class EngineTestEnv {
 public:
  explicit EngineTestEnv(uint64_t node_cap = 64 << 20);
  // Settle()s, so no copy callback outlives what it touches.
  ~EngineTestEnv();
  EngineTestEnv(const EngineTestEnv&) = delete;
  EngineTestEnv& operator=(const EngineTestEnv&) = delete;

  const EngineDeps& deps() const { return deps_; }
  FaultCopyBackend& backend() { return *backend_; }
  MemoryBudget& budget() { return budget_; }
  DeferredRelease& release() { return *release_; }

  // Releases every held copy, waits until every submitted copy's callback has returned, then
  // until everything deferred so far has been destroyed. False if that took over 10 s.
  bool Settle();

 private:
  std::unique_ptr<FaultCopyBackend> backend_;
  MemoryBudget budget_;
  std::atomic<int64_t> callbacks_running_{0};
  std::unique_ptr<DeferredRelease> release_;
  EngineDeps deps_;
};

}  // namespace kvoffload::daemon::testing

#endif  // KVOFFLOAD_DAEMON_ENGINE_TESTING_ENGINE_TEST_ENV_H_
