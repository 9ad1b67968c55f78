// The systemd readiness protocol (deploy/kvoffloadd.service is Type=notify, NotifyAccess=main):
// the real kvoffloadd binary, NOTIFY_SOCKET pointing at a datagram socket of the test. READY=1
// must come from the main process once both sockets exist, STOPPING=1 on SIGTERM before a clean
// exit, and no READY=1 at all when startup fails.
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/integration/harness.h"

extern char** environ;

namespace kvoffload::testing {
namespace {

struct Notice {
  std::string text;
  pid_t sender = 0;  // from SCM_CREDENTIALS
};

// A bound AF_UNIX datagram socket in a fresh /tmp directory, as systemd's notify socket.
class NotifySocket {
 public:
  NotifySocket() {
    char pattern[] = "/tmp/kvo-notify.XXXXXX";  // short: Unix socket paths are limited
    dir_ = mkdtemp(pattern);
    path_ = dir_ + "/notify";
    fd_ = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::strncpy(addr.sun_path, path_.c_str(), sizeof(addr.sun_path) - 1);
    EXPECT_EQ(bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0) << strerror(errno);
    const int on = 1;
    EXPECT_EQ(setsockopt(fd_, SOL_SOCKET, SO_PASSCRED, &on, sizeof(on)), 0);
  }
  ~NotifySocket() {
    close(fd_);
    std::filesystem::remove_all(dir_);
  }
  const std::string& dir() const { return dir_; }
  const std::string& path() const { return path_; }

  // The next datagram, or nullopt after `timeout`.
  std::optional<Notice> Receive(std::chrono::milliseconds timeout) {
    pollfd p{fd_, POLLIN, 0};
    if (poll(&p, 1, static_cast<int>(timeout.count())) != 1) return std::nullopt;
    char data[4096];
    alignas(cmsghdr) char control[CMSG_SPACE(sizeof(ucred))];
    iovec iov{data, sizeof(data)};
    msghdr msg{};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control;
    msg.msg_controllen = sizeof(control);
    const ssize_t n = recvmsg(fd_, &msg, 0);
    if (n < 0) return std::nullopt;
    Notice notice;
    notice.text.assign(data, n);
    for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr; c = CMSG_NXTHDR(&msg, c)) {
      if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_CREDENTIALS) {
        ucred cred;
        std::memcpy(&cred, CMSG_DATA(c), sizeof(cred));
        notice.sender = cred.pid;
      }
    }
    return notice;
  }

  // Datagrams until one contains `field` (e.g. "READY=1"); every one is appended to `seen`.
  std::optional<Notice> WaitFor(const std::string& field, std::vector<Notice>* seen,
                                std::chrono::seconds timeout = std::chrono::seconds(30)) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (std::chrono::steady_clock::now() < deadline) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - std::chrono::steady_clock::now());
      std::optional<Notice> notice = Receive(left);
      if (!notice) break;
      seen->push_back(*notice);
      if (HasField(notice->text, field)) return notice;
    }
    return std::nullopt;
  }

  static bool HasField(const std::string& text, const std::string& field) {
    return absl::StartsWith(text, field + "\n") || text == field ||
           absl::StrContains(text, "\n" + field + "\n") || absl::EndsWith(text, "\n" + field);
  }

 private:
  std::string dir_;
  std::string path_;
  int fd_ = -1;
};

// kvoffloadd with NOTIFY_SOCKET set; its stderr goes to the test log.
pid_t StartDaemon(const std::string& notify_socket, const std::vector<std::string>& args) {
  std::vector<std::string> argv = {RunfilePath("daemon/kvoffloadd")};
  argv.insert(argv.end(), args.begin(), args.end());
  std::vector<char*> c_argv;
  for (std::string& a : argv) c_argv.push_back(a.data());
  c_argv.push_back(nullptr);
  std::vector<std::string> env = {absl::StrCat("NOTIFY_SOCKET=", notify_socket)};
  for (char** e = environ; *e != nullptr; ++e) {
    if (!absl::StartsWith(*e, "NOTIFY_SOCKET=")) env.push_back(*e);
  }
  std::vector<char*> c_env;
  for (std::string& e : env) c_env.push_back(e.data());
  c_env.push_back(nullptr);
  pid_t pid = -1;
  const int err = posix_spawn(&pid, c_argv[0], nullptr, nullptr, c_argv.data(), c_env.data());
  EXPECT_EQ(err, 0) << "posix_spawn " << c_argv[0] << ": " << strerror(err);
  return err == 0 ? pid : -1;
}

