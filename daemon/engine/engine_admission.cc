#include "daemon/engine/engine_admission.h"

#include "absl/strings/str_cat.h"

namespace kvoffload::daemon {

absl::Status CheckEngineCount(const std::string& key, size_t engines, uint64_t max_engines) {
  if (engines < max_engines) return absl::OkStatus();
  return absl::ResourceExhaustedError(absl::StrCat("engine ", key, " refused: ", engines,
                                                   " engines exist, the limit is ", max_engines,
                                                   " (--max_engines)"));
}

absl::Status CheckFdHeadroom(const std::string& key, const common::FdUsage& fds,
                             uint64_t min_free_fds) {
  if (fds.soft_limit == UINT64_MAX ||
      (fds.open < fds.soft_limit && fds.soft_limit - fds.open >= min_free_fds)) {
    return absl::OkStatus();
  }
  return absl::ResourceExhaustedError(
      absl::StrCat("engine ", key, " refused: ", fds.open, " of ", fds.soft_limit,
                   " file descriptors (RLIMIT_NOFILE) are open and ", min_free_fds,
                   " must stay free (--min_free_fds); drop idle engines or raise LimitNOFILE"));
}

}  // namespace kvoffload::daemon
