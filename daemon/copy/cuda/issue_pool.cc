#include "daemon/copy/cuda/issue_pool.h"

#include <utility>

#include "common/thread_name.h"

namespace kvoffload::daemon::cuda {

struct IssuePool::Batch {
  size_t left = 0;  // tasks not yet returned; guarded by the pool's mu_
};

IssuePool::IssuePool(size_t threads) {
  threads_.reserve(threads);
  for (size_t i = 0; i < threads; ++i) threads_.emplace_back([this] { Loop(); });
}

IssuePool::~IssuePool() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  for (std::thread& t : threads_) t.join();
}

void IssuePool::Run(std::vector<std::function<void()>> tasks) {
  if (tasks.empty()) return;
  Batch batch;
  {
    absl::MutexLock lock(&mu_);
    batch.left = tasks.size();
    for (size_t i = 1; i < tasks.size(); ++i) queue_.emplace_back(&batch, std::move(tasks[i]));
  }
  tasks[0]();
  {
    absl::MutexLock lock(&mu_);
    --batch.left;
  }
  // Whatever of ours no helper has taken yet, the caller runs itself; then it waits for the rest.
  while (RunOne(&batch)) {
  }
  absl::MutexLock lock(&mu_);
  auto done = [&batch]() ABSL_NO_THREAD_SAFETY_ANALYSIS { return batch.left == 0; };
  mu_.Await(absl::Condition(&done));
}

bool IssuePool::RunOne(Batch* batch) {
  std::function<void()> task;
  Batch* owner = nullptr;
  {
    absl::MutexLock lock(&mu_);
    for (auto it = queue_.begin(); it != queue_.end(); ++it) {
      if (batch == nullptr || it->first == batch) {
        owner = it->first;
        task = std::move(it->second);
        queue_.erase(it);
        break;
      }
    }
  }
  if (owner == nullptr) return false;
  task();
  absl::MutexLock lock(&mu_);
  --owner->left;
  return true;
}

bool IssuePool::HasWork() const { return stop_ || !queue_.empty(); }

void IssuePool::Loop() {
  common::SetThreadName("kvo-issue");
  for (;;) {
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(this, &IssuePool::HasWork));
      if (queue_.empty()) return;  // stopping, and nothing left to finish
    }
    RunOne(nullptr);
  }
}

}  // namespace kvoffload::daemon::cuda
