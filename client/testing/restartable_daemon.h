// RestartableDaemon: the real kvoffloadd (host backend) on a runtime directory that outlives it,
// so a test can kill it (SIGKILL, as a crash) and start another on the same socket path, as a
// restart under systemd would. Tests of the clients' reconnect paths (testonly).
//
//   ASSERT_OK_AND_ASSIGN(auto daemon, RestartableDaemon::Start());
//   ... clients on daemon->data_socket() ...
//   daemon->Kill();
//   ASSERT_TRUE(daemon->Restart().ok());
//
// Not thread-safe. Owns the child process (killed on destruction) and the directory (removed).
#ifndef KVOFFLOAD_CLIENT_TESTING_RESTARTABLE_DAEMON_H_
#define KVOFFLOAD_CLIENT_TESTING_RESTARTABLE_DAEMON_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/subprocess.h"

namespace kvoffload::client::testing {

class RestartableDaemon {
 public:
  // kvoffloadd --backend=host --runtime_dir=<fresh /tmp dir> plus `args`; returns once its data
  // socket accepts connections.
  static absl::StatusOr<std::unique_ptr<RestartableDaemon>> Start(
      std::vector<std::string> args = {});
  ~RestartableDaemon();
  RestartableDaemon(const RestartableDaemon&) = delete;
  RestartableDaemon& operator=(const RestartableDaemon&) = delete;

  std::string data_socket() const { return dir_ + "/kvoffload.sock"; }
  std::string admin_socket() const { return dir_ + "/admin.sock"; }

  void Kill();              // SIGKILL and reap; the socket files stay, nobody listens on them
  absl::Status Restart();   // a new daemon on the same directory (Kill first if running)

 private:
  RestartableDaemon() = default;
  absl::Status Spawn();

  std::string dir_;
  std::vector<std::string> argv_;
  std::unique_ptr<common::ChildProcess> process_;
};

}  // namespace kvoffload::client::testing

#endif  // KVOFFLOAD_CLIENT_TESTING_RESTARTABLE_DAEMON_H_
