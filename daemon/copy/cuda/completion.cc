#include "daemon/copy/cuda/completion.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "daemon/copy/cuda/log.h"
#include "common/cuda/cuda_status.h"
#include "common/thread_name.h"
#include "daemon/copy/cuda/worker_memory.h"

namespace kvoffload::daemon::cuda {
CompletionQueue::CompletionQueue(Device* device, absl::Duration interval,
                                 uint64_t stream_wake_min_bytes)
    : device_(device),
      interval_(interval),
      stream_wake_min_bytes_(stream_wake_min_bytes),
      relay_(WakeRelay::Create([this] { Kick(); })),
      thread_([this] { Run(); }) {}

CompletionQueue::~CompletionQueue() {
  Shutdown();
  // Host functions of failed streams may still be queued: they find the relay, not this queue.
  relay_->Detach();
}

bool CompletionQueue::WakeAfter(cudaEvent_t completion, cudaStream_t wake_stream) {
  if (wake_stream == nullptr) return false;
  relay_->Arm();
  if (cudaStreamWaitEvent(wake_stream, completion, 0) == cudaSuccess &&
      cudaLaunchHostFunc(wake_stream, &WakeRelay::Fire, relay_) == cudaSuccess) {
    return true;
  }
  relay_->Disarm();
  cudaGetLastError();  // not sticky: the job is polled instead
  return false;
}

void CompletionQueue::Kick() {
  absl::MutexLock lock(&mu_);
  ++kicks_;
}

void CompletionQueue::Add(std::unique_ptr<PendingJob> job) {
  absl::MutexLock lock(&mu_);
  incoming_.push_back(std::move(job));
}

size_t CompletionQueue::waiting() const {
  absl::MutexLock lock(&mu_);
  return waiting_;
}

void CompletionQueue::Shutdown() {
  {
    absl::MutexLock lock(&mu_);
    if (stopped_) return;
    stopping_ = true;
  }
  if (thread_.joinable()) thread_.join();
  absl::MutexLock lock(&mu_);
  stopped_ = true;
}

void CompletionQueue::Report(PendingJob& j, absl::Status status) {
  const uint64_t bytes = status.ok() ? j.bytes : 0;
  const bool ok = status.ok();
  if (j.device != nullptr) {
    j.device->ReleaseBuffer(j.buffer);
    j.device->ReleaseEvent(j.completion);
    j.buffer = Device::Buffer();
    j.completion = nullptr;
  }
  CopyDone done = std::move(j.done);
  if (j.memory != nullptr) {
    j.memory->JobEnded();
    j.memory = nullptr;  // may be destroyed as soon as `done` runs
  }
  if (done) done(std::move(status), bytes);
  if (Log()->should_log(spdlog::level::debug)) {
    j.times.reported = JobClockNanos();
    Log()->debug("{}", DescribeJobTimes(j.times, CopyDirectionName(j.direction), j.bytes, ok));
  }
}

void CompletionQueue::Run() {
  common::SetThreadName("kvo-complete");
  std::vector<std::unique_ptr<PendingJob>> active;
  absl::Duration wake = interval_;
  uint64_t seen_kicks = 0;
  for (;;) {
    bool stopping = false;
    bool kicked = false;
    {
      absl::MutexLock lock(&mu_);
      auto ready = [this, &seen_kicks]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return !incoming_.empty() || stopping_ || kicks_ != seen_kicks;
      };
      if (active.empty()) {
        // Idle: wake once a second for the device's idle work.
        mu_.AwaitWithTimeout(absl::Condition(&ready), absl::Seconds(1));
      } else {
        mu_.AwaitWithTimeout(absl::Condition(&ready), wake);
      }
      for (auto& j : incoming_) active.push_back(std::move(j));
      incoming_.clear();
      stopping = stopping_;
      kicked = kicks_ != seen_kicks;
      seen_kicks = kicks_;
      if (stopping && active.empty()) return;
    }
    const absl::Time now = absl::Now();
    if (device_ != nullptr && now >= next_idle_) {
      device_->RunIdleHooks(now);
      next_idle_ = now + absl::Seconds(1);
    }
    size_t kept = 0;
    size_t waiting = 0;
    for (size_t i = 0; i < active.size(); ++i) {
      PendingJob& j = *active[i];
      if (stopping && !j.started && j.status.ok()) {
        j.status = absl::CancelledError(absl::StrCat(
            CopyDirectionName(j.direction), " job cancelled: the daemon is stopping and the worker's "
            "event had not fired; nothing was copied"));
      }
      if (Step(j, now, kicked)) continue;
      waiting += j.started ? 0 : 1;
      if (kept != i) active[kept] = std::move(active[i]);
      ++kept;
    }
    active.resize(kept);
    wake = NextWake(active, absl::Now());
    absl::MutexLock lock(&mu_);
    waiting_ = waiting;
  }
}

