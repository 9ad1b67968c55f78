// Completion and deadlines of the CUDA backend, one CompletionQueue per device (so one engine's
// completions never wait behind another device's).
//
// A job goes through two states:
//   1. waiting — its worker's interprocess event (the KV a store reads is written, or the blocks a
//      load overwrites are free) is watched FROM THE HOST with cudaEventQuery. Nothing has been
//      enqueued: no daemon stream ever waits on a worker's event, so a worker that dies before
//      its event fires wedges nothing (a stream blocked on a dead process's event never resumes
//      and then blocks cudaIpcCloseMemHandle and every engine on the GPU: MACHINES.md). When the
//      event fires, `start` enqueues the job's GPU work; at the deadline the job fails with
//      DEADLINE_EXCEEDED having copied nothing.
//   2. running — its own completion event (recorded after its last GPU operation) is polled at
//      a step that grows with the copy's age (NextPoll: at most 1/256 of its duration late), or,
//      for a long copy, queried when a host function after its event wakes the queue (WakeAfter;
//      poll_pacing.h); the job is reported when that event has completed, never earlier. A running job holds only
//      the daemon's own work (kernels and DMA of bounded size), so it always ends; past its
//      deadline it is logged, and reported with its real status when it finishes.
// `done` runs exactly once, on the queue's thread, with no lock held.
//
// Thread-safety: Add may be called from any thread. Ownership: owned by its Device's backend.
#ifndef KVOFFLOAD_DAEMON_COPY_CUDA_COMPLETION_H_
#define KVOFFLOAD_DAEMON_COPY_CUDA_COMPLETION_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <thread>
#include <vector>

#include <cuda_runtime_api.h>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "daemon/copy/copy_backend.h"
#include "daemon/copy/cuda/device.h"
#include "daemon/copy/cuda/job_times.h"
#include "daemon/copy/cuda/poll_pacing.h"
#include "daemon/copy/cuda/wake_relay.h"

namespace kvoffload::daemon::cuda {

class CudaWorkerMemory;
class CompletionQueue;

struct PendingJob {
  CopyDone done;
  CopyDirection direction = CopyDirection::kStore;
  uint64_t bytes = 0;
  Device* device = nullptr;
  CudaWorkerMemory* memory = nullptr;  // counts this job (JobStarted/JobEnded) until it is reported
  CompletionQueue* queue = nullptr;    // the device's queue (WakeAfter), null for refused jobs
  absl::Time submitted;
  absl::Time deadline = absl::InfiniteFuture();
  // A failure known before anything was enqueued: reported at once.
  absl::Status status;
  // Waiting state: the worker's event (null: start at once) and what starts the job. `start`
  // enqueues the GPU work and fills `completion` and `status`; a null completion after `start`
  // means nothing of the job is left running (reported at once).
  cudaEvent_t worker_event = nullptr;
  std::function<void(PendingJob*)> start;
  bool started = false;
  // Running state: since when (set by `start` once the work is enqueued), and when the queue
  // next queries it.
  absl::Time started_at;
  absl::Time next_poll = absl::InfinitePast();
  cudaEvent_t completion = nullptr;
  bool stream_wakes = false;  // a host function after `completion` wakes the queue
  Device::Buffer buffer;  // the descriptor table, returned to the device when the job ends
  absl::Time next_warning = absl::InfiniteFuture();
  JobTimes times;  // logged at debug level once reported
};

class CompletionQueue {
 public:
  // Jobs of stream_wake_min_bytes or more are woken by their stream (WakeAfter); 0: none.
  CompletionQueue(Device* device, absl::Duration interval,
                  uint64_t stream_wake_min_bytes = kStreamWakeMinBytes);
  ~CompletionQueue();  // Shutdown(), then lets go of the wake relay
  CompletionQueue(const CompletionQueue&) = delete;
  CompletionQueue& operator=(const CompletionQueue&) = delete;

  // Takes a job in either state (started or waiting).
  void Add(std::unique_ptr<PendingJob> job);
  // Jobs still waiting for their worker's event end at once with CANCELLED; running jobs are
  // waited for (they hold only the daemon's own work). Then the thread stops. Idempotent.
  void Shutdown();
  size_t waiting() const;
  // Has `wake_stream` wake the queue once `completion` has completed (a wait, then
  // cudaLaunchHostFunc). The wake stream holds nothing else: a host function blocks the work
  // queued after it on its stream, and on the job's own stream it would hold the next job's
  // copies back until it ran. false if it could not be enqueued: the job is then polled.
  bool WakeAfter(cudaEvent_t completion, cudaStream_t wake_stream);
  // Whether a job of `bytes` should be woken by its stream rather than polled.
  bool WakesByStream(uint64_t bytes) const {
    return stream_wake_min_bytes_ != 0 && bytes >= stream_wake_min_bytes_;
  }

  // Reports a job exactly once: returns its buffer and event to the device, releases its worker
  // memory, calls `done`; then, at debug level, logs the job's times (DescribeJobTimes).
  static void Report(PendingJob& job, absl::Status status);

 private:
  void Run();
  // A stream's host function ran (on the driver's thread).
  void Kick();
  // True when the job is over (reported). kicked: a stream woke the queue since the last step.
  bool Step(PendingJob& job, absl::Time now, bool kicked);
  // How long the queue may sleep before a job needs it (interval_ while any waits for its
  // worker's event).
  absl::Duration NextWake(const std::vector<std::unique_ptr<PendingJob>>& active,
                          absl::Time now) const;

  Device* const device_;
  const absl::Duration interval_;
  const uint64_t stream_wake_min_bytes_;
  mutable absl::Mutex mu_;
  std::vector<std::unique_ptr<PendingJob>> incoming_ ABSL_GUARDED_BY(mu_);
  size_t waiting_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Time next_idle_ = absl::InfinitePast();  // only the queue's thread
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  bool stopped_ ABSL_GUARDED_BY(mu_) = false;
  uint64_t kicks_ ABSL_GUARDED_BY(mu_) = 0;
  WakeRelay* const relay_;  // owned until the destructor detaches it
  std::thread thread_;  // last: starts after the members above exist
};

}  // namespace kvoffload::daemon::cuda

#endif  // KVOFFLOAD_DAEMON_COPY_CUDA_COMPLETION_H_
