// MemoryBudget: the node-wide cap on host memory across all regions (`--max_region_bytes`,
// DESIGN.md §5). A region is created only after its bytes are reserved here, so the daemon
// refuses, loudly and before allocating, what the node cannot hold (SGLang 38156 / 21880) instead
// of meeting the OOM killer halfway through population.
//
//   MemoryBudget budget(flags.max_region_bytes);
//   ASSIGN_OR_RETURN(MemoryReservation reservation,
//                    MemoryReservation::Reserve(&budget, cost.total_bytes, "engine engine-a/dp0"));
//   ASSIGN_OR_RETURN(auto region, Region::Create("engine-a/dp0", geometry.capacity_bytes, opts));
//   // keep `reservation` next to `region`; destroying it gives the bytes back.
//
// Thread-safety: MemoryBudget is safe for concurrent use. A MemoryReservation is not (it is a
// value owned by one object, like the region it accounts for).
// Ownership: the budget must outlive every reservation taken from it.
#ifndef KVOFFLOAD_DAEMON_REGION_MEMORY_BUDGET_H_
#define KVOFFLOAD_DAEMON_REGION_MEMORY_BUDGET_H_

#include <cstdint>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"

namespace kvoffload::daemon {

class MemoryBudget {
 public:
  // `cap` bytes may be reserved in total. The caller decides what an unset flag means (pass
  // UINT64_MAX for "no cap").
  explicit MemoryBudget(uint64_t cap) : cap_(cap) {}
  MemoryBudget(const MemoryBudget&) = delete;
  MemoryBudget& operator=(const MemoryBudget&) = delete;

  // Reserves `bytes` for `what` (names the engine and its parts, used in the message).
  // RESOURCE_EXHAUSTED "<what> needs N bytes but only M of the node cap C remain" when they do not fit;
  // then nothing is reserved. Reserving 0 bytes always succeeds.
  absl::Status Reserve(uint64_t bytes, absl::string_view what) ABSL_LOCKS_EXCLUDED(mu_);
  // Returns bytes from an earlier Reserve. Releasing more than is reserved is a bug in the
  // daemon (never caused by worker input) and aborts.
  void Release(uint64_t bytes) ABSL_LOCKS_EXCLUDED(mu_);

  uint64_t cap() const { return cap_; }
  uint64_t reserved() const ABSL_LOCKS_EXCLUDED(mu_);
  uint64_t remaining() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  const uint64_t cap_;
  mutable absl::Mutex mu_;
  uint64_t reserved_ ABSL_GUARDED_BY(mu_) = 0;
};

// Bytes reserved from a MemoryBudget, given back on destruction (or by Release()). Move-only.
class MemoryReservation {
 public:
  // Reserves through budget->Reserve; same errors.
  static absl::StatusOr<MemoryReservation> Reserve(MemoryBudget* budget, uint64_t bytes,
                                                   absl::string_view what);

  MemoryReservation() = default;  // holds nothing
  ~MemoryReservation() { Release(); }
  MemoryReservation(MemoryReservation&& other) noexcept;
  MemoryReservation& operator=(MemoryReservation&& other) noexcept;
  MemoryReservation(const MemoryReservation&) = delete;
  MemoryReservation& operator=(const MemoryReservation&) = delete;

  // Gives the bytes back now; afterwards the reservation holds nothing.
  void Release();
  uint64_t bytes() const { return bytes_; }

 private:
  MemoryReservation(MemoryBudget* budget, uint64_t bytes) : budget_(budget), bytes_(bytes) {}

  MemoryBudget* budget_ = nullptr;  // not owned
  uint64_t bytes_ = 0;
};

}  // namespace kvoffload::daemon

#endif  // KVOFFLOAD_DAEMON_REGION_MEMORY_BUDGET_H_
