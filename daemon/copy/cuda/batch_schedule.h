// BatchSchedule: how many copies each cudaMemcpyBatchAsync call of one enqueue takes. The copy
// engines start on a batch only once its call returns, so one call of a whole job's descriptors
// leaves the link idle for that call's host time (hundreds of descriptors of a 512 MiB job).
// The first batch is small so the engines start early; each later one doubles, up to `max`,
// and is issued while the ones before it copy (so a job costs log2(max / first) more calls).
//
//   BatchSchedule schedule(/*first=*/8, /*max=*/4096);   // 8, 16, 32, ..., 4096, 4096, ...
//   size_t n = schedule.Next();                          // the limit of the batch being filled
//
// GPU-free, unit-tested. Thread-safety: not thread-safe (one per enqueue).
#ifndef KVOFFLOAD_DAEMON_COPY_CUDA_BATCH_SCHEDULE_H_
#define KVOFFLOAD_DAEMON_COPY_CUDA_BATCH_SCHEDULE_H_

#include <algorithm>
#include <cstddef>

namespace kvoffload::daemon::cuda {

class BatchSchedule {
 public:
  // first == 0 (or >= max): every batch takes up to `max` copies (one call for a job of at most
  // `max` descriptors). max must be > 0.
  BatchSchedule(size_t first, size_t max)
      : max_(max), next_(first == 0 ? max : std::min(first, max)) {}

  // The size limit of the next batch; advances the schedule.
  size_t Next() {
    const size_t n = next_;
    next_ = n >= max_ / 2 ? max_ : n * 2;
    return n;
  }

 private:
  const size_t max_;
  size_t next_;
};

}  // namespace kvoffload::daemon::cuda

#endif  // KVOFFLOAD_DAEMON_COPY_CUDA_BATCH_SCHEDULE_H_
