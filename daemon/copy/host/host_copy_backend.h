// HostCopyBackend: the CopyBackend without a GPU, used by tests and CI (DESIGN.md §3). A test
// worker's "device memory" is a memfd it created and sealed against shrinking; the tensor's
// `allocation_handle` is "memfd:<fd>", that descriptor's number in the worker, and its size is at
// least `allocation_bytes`. Copies are memcpy on a pool of
// threads owned by the backend, driven by the same descriptor tables (runs) as the CUDA backend, so
// everything except the CUDA calls is exercised.
//
//   std::unique_ptr<CopyBackend> backend = CreateHostCopyBackend(/*num_threads=*/4);
//   RETURN_IF_ERROR(backend->RegisterRegion(region->data(), region->size(), geometry.row_bytes));
//   ASSIGN_OR_RETURN(std::unique_ptr<WorkerMemory> memory, backend->OpenWorker(registration));
//   CopyJob job;  // direction, memory.get(), region->data(), geometry, slot, blocks, rows
//   backend->Submit(std::move(job), [](absl::Status s, uint64_t bytes) { ... });
//
// OpenWorker (host_worker_memory.h) opens each distinct allocation handle once and checks every
// tensor against its allocation; a bad number is INVALID_ARGUMENT naming the tensor. Memory that
// could hurt the daemon or belong to someone else is refused (README "Security model"): the
// descriptor is taken only from the registering process (registration.caller_pid, from the
// kernel, through /proc/<pid>/fd), must be owned by registration.caller_uid (PERMISSION_DENIED)
// and sealed with F_SEAL_SHRINK (FAILED_PRECONDITION), so that it can never be truncated under a
// copy (a SIGBUS would end the daemon); it is then mapped (MAP_SHARED) and the descriptor closed.
// Event handles are accepted and ignored: the host backend has no streams to order, a memcpy is
// finished when it returns.
//
// Submit builds the job's descriptor table at once (O(runs) on the caller's thread; nothing per
// page), checks the job against the worker's memory and the registered region (INVALID_ARGUMENT,
// never an abort: the values come from workers), and queues it. Threads take chunks of at most
// kMaxChunkBytes round-robin across queued jobs, so a small job is not stuck behind a large one
// (vLLM 44294). `done` runs exactly once, on a backend thread, after the last chunk; a rejected
// job's `done` also runs on a backend thread, never inside Submit.
//
// Destruction: stops taking new chunks, lets chunks already running finish, and fails every job
// that still has chunks left with ABORTED (bytes 0): its copy is incomplete but no backend thread
// touches its memory after its `done` has run. Then joins the threads. Nothing may be submitted
// while or after the destructor runs.
//
// Thread-safety: every method may be called from any thread. Ownership: the backend owns its
// threads; the caller owns the regions it registers and the WorkerMemory objects OpenWorker
// returns (each owns its mappings and unmaps them on destruction), which must outlive their jobs.
#ifndef KVOFFLOAD_DAEMON_COPY_HOST_HOST_COPY_BACKEND_H_
#define KVOFFLOAD_DAEMON_COPY_HOST_HOST_COPY_BACKEND_H_

#include <atomic>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "daemon/copy/copy_backend.h"

namespace kvoffload::daemon {

class HostCopyBackend final : public CopyBackend {
 public:
  // A job is split into chunks of at least kMinChunkBytes (so tiny copies are not spread thin)
  // and at most kMaxChunkBytes (so concurrent jobs interleave), aiming at one chunk per thread.
  static constexpr uint64_t kMinChunkBytes = 1ull << 20;
  static constexpr uint64_t kMaxChunkBytes = 16ull << 20;

  // Counters (no logging per copy). Monotonic; read with stats().
  struct Stats {
    uint64_t jobs_ok = 0;
    uint64_t jobs_failed = 0;  // rejected or aborted
    uint64_t bytes_stored = 0;
    uint64_t bytes_loaded = 0;
  };

  // Starts `num_threads` copy threads (<= 0: std::thread::hardware_concurrency()).
  explicit HostCopyBackend(int num_threads);
  ~HostCopyBackend() override;
  HostCopyBackend(const HostCopyBackend&) = delete;
  HostCopyBackend& operator=(const HostCopyBackend&) = delete;

  std::string name() const override { return "host"; }
  // INVALID_ARGUMENT for a null base, 0 bytes, row_bytes of 0 or above `bytes`;
  // ALREADY_EXISTS when the range overlaps a registered one.
  absl::Status RegisterRegion(uint8_t* base, uint64_t bytes, uint64_t row_bytes) override;
  void UnregisterRegion(uint8_t* base) override;
  absl::StatusOr<std::unique_ptr<WorkerMemory>> OpenWorker(
      const WorkerRegistration& registration) override;
  void Submit(CopyJob job, CopyDone done) override;
  // The host backend uses no GPU memory: always empty.
  std::map<int32_t, uint64_t> GpuMemoryBytes() const override { return {}; }

  int num_threads() const { return static_cast<int>(threads_.size()); }
  Stats stats() const;

 private:
  struct Job;
  struct RegisteredRegion {
    uint64_t bytes = 0;
    uint64_t row_bytes = 0;
    uint64_t jobs_in_flight = 0;
  };

  void WorkerLoop();
  bool HasWorkOrStopping() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return stopping_ || !queue_.empty();
  }
  // Queues a job whose region accounting (if any) is already done.
  void Enqueue(std::shared_ptr<Job> job) ABSL_LOCKS_EXCLUDED(mu_);
  // Queues a job that only reports `status` from a backend thread.
  void Reject(CopyDone done, absl::Status status) ABSL_LOCKS_EXCLUDED(mu_);
  void Finish(Job& job) ABSL_LOCKS_EXCLUDED(mu_);
  // Checks that [region_base, region_base + extent) lies in one registered region and counts the
  // job as in flight on it. INVALID_ARGUMENT otherwise.
  absl::Status ClaimRegion(const uint8_t* region_base, uint64_t extent, uintptr_t* region_key)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  mutable absl::Mutex mu_;
  // Jobs with chunks not yet taken, round-robin: a thread takes one chunk of the front job and
  // moves the job to the back if it has more.
  std::deque<std::shared_ptr<Job>> queue_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  // Registered regions by base address.
  std::map<uintptr_t, RegisteredRegion> regions_ ABSL_GUARDED_BY(mu_);

  std::atomic<uint64_t> jobs_ok_{0};
  std::atomic<uint64_t> jobs_failed_{0};
  std::atomic<uint64_t> bytes_stored_{0};
  std::atomic<uint64_t> bytes_loaded_{0};

  std::vector<std::thread> threads_;  // started last in the constructor
};

// The factory the daemon links against when it runs without GPUs.
std::unique_ptr<CopyBackend> CreateHostCopyBackend(int num_threads);

}  // namespace kvoffload::daemon

#endif  // KVOFFLOAD_DAEMON_COPY_HOST_HOST_COPY_BACKEND_H_
