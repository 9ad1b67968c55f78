#include "common/fd_usage.h"

#include <dirent.h>
#include <errno.h>
#include <sys/resource.h>

#include "common/errno_status.h"

namespace kvoffload::common {
namespace {

uint64_t Limit(rlim_t value) { return value == RLIM_INFINITY ? UINT64_MAX : value; }

}  // namespace

absl::StatusOr<FdUsage> CurrentFdUsage() {
  FdUsage usage;
  struct rlimit limit;
  if (getrlimit(RLIMIT_NOFILE, &limit) != 0) return ErrnoStatus(errno, "getrlimit(RLIMIT_NOFILE)");
  usage.soft_limit = Limit(limit.rlim_cur);
  usage.hard_limit = Limit(limit.rlim_max);
  DIR* dir = opendir("/proc/self/fd");
  if (dir == nullptr) return ErrnoStatus(errno, "opendir /proc/self/fd");
  while (struct dirent* entry = readdir(dir)) {
    if (entry->d_name[0] != '.') ++usage.open;
  }
  closedir(dir);
  // The directory stream itself held one descriptor while counting.
  if (usage.open > 0) --usage.open;
  return usage;
}

absl::StatusOr<uint64_t> RaiseFdSoftLimit() {
  struct rlimit limit;
  if (getrlimit(RLIMIT_NOFILE, &limit) != 0) return ErrnoStatus(errno, "getrlimit(RLIMIT_NOFILE)");
  if (limit.rlim_cur != limit.rlim_max) {
    limit.rlim_cur = limit.rlim_max;
    if (setrlimit(RLIMIT_NOFILE, &limit) != 0) {
      return ErrnoStatus(errno, "setrlimit(RLIMIT_NOFILE)");
    }
  }
  return Limit(limit.rlim_cur);
}

}  // namespace kvoffload::common
