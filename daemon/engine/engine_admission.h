// Engine admission by count and descriptors: whether this node may create one more engine
// (EngineRegistry, before any memory is reserved). An engine holds a memfd and a mapping, and its
// workers' connections and memory need more descriptors; refusing an engine while descriptors
// remain keeps accept() working, so clients can still connect and clean up (drop, cleanup).
// (The node cap on memory is EngineResources' rule, engine_resources.h.)
//
//   RETURN_IF_ERROR(CheckEngineCount(key, table.size(), options.max_engines));
//   ASSIGN_OR_RETURN(common::FdUsage fds, common::CurrentFdUsage());  // O(open descriptors)
//   RETURN_IF_ERROR(CheckFdHeadroom(key, fds, options.min_free_fds));
//
// Thread-safety: plain functions of their arguments.
#ifndef KVOFFLOAD_DAEMON_ENGINE_ENGINE_ADMISSION_H_
#define KVOFFLOAD_DAEMON_ENGINE_ENGINE_ADMISSION_H_

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "common/fd_usage.h"

namespace kvoffload::daemon {

// RESOURCE_EXHAUSTED (naming --max_engines) when `engines` exist already and that is the limit.
absl::Status CheckEngineCount(const std::string& key, size_t engines, uint64_t max_engines);

// RESOURCE_EXHAUSTED (naming --min_free_fds) when fewer than `min_free_fds` descriptors would stay
// free below the soft RLIMIT_NOFILE; an unlimited soft limit never refuses.
absl::Status CheckFdHeadroom(const std::string& key, const common::FdUsage& fds,
                             uint64_t min_free_fds);

}  // namespace kvoffload::daemon

#endif  // KVOFFLOAD_DAEMON_ENGINE_ENGINE_ADMISSION_H_
