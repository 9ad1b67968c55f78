#include "daemon/copy/cuda/job_times.h"

#include <chrono>

#include "absl/strings/str_format.h"

namespace kvoffload::daemon::cuda {
namespace {

// Microseconds from `from` to `to`, -1 when either step was not reached.
double Interval(int64_t from, int64_t to) {
  if (from == 0 || to == 0) return -1;
  return static_cast<double>(to - from) / 1e3;
}

}  // namespace

int64_t JobClockNanos() {
  const int64_t ns = std::chrono::duration_cast<std::chrono::nanoseconds>(
                         std::chrono::steady_clock::now().time_since_epoch())
                         .count();
  return ns == 0 ? 1 : ns;
}

std::string DescribeJobTimes(const JobTimes& t, const char* direction, uint64_t bytes, bool ok) {
  // A job refused before its copy: its verdict follows its plan (or its arrival) directly.
  const int64_t before_verdict = t.observed != 0 ? t.observed
                                 : t.enqueued != 0 ? t.enqueued
                                 : t.planned != 0  ? t.planned
                                                   : t.received;
  return absl::StrFormat(
      "job timing: %s bytes=%d copies=%d batches=%d plan_us=%.1f wait_us=%.1f first_us=%.1f "
      "enqueue_us=%.1f copy_us=%.1f verdict_us=%.1f total_us=%.1f ok=%d received_ns=%d "
      "reported_ns=%d",
      direction, bytes, t.copies, t.batches, Interval(t.received, t.planned),
      Interval(t.planned, t.enqueue), Interval(t.enqueue, t.first),
      Interval(t.enqueue, t.enqueued), Interval(t.enqueued, t.observed),
      Interval(before_verdict, t.reported), Interval(t.received, t.reported), ok ? 1 : 0,
      t.received, t.reported);
}

}  // namespace kvoffload::daemon::cuda
