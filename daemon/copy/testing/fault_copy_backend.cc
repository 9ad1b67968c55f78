#include "daemon/copy/testing/fault_copy_backend.h"

#include <utility>

namespace kvoffload::daemon {
namespace {

bool Matches(const FaultCopyBackend::Rule& rule, const CopyJob& job) {
  return (!rule.direction.has_value() || *rule.direction == job.direction) &&
         (!rule.slot.has_value() || *rule.slot == job.slot);
}

}  // namespace

FaultCopyBackend::FaultCopyBackend(std::unique_ptr<CopyBackend> inner)
    : inner_(std::move(inner)), timer_([this] { TimerLoop(); }) {}

FaultCopyBackend::~FaultCopyBackend() {
  // Parked copies never ran: they end ABORTED, like the host backend's unfinished jobs.
  std::map<HeldId, Parked> held;
  {
    absl::MutexLock lock(&mu_);
    held.swap(held_);
  }
  for (auto& [id, parked] : held) {
    CopyDone done = std::move(parked.done);
    RunLater(absl::InfinitePast(), [done = std::move(done)] {
      done(absl::AbortedError("fault backend destroyed while the copy was held"), 0);
    });
  }
  // The wrapped backend ends its own copies; their completions may still be queued here.
  inner_.reset();
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
    changed_.SignalAll();
  }
  timer_.join();
}

void FaultCopyBackend::AddRule(Rule rule) {
  absl::MutexLock lock(&mu_);
  rules_.push_back(std::move(rule));
}

void FaultCopyBackend::SetDefaultRule(Rule rule) {
  absl::MutexLock lock(&mu_);
  default_rule_ = std::move(rule);
}

void FaultCopyBackend::ClearRules() {
  absl::MutexLock lock(&mu_);
  rules_.clear();
}

void FaultCopyBackend::FailNextOpenWorker(absl::Status status) {
  absl::MutexLock lock(&mu_);
  open_worker_failure_ = std::move(status);
}

std::vector<FaultCopyBackend::HeldId> FaultCopyBackend::Held() const {
  absl::MutexLock lock(&mu_);
  std::vector<HeldId> ids;
  for (const auto& [id, parked] : held_) ids.push_back(id);
  return ids;
}

bool FaultCopyBackend::WaitForHeld(size_t n, absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  absl::MutexLock lock(&mu_);
  while (held_.size() < n) {
    if (changed_.WaitWithDeadline(&mu_, deadline)) return held_.size() >= n;
  }
  return true;
}

bool FaultCopyBackend::TakeHeld(HeldId id, Parked* parked) {
  absl::MutexLock lock(&mu_);
  auto it = held_.find(id);
  if (it == held_.end()) return false;
  *parked = std::move(it->second);
  held_.erase(it);
  changed_.SignalAll();
  return true;
}

bool FaultCopyBackend::ReleaseHeld(HeldId id) {
  Parked parked;
  if (!TakeHeld(id, &parked)) return false;
  inner_->Submit(std::move(parked.job), std::move(parked.done));
  return true;
}

bool FaultCopyBackend::FailHeld(HeldId id, absl::Status status) {
  Parked parked;
  if (!TakeHeld(id, &parked)) return false;
  CopyDone done = std::move(parked.done);
  RunLater(absl::InfinitePast(), [done = std::move(done), status = std::move(status)] {
    done(status, 0);
  });
  return true;
}

void FaultCopyBackend::ReleaseAllHeld() {
  for (HeldId id : Held()) ReleaseHeld(id);
}

uint64_t FaultCopyBackend::submitted() const {
  absl::MutexLock lock(&mu_);
  return submitted_;
}

uint64_t FaultCopyBackend::completed() const {
  absl::MutexLock lock(&mu_);
  return completed_;
}

bool FaultCopyBackend::WaitForCompleted(uint64_t n, absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  absl::MutexLock lock(&mu_);
  while (completed_ < n) {
    if (changed_.WaitWithDeadline(&mu_, deadline)) return completed_ >= n;
  }
  return true;
}

absl::StatusOr<std::unique_ptr<WorkerMemory>> FaultCopyBackend::OpenWorker(
    const WorkerRegistration& registration) {
  {
    absl::MutexLock lock(&mu_);
    if (open_worker_failure_.has_value()) {
      absl::Status failure = std::move(*open_worker_failure_);
      open_worker_failure_.reset();
      return failure;
    }
  }
  return inner_->OpenWorker(registration);
}

void FaultCopyBackend::Submit(CopyJob job, CopyDone done) {
  const absl::Time now = absl::Now();
  Rule rule;
  {
    absl::MutexLock lock(&mu_);
    const HeldId id = submitted_++;
    bool found = false;
    for (auto it = rules_.begin(); it != rules_.end(); ++it) {
      if (Matches(*it, job)) {
        rule = std::move(*it);
        rules_.erase(it);
        found = true;
        break;
      }
    }
    if (!found && Matches(default_rule_, job)) rule = default_rule_;
    if (rule.fault == Fault::kHold) {
      held_.emplace(id, Parked{std::move(job), Counted(std::move(done), absl::InfinitePast())});
      changed_.SignalAll();
      return;
    }
  }
  switch (rule.fault) {
    case Fault::kNone:
    case Fault::kHold:  // handled above
      inner_->Submit(std::move(job), Counted(std::move(done), absl::InfinitePast()));
      return;
    case Fault::kFail: {
      CopyDone counted = Counted(std::move(done), absl::InfinitePast());
      RunLater(now, [counted = std::move(counted), status = rule.status] { counted(status, 0); });
      return;
    }
    case Fault::kFailAfterCopy: {
      CopyDone counted = Counted(std::move(done), absl::InfinitePast());
      inner_->Submit(std::move(job), [counted = std::move(counted), status = rule.status](
                                         absl::Status, uint64_t) { counted(status, 0); });
      return;
    }
    case Fault::kDelay:
      inner_->Submit(std::move(job), Counted(std::move(done), now + rule.delay));
      return;
  }
}

CopyDone FaultCopyBackend::Counted(CopyDone done, absl::Time not_before) {
  // `done` is moved, never copied: it may hold the last references to an engine and a worker's
  // memory, which its caller releases as its last act (a copy would keep them alive on a backend
  // thread for as long as the wrapped backend keeps this wrapper).
  return [this, done = std::move(done), not_before](absl::Status status, uint64_t bytes) mutable {
    auto finish = [this, done = std::move(done), status, bytes]() mutable {
      done(status, bytes);
      done = nullptr;
      absl::MutexLock lock(&mu_);
      ++completed_;
      changed_.SignalAll();
    };
    if (absl::Now() < not_before) {
      RunLater(not_before, std::move(finish));
    } else {
      finish();
    }
  };
}

void FaultCopyBackend::RunLater(absl::Time at, std::function<void()> run) {
  absl::MutexLock lock(&mu_);
  timed_.emplace(at, std::move(run));
  changed_.SignalAll();
}

void FaultCopyBackend::TimerLoop() {
  for (;;) {
    std::function<void()> run;
    {
      absl::MutexLock lock(&mu_);
      for (;;) {
        if (timed_.empty()) {
          if (stopping_) return;
          changed_.Wait(&mu_);
          continue;
        }
        auto first = timed_.begin();
        // When stopping, delays are cut short: every `done` still runs exactly once.
        if (stopping_ || first->first <= absl::Now()) {
          run = std::move(first->second);
          timed_.erase(first);
          break;
        }
        changed_.WaitWithDeadline(&mu_, first->first);
      }
    }
    run();
  }
}

}  // namespace kvoffload::daemon
