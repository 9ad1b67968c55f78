#include "daemon/flag_reload.h"

#include <fstream>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "common/logging.h"

namespace kvoffload::daemon {

absl::StatusOr<std::string> ReadFlagFromFile(const std::string& path, const std::string& name) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot read flagfile ", path));
  const std::string prefix = absl::StrCat("--", name, "=");
  std::string line, value;
  bool found = false;
  while (std::getline(in, line)) {
    absl::string_view view(line);
    if (absl::ConsumePrefix(&view, prefix)) {
      value = std::string(view);
      found = true;
    }
  }
  if (!found) return absl::NotFoundError(absl::StrCat(prefix, " not in ", path));
  return value;
}

void ReloadLogLevel(int argc, char** argv) {
  spdlog::logger* log = common::Logger("daemon");
  bool applied = false;
  for (int i = 1; i < argc; ++i) {
    absl::string_view arg(argv[i]);
    if (!absl::ConsumePrefix(&arg, "--flagfile=")) continue;
    auto level = ReadFlagFromFile(std::string(arg), "log_level");
    if (!level.ok()) continue;
    absl::Status set = common::SetLogLevel(*level);
    if (set.ok()) {
      log->info("SIGHUP: log level is now {}", *level);
      applied = true;
    } else {
      log->error("SIGHUP: {}", set.ToString());
    }
  }
  if (!applied) log->info("SIGHUP: no --log_level in a --flagfile; level unchanged");
}

}  // namespace kvoffload::daemon
