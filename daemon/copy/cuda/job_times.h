// JobTimes: when a job passed each step of the CUDA backend (copy path v3's fixed cost per job),
// read from the steady clock — one clock read a step, nothing else on the copy's path. A job is
// described in one line (DescribeJobTimes) at debug level once it has been reported, so the
// log of `--log_level=debug` gives, per job:
//   received   CudaCopyBackend::Submit entered (the engine has validated the part, the index
//              begun its copy)
//   planned    descriptor table built, path chosen
//   enqueue    its worker's event seen fired (at once for most jobs): enqueuing begins (the
//              lane's mutex, then the first copy call)
//   first      the first cudaMemcpyBatchAsync returned (the copy engines may start from here)
//   enqueued   the last copy call and the completion event record returned
//   observed   the completion queue saw the completion event done (polled every 10 µs)
//   reported   the engine's verdict callback returned (vote counted, verdict handed to the
//              worker's session writer)
// tests/bench/gpu/fixed_cost.py parses these lines (keep the key=value format).
//
// GPU-free, unit-tested. Thread-safety: a JobTimes belongs to its job (written by whichever
// thread moves the job on, one at a time).
#ifndef KVOFFLOAD_DAEMON_COPY_CUDA_JOB_TIMES_H_
#define KVOFFLOAD_DAEMON_COPY_CUDA_JOB_TIMES_H_

#include <cstdint>
#include <string>

namespace kvoffload::daemon::cuda {

// Nanoseconds of the steady clock (0 is never a reading: 0 marks a step not reached).
int64_t JobClockNanos();

struct JobTimes {
  int64_t received = 0;
  int64_t planned = 0;
  int64_t enqueue = 0;
  int64_t first = 0;
  int64_t enqueued = 0;
  int64_t observed = 0;
  int64_t reported = 0;
  uint64_t copies = 0;   // copy descriptors issued (segments, split at registration chunks)
  uint64_t batches = 0;  // cudaMemcpyBatchAsync calls (or page-by-page flushes)
};

// "job timing: store bytes=536870912 copies=256 batches=6 plan_us=3.1 wait_us=0.4
// first_us=12.0 enqueue_us=310.2 copy_us=9512.7 verdict_us=21.3 total_us=9860.1 ok=1
// received_ns=... reported_ns=...":
// each *_us is the time from one step to the next (received→planned→enqueue→first→enqueued
// (enqueue_us is enqueue→enqueued)→observed→reported); a step not reached gives -1 for the
// intervals it bounds (a job refused before its copy has only plan_us and verdict_us).
// received_ns and reported_ns are the two ends as clock readings (CLOCK_MONOTONIC, the clock of
// Python's time.monotonic_ns()), so a client on the same host splits the time outside the
// backend into its way in (submit → received) and its way out (reported → woken).
std::string DescribeJobTimes(const JobTimes& t, const char* direction, uint64_t bytes, bool ok);

}  // namespace kvoffload::daemon::cuda

#endif  // KVOFFLOAD_DAEMON_COPY_CUDA_JOB_TIMES_H_