// Exit code (or 128 + signal) once `pid` exits; nullopt after `timeout` (then it is killed).
std::optional<int> WaitExit(pid_t pid, std::chrono::seconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    int status = 0;
    if (waitpid(pid, &status, WNOHANG) == pid) {
      return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  kill(pid, SIGKILL);
  waitpid(pid, nullptr, 0);
  return std::nullopt;
}

bool IsSocket(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0 && S_ISSOCK(st.st_mode);
}

TEST(NotifyTest, ReadyAfterSocketsExistThenStoppingOnSigterm) {
  NotifySocket notify;
  const std::string runtime_dir = notify.dir() + "/run";
  const pid_t pid = StartDaemon(notify.path(), {"--backend=host", "--runtime_dir=" + runtime_dir,
                                                "--metrics_address=", "--max_region_bytes=64MiB"});
  ASSERT_GT(pid, 0);

  std::vector<Notice> seen;
  std::optional<Notice> ready = notify.WaitFor("READY=1", &seen);
  ASSERT_TRUE(ready.has_value()) << "no READY=1 within 30 s";
  // Checked as soon as READY=1 arrives: systemd starts dependent units right then.
  EXPECT_TRUE(IsSocket(runtime_dir + "/kvoffload.sock"));
  EXPECT_TRUE(IsSocket(runtime_dir + "/admin.sock"));
  // NotifyAccess=main: systemd accepts it only from the main process.
  EXPECT_EQ(ready->sender, pid);
  for (const Notice& n : seen) EXPECT_FALSE(NotifySocket::HasField(n.text, "STOPPING=1"));

  // SIGHUP (ExecReload) re-reads the log level and keeps serving.
  ASSERT_EQ(kill(pid, SIGHUP), 0);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  int status = 0;
  EXPECT_EQ(waitpid(pid, &status, WNOHANG), 0) << "kvoffloadd exited on SIGHUP";

  ASSERT_EQ(kill(pid, SIGTERM), 0);
  std::optional<Notice> stopping = notify.WaitFor("STOPPING=1", &seen);
  ASSERT_TRUE(stopping.has_value()) << "no STOPPING=1 within 30 s of SIGTERM";
  EXPECT_EQ(stopping->sender, pid);
  std::optional<int> code = WaitExit(pid, std::chrono::seconds(30));
  ASSERT_TRUE(code.has_value()) << "kvoffloadd did not exit within 30 s of SIGTERM";
  EXPECT_EQ(*code, 0);
  EXPECT_FALSE(IsSocket(runtime_dir + "/kvoffload.sock"));
  EXPECT_FALSE(IsSocket(runtime_dir + "/admin.sock"));
}

TEST(NotifyTest, NoReadyWhenStartupFails) {
  NotifySocket notify;
  const pid_t pid =
      StartDaemon(notify.path(), {"--backend=host", "--runtime_dir=" + notify.dir() + "/run",
                                  "--metrics_address=not-an-address", "--max_region_bytes=64MiB"});
  ASSERT_GT(pid, 0);
  std::optional<int> code = WaitExit(pid, std::chrono::seconds(30));
  ASSERT_TRUE(code.has_value());
  EXPECT_EQ(*code, 1);
  while (std::optional<Notice> n = notify.Receive(std::chrono::milliseconds(0))) {
    EXPECT_FALSE(NotifySocket::HasField(n->text, "READY=1")) << n->text;
  }
}

}  // namespace
}  // namespace kvoffload::testing
