#include "daemon/engine/testing/engine_test_env.h"

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"
#include "daemon/copy/host/host_copy_backend.h"

namespace kvoffload::daemon::testing {

common::EngineSpec PerRankSpec(uint32_t world_size, const std::string& engine_id) {
  common::EngineSpec spec;
  spec.engine_id = engine_id;
  spec.world_size = world_size;
  spec.tp = world_size;
  spec.num_layers = kLayers;
  spec.page_bytes = kPageBytes;
  // row_bytes = world_size × 8 KiB (a multiple of 4 KiB): exactly kNumRows rows.
  spec.budget_bytes = kNumRows * world_size * kBytesPerBlock;
  return spec;
}

common::EngineSpec ReplicatedSpec(const std::string& engine_id) {
  common::EngineSpec spec = PerRankSpec(2, engine_id);
  spec.attention = common::Attention::kMla;
  spec.budget_bytes = kNumRows * kBytesPerBlock;  // one copy per row
  return spec;
}

uint64_t ReservedFor(const common::EngineSpec& spec) {
  absl::StatusOr<common::Geometry> geometry = common::ComputeGeometry(spec);
  absl::StatusOr<EngineCost> cost =
      geometry.ok() ? CostOfEngine(*geometry) : absl::StatusOr<EngineCost>(geometry.status());
  if (!cost.ok()) {
    std::fprintf(stderr, "ReservedFor: %s\n", cost.status().ToString().c_str());
    std::abort();
  }
  return cost->total_bytes;
}

void RecordingListener::OnJobFinished(const JobResult& result) {
  absl::MutexLock lock(&mu_);
  if (hold_ == Hold::kArmed) {
    hold_ = Hold::kHolding;
    changed_.SignalAll();
    while (hold_ == Hold::kHolding) changed_.Wait(&mu_);
  }
  results_.push_back(result);
  events_.push_back(
      absl::StrCat("finished ", result.job_id, " ", static_cast<int>(result.status.code())));
  changed_.SignalAll();
}

void RecordingListener::HoldNextVerdict() {
  absl::MutexLock lock(&mu_);
  hold_ = Hold::kArmed;
}

bool RecordingListener::WaitUntilVerdictHeld(absl::Duration timeout) {
  absl::MutexLock lock(&mu_);
  const absl::Time deadline = absl::Now() + timeout;
  while (hold_ != Hold::kHolding) {
    if (changed_.WaitWithDeadline(&mu_, deadline)) return hold_ == Hold::kHolding;
  }
  return true;
}

void RecordingListener::ReleaseHeldVerdict() {
  absl::MutexLock lock(&mu_);
  hold_ = Hold::kReleased;
  changed_.SignalAll();
}

void RecordingListener::OnEngineClosed(const absl::Status& why) {
  absl::MutexLock lock(&mu_);
  events_.push_back(absl::StrCat("closed ", static_cast<int>(why.code())));
  changed_.SignalAll();
}

std::vector<JobResult> RecordingListener::results() const {
  absl::MutexLock lock(&mu_);
  return results_;
}

std::vector<JobResult> RecordingListener::ResultsFor(uint64_t job_id) const {
  absl::MutexLock lock(&mu_);
  std::vector<JobResult> out;
  for (const JobResult& r : results_) {
    if (r.job_id == job_id) out.push_back(r);
  }
  return out;
}

std::vector<std::string> RecordingListener::events() const {
  absl::MutexLock lock(&mu_);
  return events_;
}

bool RecordingListener::WaitForResults(size_t n, absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  absl::MutexLock lock(&mu_);
  while (results_.size() < n) {
    if (changed_.WaitWithDeadline(&mu_, deadline)) return results_.size() >= n;
  }
  return true;
}

EngineTestEnv::EngineTestEnv(uint64_t node_cap)
    : backend_(std::make_unique<FaultCopyBackend>(CreateHostCopyBackend(2))),
      budget_(node_cap),
      release_(std::make_unique<DeferredRelease>()) {
  deps_.backend = backend_.get();
  deps_.budget = &budget_;
  deps_.release = release_.get();
  deps_.region_options.populate_threads = 1;
  deps_.region_options.transparent_huge_pages = false;
  deps_.callbacks_running = &callbacks_running_;
}

EngineTestEnv::~EngineTestEnv() {
  Settle();
  release_.reset();  // engines deferred by callbacks die here, before the budget
  backend_.reset();
}

bool EngineTestEnv::Settle() {
  backend_->ReleaseAllHeld();
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  if (!backend_->WaitForCompleted(backend_->submitted(), absl::Seconds(10))) return false;
  while (callbacks_running_.load() > 0) {
    if (absl::Now() > deadline) return false;
    absl::SleepFor(absl::Milliseconds(1));
  }
  release_->Flush();
  return true;
}

}  // namespace kvoffload::daemon::testing
