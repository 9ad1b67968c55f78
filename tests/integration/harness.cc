#include "tests/integration/harness.h"

#include <dirent.h>
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
#include "grpcpp/generic/generic_stub.h"
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

absl::StatusOr<std::unique_ptr<DaemonProcess>> DaemonProcess::Start(
    std::vector<std::string> args, std::vector<std::string> wrapper) {
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
  argv.insert(argv.begin(), wrapper.begin(), wrapper.end());
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

namespace {

int64_t StatusField(pid_t pid, const std::string& field, bool kilobytes) {
  FILE* f = fopen(absl::StrCat("/proc/", pid, "/status").c_str(), "r");
  if (f == nullptr) return -1;
  char line[256];
  int64_t value = -1;
  const std::string prefix = field + ":";
  while (fgets(line, sizeof(line), f) != nullptr) {
    if (strncmp(line, prefix.c_str(), prefix.size()) == 0) {
      value = strtoll(line + prefix.size(), nullptr, 10) * (kilobytes ? 1024 : 1);
      break;
    }
  }
  fclose(f);
  return value;
}

}  // namespace

int64_t DaemonProcess::StatusBytes(const std::string& field) const {
  return StatusField(pid(), field, true);
}

int64_t DaemonProcess::StatusCount(const std::string& field) const {
  return StatusField(pid(), field, false);
}

int64_t DaemonProcess::OpenFds() const {
  DIR* dir = opendir(absl::StrCat("/proc/", pid(), "/fd").c_str());
  if (dir == nullptr) return -1;
  int64_t n = 0;
  while (struct dirent* e = readdir(dir)) {
    if (e->d_name[0] != '.') ++n;
  }
  closedir(dir);
  return n;
}

bool DaemonProcess::Serving() {
  auto channel = grpc::CreateChannel(absl::StrCat("unix:", admin_socket()),
                                     grpc::InsecureChannelCredentials());
  grpc::GenericStub stub(channel);
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  // grpc.health.v1.HealthCheckRequest{service: ""} is the empty message; the response
  // HealthCheckResponse{status: SERVING (1)} is the two bytes 0x08 0x01.
  grpc::ByteBuffer request;
  grpc::ByteBuffer response;
  grpc::Slice empty("");
  request = grpc::ByteBuffer(&empty, 1);
  grpc::CompletionQueue cq;
  grpc::Status status;
  auto call = stub.PrepareUnaryCall(&context, "/grpc.health.v1.Health/Check", request, &cq);
  call->StartCall();
  call->Finish(&response, &status, reinterpret_cast<void*>(1));
  void* tag = nullptr;
  bool ok = false;
  if (!cq.Next(&tag, &ok) || !ok || !status.ok()) return false;
  std::vector<grpc::Slice> slices;
  if (!response.Dump(&slices).ok()) return false;
  std::string bytes;
  for (const grpc::Slice& slice : slices) {
    bytes.append(reinterpret_cast<const char*>(slice.begin()), slice.size());
  }
  cq.Shutdown();
  while (cq.Next(&tag, &ok)) {
  }
  return bytes == std::string("\x08\x01", 2);
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

absl::StatusOr<std::unique_ptr<WorkerProcess>> WorkerProcess::Start(
    const std::string& socket, std::vector<std::string> args, const std::string& binary,
    std::vector<std::string> wrapper) {
  std::vector<std::string> argv = {RunfilePath(binary), absl::StrCat("--socket=", socket)};
  argv.insert(argv.end(), args.begin(), args.end());
  argv.insert(argv.begin(), wrapper.begin(), wrapper.end());
  auto process = ChildProcess::Spawn(argv);
  if (!process.ok()) return process.status();
  auto worker = std::unique_ptr<WorkerProcess>(new WorkerProcess());
  worker->process_ = std::move(*process);
  worker->hello_ = worker->process_->ReadLine(60);
  return worker;
}

}  // namespace kvoffload::testing
