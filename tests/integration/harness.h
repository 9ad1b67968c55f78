// Integration-test harness: runs the real kvoffloadd binary on a temporary runtime directory and
// real kvoffload_host_worker processes, each driven line by line through pipes.
//
//   auto daemon = DaemonProcess::Start({"--max_region_bytes=64MiB"});
//   auto worker = WorkerProcess::Start(daemon->data_socket(), {"--mp_rank=0"});
//   EXPECT_EQ(worker->Command("store 1 3 0"), "finished 1 0 32768");
#ifndef KVOFFLOAD_TESTS_INTEGRATION_HARNESS_H_
#define KVOFFLOAD_TESTS_INTEGRATION_HARNESS_H_

#include <sys/types.h>

#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/subprocess.h"
#include "kvoffload/v1/kvoffload.grpc.pb.h"

namespace kvoffload::testing {

using common::ChildProcess;

// Path of a binary in the test's runfiles ("daemon/kvoffloadd").
std::string RunfilePath(const std::string& relative);

class DaemonProcess {
 public:
  // Starts kvoffloadd --backend=host --runtime_dir=<fresh /tmp dir> --metrics_address= plus
  // `args`, and waits until both sockets exist. `wrapper` (e.g. {"prlimit", "--nofile=200"})
  // execs the daemon, keeping its pid.
  static absl::StatusOr<std::unique_ptr<DaemonProcess>> Start(
      std::vector<std::string> args = {}, std::vector<std::string> wrapper = {});
  ~DaemonProcess();

  const std::string& runtime_dir() const { return dir_; }
  std::string data_socket() const { return dir_ + "/kvoffload.sock"; }
  std::string admin_socket() const { return dir_ + "/admin.sock"; }
  // SIGTERM and wait; returns the exit code.
  int Stop();

  pid_t pid() const { return process_->pid(); }
  // A "<field>: N kB" line of /proc/<pid>/status (VmHWM, VmRSS), in bytes; -1 if absent.
  int64_t StatusBytes(const std::string& field) const;
  // Lines like "Threads: N" of /proc/<pid>/status; -1 if absent.
  int64_t StatusCount(const std::string& field) const;
  // Entries of /proc/<pid>/fd.
  int64_t OpenFds() const;
  // grpc.health.v1 Health/Check on the admin socket: true when SERVING.
  bool Serving();

  absl::StatusOr<v1::StatsResponse> Stats();
  absl::StatusOr<v1::EngineStats> EngineStats(const std::string& engine_id, uint32_t dp_rank = 0);
  std::unique_ptr<v1::Admin::Stub> AdminStub();

 private:
  std::string dir_;
  std::unique_ptr<ChildProcess> process_;
};

class WorkerProcess {
 public:
  // Starts kvoffload_host_worker --socket=<socket> plus `args`; returns it after its first line,
  // which is available as `hello()` ("registered slot=..." or "refused CODE message").
  // `wrapper` (e.g. {"setpriv", "--reuid=65534", ...}) execs the worker, keeping its pid.
  static absl::StatusOr<std::unique_ptr<WorkerProcess>> Start(
      const std::string& socket, std::vector<std::string> args,
      const std::string& binary = "client/host/kvoffload_host_worker",
      std::vector<std::string> wrapper = {});
  const std::string& hello() const { return hello_; }
  std::string Command(const std::string& line, int timeout_s = 60) {
    return process_->Command(line, timeout_s);
  }
  std::string ReadLine(int timeout_s = 60) { return process_->ReadLine(timeout_s); }
  ChildProcess& process() { return *process_; }

 private:
  std::string hello_;
  std::unique_ptr<ChildProcess> process_;
};

}  // namespace kvoffload::testing

#endif  // KVOFFLOAD_TESTS_INTEGRATION_HARNESS_H_
