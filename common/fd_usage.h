// FdUsage: how many file descriptors this process holds and may hold (RLIMIT_NOFILE), so the
// daemon can refuse new engines while descriptors remain for accept() and worker memory.
//
//   ASSIGN_OR_RETURN(common::FdUsage fds, common::CurrentFdUsage());
//   if (fds.open + reserve > fds.soft_limit) return absl::ResourceExhaustedError(...);
#ifndef KVOFFLOAD_COMMON_FD_USAGE_H_
#define KVOFFLOAD_COMMON_FD_USAGE_H_

#include <cstdint>

#include "absl/status/statusor.h"

namespace kvoffload::common {

struct FdUsage {
  uint64_t open = 0;        // entries of /proc/self/fd (O(open) to count; call it rarely)
  uint64_t soft_limit = 0;  // RLIMIT_NOFILE soft limit; UINT64_MAX when unlimited
  uint64_t hard_limit = 0;
};

absl::StatusOr<FdUsage> CurrentFdUsage();

// Raises the soft RLIMIT_NOFILE to the hard limit (systemd's default is 1024 soft, 524288
// hard); returns the soft limit in force afterwards.
absl::StatusOr<uint64_t> RaiseFdSoftLimit();

}  // namespace kvoffload::common

#endif  // KVOFFLOAD_COMMON_FD_USAGE_H_
