#include "daemon/tier/testing/fault_block_io.h"

#include <algorithm>

#include "common/errno_status.h"

namespace kvoffload::tier::testing {

void FaultBlockIo::FailWrites(int err, int count) {
  absl::MutexLock lock(&mu_);
  write_rule_ = Rule{Fault::kFail, err, 0, count};
}

void FaultBlockIo::FailReads(int err, int count) {
  absl::MutexLock lock(&mu_);
  read_rule_ = Rule{Fault::kFail, err, 0, count};
}

void FaultBlockIo::TearWrites(uint64_t keep_bytes, int count) {
  absl::MutexLock lock(&mu_);
  write_rule_ = Rule{Fault::kTear, EIO, keep_bytes, count};
}

void FaultBlockIo::ShortWrites(uint64_t keep_bytes, int count) {
  absl::MutexLock lock(&mu_);
  write_rule_ = Rule{Fault::kShort, 0, keep_bytes, count};
}

void FaultBlockIo::FailPreallocate(int err) {
  absl::MutexLock lock(&mu_);
  preallocate_err_ = err;
}

void FaultBlockIo::HoldCompletions() {
  absl::MutexLock lock(&mu_);
  holding_ = true;
}

size_t FaultBlockIo::ReleaseHeld() {
  std::vector<std::pair<IoCallback, absl::StatusOr<uint64_t>>> run;
  {
    absl::MutexLock lock(&mu_);
    holding_ = false;
    run.swap(held_);
  }
  for (auto& [done, result] : run) done(std::move(result));
  return run.size();
}

size_t FaultBlockIo::held() const {
  absl::MutexLock lock(&mu_);
  return held_.size();
}

uint64_t FaultBlockIo::reads_submitted() const {
  absl::MutexLock lock(&mu_);
  return reads_;
}

uint64_t FaultBlockIo::writes_submitted() const {
  absl::MutexLock lock(&mu_);
  return writes_;
}

absl::Status FaultBlockIo::Preallocate(int fd, uint64_t bytes) {
  {
    absl::MutexLock lock(&mu_);
    if (preallocate_err_ != 0) return common::ErrnoStatus(preallocate_err_, "fallocate (injected)");
  }
  return base_->Preallocate(fd, bytes);
}

FaultBlockIo::Rule FaultBlockIo::Take(Rule& rule) {
  if (rule.fault == Fault::kNone || rule.count <= 0) return Rule{};
  Rule taken = rule;
  if (--rule.count == 0) rule = Rule{};
  return taken;
}

void FaultBlockIo::Complete(IoCallback done, absl::StatusOr<uint64_t> result) {
  {
    absl::MutexLock lock(&mu_);
    if (holding_) {
      held_.emplace_back(std::move(done), std::move(result));
      return;
    }
  }
  done(std::move(result));
}

void FaultBlockIo::Submit(IoRequest request, IoCallback done) {
  Rule rule;
  {
    absl::MutexLock lock(&mu_);
    const bool is_read = request.kind == IoRequest::Kind::kRead;
    ++(is_read ? reads_ : writes_);
    rule = Take(is_read ? read_rule_ : write_rule_);
  }
  if (rule.fault == Fault::kFail) {
    Complete(std::move(done), common::ErrnoStatus(rule.err, "injected"));
    return;
  }
  if (rule.fault == Fault::kTear || rule.fault == Fault::kShort) {
    // Trim the iovecs to the first keep_bytes (kept a multiple of 4096 by the tests).
    uint64_t left = rule.keep_bytes;
    std::vector<iovec> kept;
    for (const iovec& v : request.iov) {
      if (left == 0) break;
      const uint64_t n = std::min<uint64_t>(left, v.iov_len);
      kept.push_back({v.iov_base, n});
      left -= n;
    }
    request.iov = std::move(kept);
    base_->Submit(std::move(request), [this, rule, done = std::move(done)](
                                          absl::StatusOr<uint64_t> result) mutable {
      if (rule.fault == Fault::kTear && result.ok()) {
        result = common::ErrnoStatus(EIO, "injected torn write");
      }
      Complete(std::move(done), std::move(result));
    });
    return;
  }
  base_->Submit(std::move(request),
                [this, done = std::move(done)](absl::StatusOr<uint64_t> result) mutable {
                  Complete(std::move(done), std::move(result));
                });
}

}  // namespace kvoffload::tier::testing
