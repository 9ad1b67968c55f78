// Named spdlog loggers, one per component (Envoy's logger.h), for the daemon and its tools.
// Callers never install sinks: the daemon configures the default sink once in main. The client
// library does not log at all (its errors are Status values the host process decides about).
//
//   static auto* log = kvoffload::common::Logger("region");
//   log->info("region of {} bytes ready", bytes);
#ifndef KVOFFLOAD_COMMON_LOGGING_H_
#define KVOFFLOAD_COMMON_LOGGING_H_

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "spdlog/spdlog.h"

namespace kvoffload::common {

// Returns the logger named `component`, creating it with the default sinks on first use.
// Thread-safe. The returned pointer stays valid for the life of the process.
spdlog::logger* Logger(const std::string& component);

// The level loggers start at (kvoffloadd --log_level's default).
inline constexpr char kDefaultLogLevel[] = "info";

// Sets the level of every logger ("trace", "debug", "info", "warn", "error", "off").
absl::Status SetLogLevel(const std::string& level);

}  // namespace kvoffload::common

#endif  // KVOFFLOAD_COMMON_LOGGING_H_
