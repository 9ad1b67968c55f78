#include "daemon/engine/latency_histogram.h"

#include <cmath>
#include <limits>

namespace kvoffload::daemon {

double LatencyHistogram::UpperBoundSeconds(int bucket) {
  if (bucket >= kBuckets - 1) return std::numeric_limits<double>::infinity();
  return 10e-6 * std::ldexp(1.0, bucket);
}

void LatencyHistogram::Record(absl::Duration latency) {
  const double seconds = absl::ToDoubleSeconds(latency);
  int bucket = 0;
  while (bucket < kBuckets - 1 && seconds > UpperBoundSeconds(bucket)) ++bucket;
  absl::MutexLock lock(&mu_);
  ++data_.counts[bucket];
  ++data_.count;
  data_.sum_seconds += seconds;
}

LatencyHistogram::Snapshot LatencyHistogram::Get() const {
  absl::MutexLock lock(&mu_);
  return data_;
}

double LatencyHistogram::Snapshot::QuantileMicros(double q) const {
  if (count == 0) return 0;
  const double rank = q * static_cast<double>(count);
  uint64_t seen = 0;
  for (int i = 0; i < kBuckets; ++i) {
    seen += counts[i];
    if (static_cast<double>(seen) >= rank && counts[i] > 0) {
      const double bound = UpperBoundSeconds(i < kBuckets - 1 ? i : kBuckets - 2);
      return bound * 1e6;
    }
  }
  return UpperBoundSeconds(kBuckets - 2) * 1e6;
}

}  // namespace kvoffload::daemon
