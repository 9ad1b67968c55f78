#include "tests/integration/harness.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <thread>

#include "absl/strings/str_cat.h"
#include "grpcpp/grpcpp.h"

namespace kvoffload::testing {

std::string RunfilePath(const std::string& relative) {
  // Bazel runs tests in the runfiles tree of the workspace.
  if (const char* dir = getenv("TEST_SRCDIR")) {
    std::string path = absl::StrCat(dir, "/kvoffload/", relative);
    if (access(path.c_str(), X_OK) == 0) return path;
  }
  return relative;
}

absl::StatusOr<std::unique_ptr<DaemonProcess>> DaemonProcess::Start(std::vector<std::string> args) {
  auto daemon = std::unique_ptr<DaemonProcess>(new DaemonProcess());
  char dir[] = "/tmp/kvo-it-XXXXXX";  // short: Unix socket paths are limited to 107 bytes
  if (mkdtemp(dir) == nullptr) return absl::InternalError("mkdtemp failed");
  daemon->dir_ = dir;
  std::vector<std::string> argv = {RunfilePath("daemon/kvoffloadd"),
                                   "--backend=host",
                                   absl::StrCat("--runtime_dir=", daemon->dir_),
                                   "--metrics_address=",
                                   "--max_region_bytes=256MiB",
                                   "--populate_threads=2",
                                   "--log_level=warn"};
  argv.insert(argv.end(), args.begin(), args.end());
  auto process = ChildProcess::Spawn(argv);
  if (!process.ok()) return process.status();
  daemon->process_ = std::move(*process);
  for (int i = 0; i < 1000; ++i) {
    struct stat st;
    if (stat(daemon->data_socket().c_str(), &st) == 0 &&
        stat(daemon->admin_socket().c_str(), &st) == 0) {
      return daemon;
    }
    int status = 0;
    if (waitpid(daemon->process_->pid(), &status, WNOHANG) > 0) {
      return absl::InternalError("kvoffloadd exited at start");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return absl::DeadlineExceededError("kvoffloadd did not create its sockets in 10 s");
}

DaemonProcess::~DaemonProcess() {
  process_.reset();
  std::string cmd = absl::StrCat("rm -rf '", dir_, "'");
  if (system(cmd.c_str()) != 0) fprintf(stderr, "could not remove %s\n", dir_.c_str());
}

int DaemonProcess::Stop() {
  process_->Signal(SIGTERM);
  return process_->Wait();
}

std::unique_ptr<v1::Admin::Stub> DaemonProcess::AdminStub() {
  return v1::Admin::NewStub(grpc::CreateChannel(absl::StrCat("unix:", admin_socket()),
                                                grpc::InsecureChannelCredentials()));
}

absl::StatusOr<v1::StatsResponse> DaemonProcess::Stats() {
  grpc::ClientContext context;
  v1::StatsRequest request;
  v1::StatsResponse response;
  grpc::Status status = AdminStub()->Stats(&context, request, &response);
  if (!status.ok()) {
    return absl::Status(static_cast<absl::StatusCode>(status.error_code()), status.error_message());
  }
  return response;
}

absl::StatusOr<v1::EngineStats> DaemonProcess::EngineStats(const std::string& engine_id,
                                                           uint32_t dp_rank) {
  auto stats = Stats();
  if (!stats.ok()) return stats.status();
  for (const v1::EngineStats& e : stats->engines()) {
    if (e.engine_id() == engine_id && e.dp_rank() == dp_rank) return e;
  }
  return absl::NotFoundError(absl::StrCat("no engine ", engine_id, "/", dp_rank, " in stats"));
}

absl::StatusOr<std::unique_ptr<WorkerProcess>> WorkerProcess::Start(const std::string& socket,
                                                                    std::vector<std::string> args,
                                                                    const std::string& binary) {
  std::vector<std::string> argv = {RunfilePath(binary), absl::StrCat("--socket=", socket)};
  argv.insert(argv.end(), args.begin(), args.end());
  auto process = ChildProcess::Spawn(argv);
  if (!process.ok()) return process.status();
  auto worker = std::unique_ptr<WorkerProcess>(new WorkerProcess());
  worker->process_ = std::move(*process);
  worker->hello_ = worker->process_->ReadLine(60);
  return worker;
}

}  // namespace kvoffload::testing
