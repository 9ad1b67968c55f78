// IssuePool: threads that hand one job's copies to the driver in parallel (copy path v3).
//
// A job of many small copies (vLLM's per-layer pages with random blocks: 16384 copies of 32 KiB,
// 131072 of 4 KiB for 512 MiB) is bound by the host, not by the link: cudaMemcpyBatchAsync takes
// ~0.5-0.9 µs of the issuing thread per copy, and the copy engines wait for each call to return.
// Split over threads, each with a stream of its own, the same copies go out faster
// (multi_issue_probe, runs/2026-12-03-76254d3-diag: 4 KiB pages 4.9 → 10.1 GB/s with four
// threads, 32 KiB loads 31.9 → 47.3). Large copies gain nothing (2 MiB: 55.0 → 53.9), so the
// CUDA backend splits only jobs of many copies (EnqueueOptions::parallel_issue_min_copies,
// counted by EstimateCopies in copy_plan.h), into shares of equal blocks that each thread visits
// and issues itself.
//
//   IssuePool pool(3);                        // the caller is the fourth issuer
//   pool.Run({share0, share1, share2, share3});  // share0 on the caller; returns when all ran
//
// GPU-free (the tasks make the CUDA calls). Thread-safety: Run may be called from any number of
// threads at once; tasks queue in order and never wait on each other, so callers cannot
// deadlock. Ownership: the destructor finishes queued tasks, then joins the threads.
#ifndef KVOFFLOAD_DAEMON_COPY_CUDA_ISSUE_POOL_H_
#define KVOFFLOAD_DAEMON_COPY_CUDA_ISSUE_POOL_H_

#include <cstddef>
#include <deque>
#include <functional>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace kvoffload::daemon::cuda {

class IssuePool {
 public:
  // `threads` helpers (0: Run runs every task on the caller, one after another).
  explicit IssuePool(size_t threads);
  ~IssuePool();
  IssuePool(const IssuePool&) = delete;
  IssuePool& operator=(const IssuePool&) = delete;

  size_t threads() const { return threads_.size(); }

  // Runs tasks[0] on the calling thread and the others on the helpers (on the caller too, should
  // it finish its own before a helper has taken one); returns once every task has returned.
  void Run(std::vector<std::function<void()>> tasks);

 private:
  struct Batch;
  void Loop();
  bool HasWork() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Takes and runs one queued task of `batch` (or of any batch when null); false if none.
  bool RunOne(Batch* batch);

  mutable absl::Mutex mu_;
  // Queued tasks with the batch each belongs to (what Run waits on).
  std::deque<std::pair<Batch*, std::function<void()>>> queue_ ABSL_GUARDED_BY(mu_);
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::thread> threads_;  // last: started once the members above exist
};

}  // namespace kvoffload::daemon::cuda

#endif  // KVOFFLOAD_DAEMON_COPY_CUDA_ISSUE_POOL_H_
