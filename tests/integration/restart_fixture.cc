#include "tests/integration/restart_fixture.h"

#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "grpcpp/grpcpp.h"
#include "proto/spec_convert.h"

namespace kvoffload::testing {
namespace {

// The value of "key=" in an event line ("started pid=12 fds=2").
int64_t Field(const std::string& line, const std::string& key) {
  const size_t at = line.find(key + "=");
  if (at == std::string::npos) return -1;
  int64_t v = -1;
  const size_t begin = at + key.size() + 1;
  const size_t end = line.find(' ', begin);
  (void)absl::SimpleAtoi(line.substr(begin, end == std::string::npos ? end : end - begin), &v);
  return v;
}

}  // namespace

bool UnderSanitizer() {
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  return true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
  return true;
#else
  return false;
#endif
#else
  return false;
#endif
}

absl::Status FromGrpc(const grpc::Status& status) {
  return absl::Status(static_cast<absl::StatusCode>(status.error_code()), status.error_message());
}

absl::StatusOr<std::unique_ptr<SupervisedDaemon>> SupervisedDaemon::Start(
    std::vector<std::string> args, std::string daemon_binary) {
  auto daemon = std::unique_ptr<SupervisedDaemon>(new SupervisedDaemon());
  char dir[] = "/tmp/kvo-rs-XXXXXX";  // short: Unix socket paths are limited to 107 bytes
  if (mkdtemp(dir) == nullptr) return absl::InternalError("mkdtemp failed");
  daemon->dir_ = dir;
  if (daemon_binary.empty()) {
    daemon_binary = std::filesystem::absolute(RunfilePath("daemon/kvoffloadd")).string();
  }
  std::vector<std::string> argv = {
      std::filesystem::absolute(RunfilePath("daemon/restart/kvoffload-supervise")).string(),
      "--restart_delay_ms=20",
      "--start_limit_burst=1000000",  // the soak kills the daemon right after its starts
      absl::StrCat("--notify_dir=", daemon->dir_),
      "--",
      daemon_binary,
      "--backend=host",
      absl::StrCat("--runtime_dir=", daemon->dir_, "/run"),
      "--metrics_address=",
      "--populate_threads=2",
      "--shutdown_grace_s=2",
      "--log_level=warn"};
  argv.insert(argv.end(), args.begin(), args.end());
  daemon->dir_ += "/run";
  auto process = common::ChildProcess::Spawn(argv);
  if (!process.ok()) return process.status();
  daemon->supervisor_ = std::move(*process);
  absl::StatusOr<absl::Duration> ready = daemon->WaitReady();
  if (!ready.ok()) return ready.status();
  return daemon;
}

SupervisedDaemon::~SupervisedDaemon() {
  if (supervisor_ != nullptr) {
    supervisor_->Signal(SIGTERM);
    // The supervisor stops the daemon (2 s grace) and exits; never leave a daemon behind.
    for (int i = 0; i < 200 && ReadEvent(1) != "stopped"; ++i) {
      if (i == 150 && daemon_pid_ > 0) kill(daemon_pid_, SIGKILL);
    }
    supervisor_->Wait();
  }
  std::filesystem::remove_all(std::filesystem::path(dir_).parent_path());
}

std::string SupervisedDaemon::ReadEvent(int timeout_s) {
  std::string line = supervisor_->ReadLine(timeout_s);
  if (!line.empty()) events_.push_back(line);
  return line;
}

absl::StatusOr<absl::Duration> SupervisedDaemon::WaitReady(int timeout_s) {
  const absl::Time start = absl::Now();
  const absl::Time deadline = start + absl::Seconds(timeout_s);
  while (absl::Now() < deadline) {
    const std::string line = ReadEvent(timeout_s);
    if (line.empty()) break;
    if (absl::StartsWith(line, "started ")) {
      started_at_ = absl::Now();
      daemon_pid_ = static_cast<pid_t>(Field(line, "pid"));
      fds_at_start_ = static_cast<int>(Field(line, "fds"));
    } else if (absl::StartsWith(line, "ready ")) {
      start_to_ready_ = absl::Now() - started_at_;
      return absl::Now() - start;
    } else if (line == "stopped") {
      return absl::InternalError("the supervisor stopped (the daemon exited 0 on its own)");
    }
  }
  return absl::DeadlineExceededError(absl::StrCat("no ready event in ", timeout_s, " s"));
}

absl::Status SupervisedDaemon::Restart() {
  supervisor_->Signal(SIGHUP);
  return WaitReady().status();
}

absl::Status SupervisedDaemon::Kill9() {
  const pid_t pid = daemon_pid_;
  if (pid <= 0 || kill(pid, SIGKILL) != 0) return absl::InternalError("no daemon to kill");
  return absl::OkStatus();
}

std::unique_ptr<v1::Admin::Stub> SupervisedDaemon::AdminStub() const {
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  return v1::Admin::NewStub(grpc::CreateCustomChannel(absl::StrCat("unix:", admin_socket()),
                                                      grpc::InsecureChannelCredentials(), args));
}

namespace {

// A channel of its own: gRPC shares subchannels between channels to one target by default, and
// a new daemon on the same socket path would first get the dead daemon's connection.
std::shared_ptr<grpc::Channel> FreshChannel(const std::string& socket) {
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  return grpc::CreateCustomChannel(absl::StrCat("unix:", socket),
                                   grpc::InsecureChannelCredentials(), args);
}

void Deadline(grpc::ClientContext* context) {
  context->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(20));
}

}  // namespace

