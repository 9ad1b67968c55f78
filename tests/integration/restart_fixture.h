// Fixtures of the restart tests (durable regions): kvoffloadd under kvoffload-supervise (the fd store
// and restart policy systemd would provide), a scheduler speaking the Engine service directly
// (one per daemon incarnation, so nothing reconnects behind the test's back), and rows whose
// bytes are known from a seed, so every hit after a restart can be verified byte for byte.
//
//   auto daemon = SupervisedDaemon::Start({"--max_region_bytes=1GiB"});
//   RawScheduler scheduler(daemon->data_socket(), engine);
//   ... store ...
//   ASSERT_TRUE(daemon->Kill9().ok());                 // or Restart() (SIGHUP, clean)
//   ASSERT_TRUE(daemon->WaitReady().ok());             // the next daemon, descriptors restored
#ifndef KVOFFLOAD_TESTS_INTEGRATION_RESTART_FIXTURE_H_
#define KVOFFLOAD_TESTS_INTEGRATION_RESTART_FIXTURE_H_

#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/subprocess.h"
#include "kvoffload/v1/kvoffload.grpc.pb.h"
#include "tests/integration/engine_fixture.h"

namespace kvoffload::testing {

// Not thread-safe, except pid() and Kill9(), which a killer thread may call.
class SupervisedDaemon {
 public:
  // kvoffload-supervise -- <daemon_binary> --backend=host --runtime_dir=<fresh dir> ... `args`,
  // returned once the first daemon is ready. `daemon_binary` empty: the tree's kvoffloadd.
  static absl::StatusOr<std::unique_ptr<SupervisedDaemon>> Start(
      std::vector<std::string> args, std::string daemon_binary = "");
  ~SupervisedDaemon();  // SIGTERM to the supervisor (which stops the daemon), then cleanup

  const std::string& runtime_dir() const { return dir_; }
  std::string data_socket() const { return dir_ + "/kvoffload.sock"; }
  std::string admin_socket() const { return dir_ + "/admin.sock"; }
  pid_t pid() const { return daemon_pid_; }

  // SIGHUP: the supervisor stops the daemon (SIGTERM) and starts it again with the stored
  // descriptors, as `systemctl restart` does. Returns when the new one is ready.
  absl::Status Restart();
  // SIGKILL of the daemon; WaitReady() then waits for the one the supervisor starts.
  absl::Status Kill9();
  // Waits for the next "ready" event; returns the time from the call to it.
  absl::StatusOr<absl::Duration> WaitReady(int timeout_s = 60);

  // Events seen so far ("stored name=...", "removed name=...", "started pid=... fds=N", ...).
  const std::vector<std::string>& events() const { return events_; }
  // Descriptors the supervisor passed to the current daemon.
  int fds_at_start() const { return fds_at_start_; }
  // From the supervisor's "started" event of the current daemon to its "ready": exec, restore,
  // sockets (as seen by the test, which reads the events as they come).
  absl::Duration start_to_ready() const { return start_to_ready_; }

  std::unique_ptr<v1::Admin::Stub> AdminStub() const;

 private:
  std::string ReadEvent(int timeout_s);

  std::string dir_;
  std::unique_ptr<common::ChildProcess> supervisor_;
  volatile pid_t daemon_pid_ = -1;
  int fds_at_start_ = 0;
  absl::Time started_at_ = absl::InfinitePast();
  absl::Duration start_to_ready_;
  std::vector<std::string> events_;
};

// The Engine service of one daemon, called directly (no client-side reconnect).
class RawScheduler {
 public:
  RawScheduler(const std::string& socket, const TestEngine& engine);
  absl::StatusOr<v1::OpenEngineResponse> Open(uint64_t region_epoch = 0);
  absl::StatusOr<v1::PrepareStoreResponse> PrepareStore(const std::vector<std::string>& keys);
  absl::Status CompleteStore(const std::vector<std::string>& keys, bool success);
  absl::StatusOr<std::vector<v1::KeyState>> Lookup(const std::vector<std::string>& keys);
  absl::StatusOr<std::vector<uint64_t>> PrepareLoad(const std::vector<std::string>& keys);
  absl::Status CompleteLoad(const std::vector<std::string>& keys);

 private:
  v1::KeysRequest Request(const std::vector<std::string>& keys) const;
  TestEngine engine_;
  std::unique_ptr<v1::Engine::Stub> stub_;
};

absl::Status FromGrpc(const grpc::Status& status);

// True when this test binary is built with a sanitizer (sizes are scaled down then).
bool UnderSanitizer();

}  // namespace kvoffload::testing

#endif  // KVOFFLOAD_TESTS_INTEGRATION_RESTART_FIXTURE_H_
