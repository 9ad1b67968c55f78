#include "daemon/region/memory_budget.h"

#include <cstdlib>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/logging.h"

namespace kvoffload::daemon {

absl::Status MemoryBudget::Reserve(uint64_t bytes, absl::string_view what) {
  absl::MutexLock lock(&mu_);
  const uint64_t remaining = cap_ - reserved_;
  if (bytes > remaining) {
    return absl::ResourceExhaustedError(absl::StrCat(what, " needs ", bytes,
                                                     " bytes but only ", remaining,
                                                     " of the node cap ", cap_, " remain"));
  }
  reserved_ += bytes;
  return absl::OkStatus();
}

void MemoryBudget::Release(uint64_t bytes) {
  absl::MutexLock lock(&mu_);
  if (bytes > reserved_) {
    common::Logger("region")->critical("memory budget: releasing {} bytes but only {} are reserved",
                                       bytes, reserved_);
    std::abort();
  }
  reserved_ -= bytes;
}

uint64_t MemoryBudget::reserved() const {
  absl::MutexLock lock(&mu_);
  return reserved_;
}

uint64_t MemoryBudget::remaining() const {
  absl::MutexLock lock(&mu_);
  return cap_ - reserved_;
}

absl::StatusOr<MemoryReservation> MemoryReservation::Reserve(MemoryBudget* budget, uint64_t bytes,
                                                             absl::string_view what) {
  absl::Status status = budget->Reserve(bytes, what);
  if (!status.ok()) return status;
  return MemoryReservation(budget, bytes);
}

MemoryReservation::MemoryReservation(MemoryReservation&& other) noexcept
    : budget_(std::exchange(other.budget_, nullptr)), bytes_(std::exchange(other.bytes_, 0)) {}

MemoryReservation& MemoryReservation::operator=(MemoryReservation&& other) noexcept {
  if (this != &other) {
    Release();
    budget_ = std::exchange(other.budget_, nullptr);
    bytes_ = std::exchange(other.bytes_, 0);
  }
  return *this;
}

void MemoryReservation::Release() {
  if (budget_ != nullptr && bytes_ > 0) budget_->Release(bytes_);
  budget_ = nullptr;
  bytes_ = 0;
}

}  // namespace kvoffload::daemon
