// DeferredRelease: destroys objects on its own thread. Copy completions run on backend threads
// and may hold the last reference to a worker's IPC mappings or to an engine's region; closing
// those (cudaIpcCloseMemHandle, cudaHostUnregister, munmap) must happen outside the locks and
// threads of the copy path (LMCache 4980/4676: releasing mappings deadlocked).
//
//   release->Defer(std::move(memory));  // returns at once; the destructor runs later
#ifndef KVOFFLOAD_DAEMON_LIFETIME_DEFERRED_RELEASE_H_
#define KVOFFLOAD_DAEMON_LIFETIME_DEFERRED_RELEASE_H_

#include <deque>
#include <memory>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace kvoffload::daemon {

// Thread-safe. The destructor drains every deferred object, then joins its thread.
class DeferredRelease {
 public:
  DeferredRelease();
  ~DeferredRelease();
  DeferredRelease(const DeferredRelease&) = delete;
  DeferredRelease& operator=(const DeferredRelease&) = delete;

  void Defer(std::shared_ptr<void> object);
  // Blocks until everything deferred before the call has been destroyed (tests, shutdown).
  void Flush();

 private:
  void Run();

  absl::Mutex mu_;
  std::deque<std::shared_ptr<void>> queue_ ABSL_GUARDED_BY(mu_);
  uint64_t enqueued_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t released_ ABSL_GUARDED_BY(mu_) = 0;
  absl::CondVar released_cv_;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace kvoffload::daemon

#endif  // KVOFFLOAD_DAEMON_LIFETIME_DEFERRED_RELEASE_H_
