// When the CUDA backend's completion queue next asks whether a running job's completion event has
// fired (copy path v3: host CPU per job). Polling every job every 10 µs cost a 4 GiB job ~9.5 ms of
// CPU over its 78 ms copy, 58× a 1-block job. The later in a long copy, the less a few µs of
// report delay matter, so the step grows with the job's age: max(floor, elapsed /
// kElapsedFraction), at most kMaxPollInterval. A job is reported at most 1/256 of its duration
// late (a 10 ms job ~40 µs, 0.4 %); a 1-block job polls every `floor` as before; a 78 ms job is
// queried ~1,100 times instead of ~7,800.
//
// Long jobs are not polled at all: a job of kStreamWakeMinBytes or more has its lane's wake stream
// wait for its completion event and then run a host function (cudaLaunchHostFunc, wake_relay.h)
// that wakes the queue — not its own stream, where the host function would hold the next job's
// copies back until it ran (tens of µs a job) — and is queried then and every
// kStreamWakeBackstop (should the function never run: a failed context). The backstop is 100 ms,
// not 10: each wake-up of the queue's thread costs ~60 µs of CPU on the H200's VM (v3_bench's
// CPU per job by thread, run of 76254d3), and a 4 GiB job (80 ms) paid eight of them. 32 MiB
// take ~0.6 ms on the H200's link, where a host function's wake-up (~10-20 µs) is within the
// polls' own lateness; below it the polls' CPU is small (≤ ~60 polls).
//
// Not done, on purpose: a bound from the link rate ("not before bytes / rate"). The rate a job
// reaches depends on its pages and on what else crosses the link, so a rate learned from one job
// can be far below what the next reaches, and that job would be reported late by the difference.
//
// Thread-safety: a pure function of its arguments.
#ifndef KVOFFLOAD_DAEMON_COPY_CUDA_POLL_PACING_H_
#define KVOFFLOAD_DAEMON_COPY_CUDA_POLL_PACING_H_

#include <algorithm>
#include <cstdint>

#include "absl/time/time.h"

namespace kvoffload::daemon::cuda {

inline constexpr int64_t kElapsedFraction = 256;
inline constexpr absl::Duration kMaxPollInterval = absl::Milliseconds(1);
inline constexpr uint64_t kStreamWakeMinBytes = uint64_t{32} << 20;
inline constexpr absl::Duration kStreamWakeBackstop = absl::Milliseconds(100);

// The next time to query a job started at `started`, asked at `now`.
inline absl::Time NextPoll(absl::Time started, absl::Time now, absl::Duration floor) {
  const absl::Duration elapsed = std::max(now - started, absl::ZeroDuration());
  return now + std::clamp(elapsed / kElapsedFraction, floor, std::max(floor, kMaxPollInterval));
}

}  // namespace kvoffload::daemon::cuda

#endif  // KVOFFLOAD_DAEMON_COPY_CUDA_POLL_PACING_H_
