#include "common/logging.h"

#include "absl/base/const_init.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "spdlog/sinks/stdout_color_sinks.h"

namespace kvoffload::common {

spdlog::logger* Logger(const std::string& component) {
  const std::string name = "kvoffload." + component;
  // spdlog's get-then-create is not atomic, and creating a name that already exists throws
  // (it never returns null), so two threads asking for a new component at once are serialised.
  static absl::Mutex mu(absl::kConstInit);
  absl::MutexLock lock(&mu);
  std::shared_ptr<spdlog::logger> logger = spdlog::get(name);
  if (logger == nullptr) {
    // stderr: journald picks it up under systemd; stdout stays free for CLI output.
    logger = spdlog::stderr_color_mt(name);
  }
  // spdlog's registry owns the logger for the life of the process.
  return logger.get();
}

absl::Status SetLogLevel(const std::string& level) {
  spdlog::level::level_enum parsed = spdlog::level::from_str(level);
  if (parsed == spdlog::level::off && level != "off") {
    return absl::InvalidArgumentError(absl::StrCat(
        "unknown log level '", level, "' (want trace, debug, info, warn, error or off)"));
  }
  spdlog::set_level(parsed);
  return absl::OkStatus();
}

}  // namespace kvoffload::common
