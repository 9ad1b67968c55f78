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

absl::StatusOr<std::unique_ptr<ChildProcess>> ChildProcess::Spawn(
    const std::vector<std::string>& argv) {
  int in[2], out[2];
  if (pipe2(in, O_CLOEXEC) != 0 || pipe2(out, O_CLOEXEC) != 0) {
    return absl::InternalError("pipe failed");
  }
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  pid_t pid = fork();
  if (pid < 0) return absl::InternalError("fork failed");
  if (pid == 0) {
    dup2(in[0], 0);
    dup2(out[1], 1);
    execv(args[0], args.data());
    _exit(127);
  }
  close(in[0]);
  close(out[1]);
  auto child = std::unique_ptr<ChildProcess>(new ChildProcess());
  child->pid_ = pid;
  child->in_fd_ = in[1];
  child->out_fd_ = out[0];
  return child;
}

ChildProcess::~ChildProcess() {
  if (!exited_ && pid_ > 0) {
    kill(pid_, SIGKILL);
    Wait();
  }
  if (in_fd_ >= 0) close(in_fd_);
  if (out_fd_ >= 0) close(out_fd_);
}

std::string ChildProcess::ReadLine(int timeout_s) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(timeout_s);
  for (;;) {
    size_t nl = buffer_.find('\n');
    if (nl != std::string::npos) {
      std::string line = buffer_.substr(0, nl);
      buffer_.erase(0, nl + 1);
      return line;
    }
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) return "";
    pollfd p{out_fd_, POLLIN, 0};
    if (poll(&p, 1, static_cast<int>(left.count())) <= 0) return "";
    char chunk[4096];
    ssize_t n = read(out_fd_, chunk, sizeof(chunk));
    if (n <= 0) return "";
    buffer_.append(chunk, n);
  }
}

std::string ChildProcess::Command(const std::string& line, int timeout_s) {
  std::string data = line + "\n";
  if (write(in_fd_, data.data(), data.size()) != static_cast<ssize_t>(data.size())) return "";
  return ReadLine(timeout_s);
}

void ChildProcess::Signal(int signal) {
  if (!exited_) kill(pid_, signal);
}

int ChildProcess::Wait() {
  if (exited_) return exit_code_;
  int status = 0;
  waitpid(pid_, &status, 0);
  exited_ = true;
  exit_code_ = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return exit_code_;
}

absl::StatusOr<std::unique_ptr<DaemonProcess>> DaemonProcess::Start(std::vector<std::string> args) {
  auto daemon = std::unique_ptr<DaemonProcess>(new DaemonProcess());
  char dir[] = "/tmp/kvo-it-XXXXXX";  // short: Unix socket paths are limited to 107 bytes
  if (mkdtemp(dir) == nullptr) return absl::InternalError("mkdtemp failed");
  daemon->dir_ = dir;
  std::vector<std::string> argv = {RunfilePath("daemon/kvoffloadd"), "--backend=host",
                                   absl::StrCat("--runtime_dir=", daemon->dir_),
                                   "--metrics_address=", "--max_region_bytes=256MiB",
                                   "--populate_threads=2", "--log_level=warn"};
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
  (void)system(cmd.c_str());
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
    return absl::Status(static_cast<absl::StatusCode>(status.error_code()),
                        status.error_message());
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
                                                                    std::vector<std::string> args) {
  std::vector<std::string> argv = {RunfilePath("tests/integration/test_worker"),
                                   absl::StrCat("--socket=", socket)};
  argv.insert(argv.end(), args.begin(), args.end());
  auto process = ChildProcess::Spawn(argv);
  if (!process.ok()) return process.status();
  auto worker = std::unique_ptr<WorkerProcess>(new WorkerProcess());
  worker->process_ = std::move(*process);
  worker->hello_ = worker->process_->ReadLine(60);
  return worker;
}

}  // namespace kvoffload::testing
