// Names the calling thread for the kernel (/proc/PID/task/TID/comm), so `top -H`, `perf` and the
// CPU bench (tests/bench/gpu/v3_bench.py) tell the daemon's threads apart from gRPC's and the CUDA
// driver's. Every long-lived daemon thread names itself "kvo-<role>" first thing.
//
// Thread-safety: names only the calling thread.
#ifndef KVOFFLOAD_COMMON_THREAD_NAME_H_
#define KVOFFLOAD_COMMON_THREAD_NAME_H_

#include <string>

namespace kvoffload::common {

// The kernel keeps 15 bytes of a name; longer names are cut there, not refused.
inline constexpr size_t kMaxThreadNameBytes = 15;

void SetThreadName(const std::string& name);
// The calling thread's name as the kernel has it ("" if it cannot be read).
std::string ThreadName();

}  // namespace kvoffload::common

#endif  // KVOFFLOAD_COMMON_THREAD_NAME_H_