RawScheduler::RawScheduler(const std::string& socket, const TestEngine& engine)
    : engine_(engine), stub_(v1::Engine::NewStub(FreshChannel(socket))) {}

absl::StatusOr<v1::OpenEngineResponse> RawScheduler::Open(uint64_t region_epoch) {
  v1::OpenEngineRequest request;
  SpecToProto(engine_.Spec(), request.mutable_spec());
  request.set_region_epoch(region_epoch);
  v1::OpenEngineResponse response;
  grpc::ClientContext context;
  Deadline(&context);
  grpc::Status s = stub_->OpenEngine(&context, request, &response);
  if (!s.ok()) return FromGrpc(s);
  return response;
}

v1::KeysRequest RawScheduler::Request(const std::vector<std::string>& keys) const {
  v1::KeysRequest request;
  request.set_engine_id(engine_.engine_id);
  request.set_dp_rank(engine_.dp_rank);
  for (const std::string& k : keys) request.add_keys(k);
  return request;
}

absl::StatusOr<v1::PrepareStoreResponse> RawScheduler::PrepareStore(
    const std::vector<std::string>& keys) {
  v1::PrepareStoreResponse response;
  grpc::ClientContext context;
  Deadline(&context);
  grpc::Status s = stub_->PrepareStore(&context, Request(keys), &response);
  if (!s.ok()) return FromGrpc(s);
  return response;
}

absl::Status RawScheduler::CompleteStore(const std::vector<std::string>& keys, bool success) {
  v1::CompleteStoreRequest request;
  request.set_engine_id(engine_.engine_id);
  request.set_dp_rank(engine_.dp_rank);
  for (const std::string& k : keys) request.add_keys(k);
  request.set_success(success);
  v1::Empty response;
  grpc::ClientContext context;
  Deadline(&context);
  return FromGrpc(stub_->CompleteStore(&context, request, &response));
}

absl::StatusOr<std::vector<v1::KeyState>> RawScheduler::Lookup(
    const std::vector<std::string>& keys) {
  v1::LookupResponse response;
  grpc::ClientContext context;
  Deadline(&context);
  grpc::Status s = stub_->Lookup(&context, Request(keys), &response);
  if (!s.ok()) return FromGrpc(s);
  std::vector<v1::KeyState> states;
  for (int state : response.states()) states.push_back(static_cast<v1::KeyState>(state));
  return states;
}

absl::StatusOr<std::vector<uint64_t>> RawScheduler::PrepareLoad(
    const std::vector<std::string>& keys) {
  v1::PrepareLoadResponse response;
  grpc::ClientContext context;
  Deadline(&context);
  grpc::Status s = stub_->PrepareLoad(&context, Request(keys), &response);
  if (!s.ok()) return FromGrpc(s);
  return std::vector<uint64_t>(response.rows().begin(), response.rows().end());
}

absl::Status RawScheduler::CompleteLoad(const std::vector<std::string>& keys) {
  v1::Empty response;
  grpc::ClientContext context;
  Deadline(&context);
  return FromGrpc(stub_->CompleteLoad(&context, Request(keys), &response));
}

}  // namespace kvoffload::testing
