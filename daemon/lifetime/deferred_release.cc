#include "daemon/lifetime/deferred_release.h"

#include <utility>

#include "common/thread_name.h"

namespace kvoffload::daemon {

DeferredRelease::DeferredRelease() : thread_([this] { Run(); }) {}

DeferredRelease::~DeferredRelease() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  thread_.join();
}

void DeferredRelease::Defer(std::shared_ptr<void> object) {
  if (object == nullptr) return;
  absl::MutexLock lock(&mu_);
  queue_.push_back(std::move(object));
  ++enqueued_;
}

void DeferredRelease::Flush() {
  absl::MutexLock lock(&mu_);
  const uint64_t target = enqueued_;
  while (released_ < target) released_cv_.Wait(&mu_);
}

void DeferredRelease::Run() {
  common::SetThreadName("kvo-defer");
  for (;;) {
    std::shared_ptr<void> object;
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(
          +[](DeferredRelease* self)
               ABSL_NO_THREAD_SAFETY_ANALYSIS { return self->stop_ || !self->queue_.empty(); },
          this));
      if (queue_.empty()) return;  // stop_ and drained
      object = std::move(queue_.front());
      queue_.pop_front();
    }
    object.reset();  // the destructor runs here, with no lock held
    absl::MutexLock lock(&mu_);
    ++released_;
    released_cv_.SignalAll();
  }
}

}  // namespace kvoffload::daemon
