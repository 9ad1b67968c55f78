// FaultCopyBackend: a CopyBackend for tests that wraps a real one (the host backend) and injects
// faults into chosen copies, the way LevelDB's FaultInjectionTestEnv wraps its Env. The engine,
// registry and services see an ordinary backend; the test decides which copies fail, run late,
// never finish until it releases them, or finish in another order than they were submitted.
//
//   FaultCopyBackend backend(CreateHostCopyBackend(2));
//   backend.AddRule({.fault = FaultCopyBackend::Fault::kHold});   // the next copy parks
//   ... engine->Submit(...) ...
//   ASSERT_TRUE(backend.WaitForHeld(1, absl::Seconds(5)));
//   backend.ReleaseHeld(backend.Held()[0]);                        // now it really runs
//
// Rules are consumed in order: each Submit takes the first queued rule that matches its direction
// and slot; a copy no rule matches passes straight through. Faults:
//   kFail         the copy never runs; `done` gets `status` and 0 bytes (from a backend thread).
//   kFailAfterCopy the copy runs (bytes are written) but `done` gets `status` and 0 bytes: a copy
//                 that touched memory and still reported an error.
//   kDelay        the copy runs; `done` is called no earlier than `delay` after Submit.
//   kHold         the copy is parked before it starts; it runs (or fails) only when the test calls
//                 ReleaseHeld / FailHeld, so completions can be ordered at will.
// FailNextOpenWorker makes the next OpenWorker return an error without opening anything.
//
// Thread-safety: every method may be called from any thread. `done` always runs on a thread of
// this backend or of the wrapped one, never inside Submit. Destruction fails every copy still held
// with ABORTED (it never ran), waits for delayed completions, then destroys the wrapped backend.
#ifndef KVOFFLOAD_DAEMON_COPY_TESTING_FAULT_COPY_BACKEND_H_
#define KVOFFLOAD_DAEMON_COPY_TESTING_FAULT_COPY_BACKEND_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "daemon/copy/copy_backend.h"

namespace kvoffload::daemon {

class FaultCopyBackend final : public CopyBackend {
 public:
  enum class Fault { kNone, kFail, kFailAfterCopy, kDelay, kHold };

  struct Rule {
    Fault fault = Fault::kNone;
    absl::Status status = absl::DataLossError("injected copy failure");  // kFail*
    absl::Duration delay = absl::ZeroDuration();                          // kDelay
    std::optional<CopyDirection> direction;  // match only this direction
    std::optional<uint32_t> slot;            // match only copies into this slot
  };

  // A parked copy (kHold), named by the order in which it was submitted (0, 1, ...).
  using HeldId = uint64_t;

  explicit FaultCopyBackend(std::unique_ptr<CopyBackend> inner);
  ~FaultCopyBackend() override;
  FaultCopyBackend(const FaultCopyBackend&) = delete;
  FaultCopyBackend& operator=(const FaultCopyBackend&) = delete;

  // Queues a rule for a future copy.
  void AddRule(Rule rule) ABSL_LOCKS_EXCLUDED(mu_);
  // Applies `rule` to every copy that no queued rule matches, until replaced (kNone clears it).
  void SetDefaultRule(Rule rule) ABSL_LOCKS_EXCLUDED(mu_);
  // Forgets queued rules that no copy has used yet.
  void ClearRules() ABSL_LOCKS_EXCLUDED(mu_);
  void FailNextOpenWorker(absl::Status status) ABSL_LOCKS_EXCLUDED(mu_);

  // Copies parked by kHold and not yet released, oldest first.
  std::vector<HeldId> Held() const ABSL_LOCKS_EXCLUDED(mu_);
  // Waits until at least `n` copies are parked. False on timeout.
  bool WaitForHeld(size_t n, absl::Duration timeout) ABSL_LOCKS_EXCLUDED(mu_);
  // Starts a parked copy on the wrapped backend. False if `id` is not parked.
  bool ReleaseHeld(HeldId id) ABSL_LOCKS_EXCLUDED(mu_);
  // Ends a parked copy without running it: `done` gets `status` and 0 bytes.
  bool FailHeld(HeldId id, absl::Status status) ABSL_LOCKS_EXCLUDED(mu_);
  void ReleaseAllHeld() ABSL_LOCKS_EXCLUDED(mu_);

  // Copies submitted / whose `done` has returned, over the backend's life.
  uint64_t submitted() const ABSL_LOCKS_EXCLUDED(mu_);
  uint64_t completed() const ABSL_LOCKS_EXCLUDED(mu_);
  // Waits until `n` copies have completed. False on timeout.
  bool WaitForCompleted(uint64_t n, absl::Duration timeout) ABSL_LOCKS_EXCLUDED(mu_);

  // CopyBackend.
  std::string name() const override { return "fault(" + inner_->name() + ")"; }
  absl::Status RegisterRegion(uint8_t* base, uint64_t bytes, uint64_t row_bytes) override {
    return inner_->RegisterRegion(base, bytes, row_bytes);
  }
  void UnregisterRegion(uint8_t* base) override { inner_->UnregisterRegion(base); }
  absl::StatusOr<std::unique_ptr<WorkerMemory>> OpenWorker(
      const WorkerRegistration& registration) override ABSL_LOCKS_EXCLUDED(mu_);
  void Submit(CopyJob job, CopyDone done) override ABSL_LOCKS_EXCLUDED(mu_);
  std::map<int32_t, uint64_t> GpuMemoryBytes() const override {
    return inner_->GpuMemoryBytes();
  }

 private:
  struct Parked {
    CopyJob job;
    CopyDone done;
  };
  // Wraps `done` so that completions are counted (and a delayed one waits for its time).
  CopyDone Counted(CopyDone done, absl::Time not_before);
  void RunLater(absl::Time at, std::function<void()> run) ABSL_LOCKS_EXCLUDED(mu_);
  // Removes held job `id` into *parked; false when no such job is held.
  bool TakeHeld(HeldId id, Parked* parked) ABSL_LOCKS_EXCLUDED(mu_);
  void TimerLoop();

  std::unique_ptr<CopyBackend> inner_;  // reset first in the destructor (it may call `done`)

  mutable absl::Mutex mu_;
  std::deque<Rule> rules_ ABSL_GUARDED_BY(mu_);
  Rule default_rule_ ABSL_GUARDED_BY(mu_);
  std::optional<absl::Status> open_worker_failure_ ABSL_GUARDED_BY(mu_);
  std::map<HeldId, Parked> held_ ABSL_GUARDED_BY(mu_);
  uint64_t submitted_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t completed_ ABSL_GUARDED_BY(mu_) = 0;
  // Completions to run at a time (failures, delays), on timer_.
  std::multimap<absl::Time, std::function<void()>> timed_ ABSL_GUARDED_BY(mu_);
  absl::CondVar changed_;  // held_, completed_ or timed_ changed, or stopping_ was set
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread timer_;  // started last in the constructor
};

}  // namespace kvoffload::daemon

#endif  // KVOFFLOAD_DAEMON_COPY_TESTING_FAULT_COPY_BACKEND_H_
