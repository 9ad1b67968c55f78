#include "daemon/engine/retired_jobs.h"

#include <utility>

namespace kvoffload::daemon {

void RetiredJobs::Remember(uint64_t job_id, absl::Status status, std::set<uint32_t> submitted) {
  if (capacity_ == 0) return;
  if (!outcomes_.emplace(job_id, Outcome{std::move(status), std::move(submitted)}).second) {
    return;  // already remembered: keep the first outcome and its place in the order
  }
  order_.push_back(job_id);
  while (order_.size() > capacity_) {
    outcomes_.erase(order_.front());
    order_.pop_front();
  }
}

const RetiredJobs::Outcome* RetiredJobs::Find(uint64_t job_id) const {
  auto it = outcomes_.find(job_id);
  return it == outcomes_.end() ? nullptr : &it->second;
}

}  // namespace kvoffload::daemon
