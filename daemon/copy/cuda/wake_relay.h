// A wake-up that a CUDA host function (cudaLaunchHostFunc) can deliver to an object that may be
// gone by the time the stream reaches the function (copy path v3: host CPU per job).
//
// The completion queue polls short jobs, but a long copy polled at any useful pace still costs
// the daemon ~4 µs of CPU a poll (~5.5 ms for a 78 ms job). Instead, a long job asks its stream to
// run a host function after its completion event: the queue sleeps until that function wakes
// it. The queue may be destroyed while such a function is still queued (a stream of a failed
// context never runs it), so the function's argument is this relay, not the queue: the queue
// Detach()es it when it goes, and the last pending function deletes it.
//
// Lifecycle: Create → (Arm, then Fire or Disarm)* → Detach. The holder owns the relay until
// Detach; from then on the pending functions do (deleted at once if none is pending).
//
// Thread-safety: Arm, Disarm, Fire and Detach may be called from any thread. `wake` runs on the
// firing thread with the relay's mutex held, so it must be short and must not call back into
// the relay; after Detach returns it is never called again.
#ifndef KVOFFLOAD_DAEMON_COPY_CUDA_WAKE_RELAY_H_
#define KVOFFLOAD_DAEMON_COPY_CUDA_WAKE_RELAY_H_

#include <cstdint>
#include <functional>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace kvoffload::daemon::cuda {

class WakeRelay {
 public:
  static WakeRelay* Create(std::function<void()> wake) { return new WakeRelay(std::move(wake)); }

  // Before launching a host function with this relay as its argument.
  void Arm() {
    absl::MutexLock lock(&mu_);
    ++pending_;
  }
  // After a launch that failed: the function will never run.
  void Disarm() { Settle(/*wake=*/false); }
  // The host function (signature of cudaHostFn_t): wakes the holder unless it is detached.
  static void Fire(void* relay) { static_cast<WakeRelay*>(relay)->Settle(/*wake=*/true); }
  // The holder lets go: `wake` is not called after this returns.
  void Detach() {
    bool last;
    {
      absl::MutexLock lock(&mu_);
      wake_ = nullptr;
      last = pending_ == 0;
    }
    if (last) delete this;
  }

  int64_t pending() const {
    absl::MutexLock lock(&mu_);
    return pending_;
  }

 private:
  explicit WakeRelay(std::function<void()> wake) : wake_(std::move(wake)) {}

  void Settle(bool wake) {
    bool last;
    {
      absl::MutexLock lock(&mu_);
      if (wake && wake_) wake_();
      --pending_;
      last = pending_ == 0 && !wake_;
    }
    if (last) delete this;
  }

  mutable absl::Mutex mu_;
  std::function<void()> wake_ ABSL_GUARDED_BY(mu_);
  int64_t pending_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace kvoffload::daemon::cuda

#endif  // KVOFFLOAD_DAEMON_COPY_CUDA_WAKE_RELAY_H_
