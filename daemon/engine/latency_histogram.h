// LatencyHistogram: fixed exponential buckets of job latency (submit of the first part → job
// finished), cheap enough for every job; read by Stats (p50/p99) and Prometheus (buckets).
#ifndef KVOFFLOAD_DAEMON_ENGINE_LATENCY_HISTOGRAM_H_
#define KVOFFLOAD_DAEMON_ENGINE_LATENCY_HISTOGRAM_H_

#include <array>
#include <cstdint>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace kvoffload::daemon {

// Thread-safe.
class LatencyHistogram {
 public:
  // Upper bounds in seconds: 10 µs × 2^i, i = 0..kBuckets-2, then +Inf.
  static constexpr int kBuckets = 22;
  static double UpperBoundSeconds(int bucket);

  struct Snapshot {
    std::array<uint64_t, kBuckets> counts{};  // not cumulative
    uint64_t count = 0;
    double sum_seconds = 0;
    // Quantile estimated from the buckets (upper bound of the bucket holding it), in µs.
    double QuantileMicros(double q) const;
  };

  void Record(absl::Duration latency);
  Snapshot Get() const;

 private:
  mutable absl::Mutex mu_;
  Snapshot data_ ABSL_GUARDED_BY(mu_);
};

}  // namespace kvoffload::daemon

#endif  // KVOFFLOAD_DAEMON_ENGINE_LATENCY_HISTOGRAM_H_
