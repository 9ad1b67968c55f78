#include "client/testing/restartable_daemon.h"

#include <signal.h>
#include <stdlib.h>

#include <chrono>
#include <cstdio>
#include <thread>

#include "absl/strings/str_cat.h"
#include "client/daemon_socket.h"

namespace kvoffload::client::testing {
namespace {

// Path of the daemon in the test's runfiles.
std::string DaemonPath() {
  if (const char* dir = getenv("TEST_SRCDIR")) return absl::StrCat(dir, "/kvoffload/daemon/kvoffloadd");
  return "daemon/kvoffloadd";
}

}  // namespace

absl::StatusOr<std::unique_ptr<RestartableDaemon>> RestartableDaemon::Start(
    std::vector<std::string> args) {
  auto daemon = std::unique_ptr<RestartableDaemon>(new RestartableDaemon());
  char dir[] = "/tmp/kvo-rc-XXXXXX";  // short: Unix socket paths are limited to 107 bytes
  if (mkdtemp(dir) == nullptr) return absl::InternalError("mkdtemp failed");
  daemon->dir_ = dir;
  daemon->argv_ = {DaemonPath(),
                   "--backend=host",
                   absl::StrCat("--runtime_dir=", daemon->dir_),
                   "--metrics_address=",
                   "--max_region_bytes=256MiB",
                   "--populate_threads=2",
                   "--log_level=warn"};
  daemon->argv_.insert(daemon->argv_.end(), args.begin(), args.end());
  if (absl::Status s = daemon->Spawn(); !s.ok()) return s;
  return daemon;
}

absl::Status RestartableDaemon::Spawn() {
  auto process = common::ChildProcess::Spawn(argv_);
  if (!process.ok()) return process.status();
  process_ = std::move(*process);
  // The socket file may be a killed daemon's: wait until a connect() is accepted.
  for (int i = 0; i < 2000; ++i) {
    if (CheckDaemonSocket(data_socket()).ok()) return absl::OkStatus();
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return absl::DeadlineExceededError("kvoffloadd did not listen within 10 s");
}

void RestartableDaemon::Kill() {
  if (process_ == nullptr) return;
  process_->Signal(SIGKILL);
  process_->Wait();
  process_.reset();
}

absl::Status RestartableDaemon::Restart() {
  Kill();
  return Spawn();
}

RestartableDaemon::~RestartableDaemon() {
  Kill();
  std::string cmd = absl::StrCat("rm -rf '", dir_, "'");
  if (system(cmd.c_str()) != 0) fprintf(stderr, "could not remove %s\n", dir_.c_str());
}

}  // namespace kvoffload::client::testing