absl::Duration CompletionQueue::NextWake(const std::vector<std::unique_ptr<PendingJob>>& active,
                                         absl::Time now) const {
  // Stream-woken jobs need the queue only for their backstop; polled ones set next_poll sooner.
  absl::Duration wake = kStreamWakeBackstop;
  for (const auto& j : active) {
    if (!j->started) return interval_;  // watching a worker's event: every interval
    wake = std::min(wake, j->next_poll - now);
  }
  return std::max(wake, absl::ZeroDuration());
}

bool CompletionQueue::Step(PendingJob& j, absl::Time now, bool kicked) {
  // Started with nothing left running, or failed before anything was enqueued.
  if (j.started ? j.completion == nullptr : !j.status.ok()) {
    Report(j, j.status);
    return true;
  }
  if (!j.started) {
    absl::Status health = device_ != nullptr ? device_->health() : absl::OkStatus();
    if (!health.ok()) {
      Report(j, health);
      return true;
    }
    if (j.worker_event != nullptr) {
      const cudaError_t err = cudaEventQuery(j.worker_event);
      if (err == cudaErrorNotReady) {
        if (now < j.deadline) return false;
        Log()->warn("{} job of {} bytes: the worker's event did not fire within {}; failed "
                    "without copying",
                    CopyDirectionName(j.direction), j.bytes, absl::FormatDuration(now - j.submitted));
        Report(j, absl::DeadlineExceededError(absl::StrCat(
                      CopyDirectionName(j.direction), " job: the worker's event did not fire within ",
                      absl::FormatDuration(now - j.submitted),
                      " (worker dead or stalled?); nothing was copied")));
        return true;
      }
      if (err != cudaSuccess) {
        Report(j, device_->Check(err, "cudaEventQuery on the worker's event"));
        return true;
      }
    }
    j.started = true;
    j.start(&j);
    j.start = nullptr;
    if (j.completion == nullptr) {
      Report(j, j.status);
      return true;
    }
    j.next_warning = std::max(j.deadline, now + absl::Seconds(1));
    return false;
  }
  // A kick names no job: each stream-woken job is queried once (a running job costs ~1 µs).
  if (now < j.next_poll && !(kicked && j.stream_wakes)) return false;
  const cudaError_t err = cudaEventQuery(j.completion);
  if (err == cudaSuccess) {
    j.times.observed = JobClockNanos();
    Report(j, j.status);
    return true;
  }
  if (err != cudaErrorNotReady) {
    // A sticky error: nothing more runs on this context; the device is failed from now on.
    Report(j, device_->Check(err, absl::StrCat(CopyDirectionName(j.direction), " job")));
    return true;
  }
  if (now >= j.next_warning) {
    Log()->warn("{} job of {} bytes still copying {} after submission (past its deadline: the "
                "copy cannot be recalled, it is reported when it ends)",
                CopyDirectionName(j.direction), j.bytes, absl::FormatDuration(now - j.submitted));
    j.next_warning = now + absl::Seconds(30);
  }
  j.next_poll = j.stream_wakes ? now + kStreamWakeBackstop : NextPoll(j.started_at, now, interval_);
  return false;
}

}  // namespace kvoffload::daemon::cuda
