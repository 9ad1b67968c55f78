// SIGHUP support: re-reads --log_level from the command line's --flagfile (if any), so an
// operator can change verbosity without a restart: edit the flagfile, `systemctl reload`.
#ifndef KVOFFLOAD_DAEMON_FLAG_RELOAD_H_
#define KVOFFLOAD_DAEMON_FLAG_RELOAD_H_

#include <string>

#include "absl/status/statusor.h"

namespace kvoffload::daemon {

// The last value of `--name=` in the flag file's lines; NOT_FOUND when absent.
absl::StatusOr<std::string> ReadFlagFromFile(const std::string& path, const std::string& name);

// Applies --log_level from every --flagfile of argv (later ones win); logs what it did.
void ReloadLogLevel(int argc, char** argv);

}  // namespace kvoffload::daemon

#endif  // KVOFFLOAD_DAEMON_FLAG_RELOAD_H_
