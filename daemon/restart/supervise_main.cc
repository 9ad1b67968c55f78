// kvoffload-supervise: the service manager's fd store and restart policy for machines without
// systemd (development, containers without an init, and the test double of the durable-region tests).
//
//   kvoffload-supervise [--restart_delay_ms=100] [--fdstore_max=4096] --
//       /usr/local/bin/kvoffloadd --runtime_dir=/tmp/kvo ...   (one command line)
//
// It does for kvoffloadd what systemd does for a Type=notify unit with FileDescriptorStoreMax=,
// NotifyAccess=main and Restart=on-failure, speaking the same protocol (fd_store.h):
//   - it binds a notify socket and starts the daemon with NOTIFY_SOCKET pointing at it;
//   - "FDSTORE=1" messages from the daemon's main process keep the attached descriptors under
//     their FDNAME (the same open file twice is kept once; beyond --fdstore_max they are closed),
//     "FDSTOREREMOVE=1" drops a name's descriptors; descriptors sent without FDSTORE=1 are closed;
//   - when the daemon exits with a failure (non-zero status or a signal: a crash, SIGKILL, the OOM
//     killer) it is started again after --restart_delay_ms with every stored descriptor at fd 3
//     onwards and LISTEN_PID, LISTEN_FDS and LISTEN_FDNAMES set, as systemd passes them;
//   - SIGHUP restarts it on purpose (SIGTERM, wait, start again with the descriptors) — what
//     `systemctl restart` is; replacing the binary on disk first makes that an upgrade;
//   - SIGTERM or SIGINT stops the daemon (SIGTERM) and then the supervisor, dropping the stored
//     descriptors (their memory is freed) — what `systemctl stop` is on systemd < 254;
//   - a daemon that exits 0 on its own ends the supervisor too (exit 0); one that fails
//     --start_limit_burst times in a row within 10 s of its start ends it with exit 1.
// Events are printed one per line on stdout (started, ready, stored, removed, exited, stopped)
// for scripts and tests; the daemon's own stdout goes to stderr.
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <ctime>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "daemon/restart/fd_store.h"
#include "daemon/restart/unique_fd.h"

ABSL_FLAG(int64_t, restart_delay_ms, 100, "Wait this long before starting a failed daemon again.");
ABSL_FLAG(uint32_t, fdstore_max, 4096,
          "Most descriptors kept (systemd's FileDescriptorStoreMax=); more are closed.");
ABSL_FLAG(int32_t, start_limit_burst, 5,
          "Give up (exit 1) after this many failures in a row within 10 s of their start "
          "(systemd's StartLimitBurst=), instead of restarting a daemon that cannot start.");
ABSL_FLAG(std::string, notify_dir, "",
          "Directory for the notify socket; empty: a fresh /tmp/kvo-supervise.XXXXXX.");

extern char** environ;

namespace kvoffload::daemon {
namespace {

void Event(const std::string& line) {
  std::fprintf(stdout, "%s\n", line.c_str());
  std::fflush(stdout);
}

struct Stored {
  std::string name;
  UniqueFd fd;
  dev_t dev = 0;
  ino_t ino = 0;
};

class Supervisor {
 public:
  Supervisor(std::vector<std::string> command, std::string socket_path, UniqueFd socket,
             UniqueFd signals)
      : command_(std::move(command)),
        socket_path_(std::move(socket_path)),
        socket_(std::move(socket)),
        signals_(std::move(signals)) {}

  int Run() {
    if (!Start()) return 1;
    for (;;) {
      pollfd fds[2] = {{signals_.get(), POLLIN, 0}, {socket_.get(), POLLIN, 0}};
      if (poll(fds, 2, -1) < 0) {
        if (errno == EINTR) continue;
        std::perror("kvoffload-supervise: poll");
        return 1;
      }
      if (fds[1].revents & POLLIN) ReceiveNotify();
      if (!(fds[0].revents & POLLIN)) continue;
      signalfd_siginfo info;
      if (read(signals_.get(), &info, sizeof(info)) != sizeof(info)) continue;
      if (info.ssi_signo == SIGHUP) {
        restart_requested_ = true;
        if (child_ > 0) kill(child_, SIGTERM);
      } else if (info.ssi_signo == SIGTERM || info.ssi_signo == SIGINT) {
        stopping_ = true;
        if (child_ > 0) kill(child_, SIGTERM);
      } else if (info.ssi_signo == SIGCHLD) {
        int status = 0;
        const pid_t pid = child_ > 0 ? waitpid(child_, &status, WNOHANG) : 0;
        if (pid <= 0) continue;
        ReceiveNotify();  // messages the daemon sent just before it exited
        child_ = -1;
        const bool failed = !WIFEXITED(status) || WEXITSTATUS(status) != 0;
        const std::string how = WIFEXITED(status)
                                    ? absl::StrCat("exit=", WEXITSTATUS(status))
                                    : absl::StrCat("signal=", WTERMSIG(status));
        const bool again = !stopping_ && (restart_requested_ || failed);
        Event(absl::StrCat("exited pid=", pid, " ", how, " restarting=", again ? 1 : 0));
        if (!again) {
          stored_.clear();  // the unit is stopped: the store goes with it
          Event("stopped");
          return failed && !stopping_ ? 1 : 0;
        }
        if (!restart_requested_) {
          // A daemon that keeps failing right after its start will not get better by itself.
          const bool quick = time(nullptr) - started_at_ < 10;
          quick_failures_ = quick ? quick_failures_ + 1 : 0;
          if (quick_failures_ >= absl::GetFlag(FLAGS_start_limit_burst)) {
            Event(absl::StrCat("gave up after ", quick_failures_, " failures within 10 s of start"));
            stored_.clear();
            Event("stopped");
            return 1;
          }
          usleep(static_cast<useconds_t>(absl::GetFlag(FLAGS_restart_delay_ms) * 1000));
        }
        restart_requested_ = false;
        if (!Start()) return 1;
      }
    }
  }

 private:
  bool Start() {
    // Everything the child needs is built here: after fork it only moves descriptors and execs.
    std::vector<std::string> env;
    for (char** e = environ; *e != nullptr; ++e) {
      if (absl::StartsWith(*e, "NOTIFY_SOCKET=") || absl::StartsWith(*e, "LISTEN_")) continue;
      env.push_back(*e);
    }
    env.push_back(absl::StrCat("NOTIFY_SOCKET=", socket_path_));
    const size_t n = stored_.size();
    size_t pid_slot = 0;
    if (n > 0) {
      std::vector<std::string> names;
      for (const Stored& s : stored_) names.push_back(s.name);
      env.push_back(absl::StrCat("LISTEN_FDS=", n));
      env.push_back(absl::StrCat("LISTEN_FDNAMES=", absl::StrJoin(names, ":")));
      pid_slot = env.size();
      env.push_back("LISTEN_PID=" + std::string(20, ' '));
    }
    std::vector<char*> envp;
    for (std::string& e : env) envp.push_back(e.data());
    envp.push_back(nullptr);
    std::vector<std::string> argv_storage = command_;
    std::vector<char*> argv;
    for (std::string& a : argv_storage) argv.push_back(a.data());
    argv.push_back(nullptr);
    std::vector<int> sources;
    int highest = 2;
    for (const Stored& s : stored_) {
      sources.push_back(s.fd.get());
      highest = std::max(highest, s.fd.get());
    }
    highest = std::max({highest, socket_.get(), signals_.get()});
    const int base = std::max<int>(highest + 1, kListenFdsStart + static_cast<int>(n));

    const pid_t pid = fork();
    if (pid < 0) {
      std::perror("kvoffload-supervise: fork");
      return false;
    }
    if (pid == 0) {
      sigset_t none;
      sigemptyset(&none);
      sigprocmask(SIG_SETMASK, &none, nullptr);
      dup2(STDERR_FILENO, STDOUT_FILENO);  // stdout carries the supervisor's events
      // Two steps, so that a stored descriptor already sitting at 3..3+n is not overwritten
      // before it was moved.
      std::vector<int> moved(n);
      for (size_t i = 0; i < n; ++i) moved[i] = fcntl(sources[i], F_DUPFD, base);
      for (size_t i = 0; i < n; ++i) {
        dup2(moved[i], kListenFdsStart + static_cast<int>(i));  // without FD_CLOEXEC
        close(moved[i]);
      }
      if (n > 0) {
        char* slot = envp[pid_slot] + strlen("LISTEN_PID=");
        char digits[24];
        int len = 0;
        for (pid_t p = getpid(); p > 0; p /= 10) digits[len++] = static_cast<char>('0' + p % 10);
        for (int i = 0; i < len; ++i) slot[i] = digits[len - 1 - i];
        slot[len] = '\0';
      }
      execve(argv[0], argv.data(), envp.data());
      _exit(127);
    }
    child_ = pid;
    started_at_ = time(nullptr);
    Event(absl::StrCat("started pid=", pid, " fds=", n));
    return true;
  }

  void ReceiveNotify() {
    for (;;) {
      char data[4096];
      alignas(cmsghdr) char control[CMSG_SPACE(sizeof(ucred)) + CMSG_SPACE(sizeof(int) * 253)];
      iovec iov{data, sizeof(data) - 1};
      msghdr msg{};
      msg.msg_iov = &iov;
      msg.msg_iovlen = 1;
      msg.msg_control = control;
      msg.msg_controllen = sizeof(control);
      const ssize_t got = recvmsg(socket_.get(), &msg, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
      if (got < 0) return;
      std::vector<UniqueFd> fds;
      pid_t sender = 0;
      for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr; c = CMSG_NXTHDR(&msg, c)) {
        if (c->cmsg_level != SOL_SOCKET) continue;
        if (c->cmsg_type == SCM_RIGHTS) {
          const size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
          for (size_t i = 0; i < count; ++i) {
            int fd;
            std::memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
            fds.emplace_back(fd);
          }
        } else if (c->cmsg_type == SCM_CREDENTIALS) {
          ucred cred;
          std::memcpy(&cred, CMSG_DATA(c), sizeof(cred));
          sender = cred.pid;
        }
      }
      if (sender != child_ || child_ <= 0) continue;  // NotifyAccess=main; fds close here
      const auto fields = ParseNotify(absl::string_view(data, static_cast<size_t>(got)));
      auto field = [&](const char* key) {
        auto it = fields.find(key);
        return it == fields.end() ? std::string() : it->second;
      };
      if (field("READY") == "1") Event(absl::StrCat("ready pid=", sender));
      std::string name = field("FDNAME");
      if (name.empty()) name = "stored";
      if (field("FDSTOREREMOVE") == "1" && IsValidFdName(name)) {
        size_t before = stored_.size();
        stored_.erase(std::remove_if(stored_.begin(), stored_.end(),
                                     [&](const Stored& s) { return s.name == name; }),
                      stored_.end());
        Event(absl::StrCat("removed name=", name, " count=", before - stored_.size(),
                           " total=", stored_.size()));
      }
      if (field("FDSTORE") != "1" || !IsValidFdName(name)) continue;  // fds close here
      for (UniqueFd& fd : fds) Keep(name, std::move(fd));
    }
  }

  void Keep(const std::string& name, UniqueFd fd) {
    struct stat st;
    if (fstat(fd.get(), &st) != 0) return;
    for (const Stored& s : stored_) {
      if (s.dev == st.st_dev && s.ino == st.st_ino) return;  // the same file: kept once
    }
    if (stored_.size() >= absl::GetFlag(FLAGS_fdstore_max)) {
      Event(absl::StrCat("refused name=", name, " (fdstore_max reached)"));
      return;
    }
    stored_.push_back(Stored{name, std::move(fd), st.st_dev, st.st_ino});
    Event(absl::StrCat("stored name=", name, " total=", stored_.size()));
  }

  const std::vector<std::string> command_;
  const std::string socket_path_;
  UniqueFd socket_;
  UniqueFd signals_;
  std::vector<Stored> stored_;
  pid_t child_ = -1;
  time_t started_at_ = 0;
  int quick_failures_ = 0;
  bool restart_requested_ = false;
  bool stopping_ = false;
};

int Main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "kvoffload-supervise [flags] -- /path/to/kvoffloadd [daemon flags]: keeps kvoffloadd's "
      "fd store and restarts it, as systemd would.");
  std::vector<char*> rest = absl::ParseCommandLine(argc, argv);
  std::vector<std::string> command(rest.begin() + 1, rest.end());
  if (command.empty() || command[0].empty() || command[0][0] != '/') {
    std::fprintf(stderr, "kvoffload-supervise: give the daemon's absolute path after --\n");
    return 2;
  }
  std::string dir = absl::GetFlag(FLAGS_notify_dir);
  bool own_dir = false;
  if (dir.empty()) {
    char pattern[] = "/tmp/kvo-supervise.XXXXXX";
    if (mkdtemp(pattern) == nullptr) {
      std::perror("kvoffload-supervise: mkdtemp");
      return 1;
    }
    dir = pattern;
    own_dir = true;
  }
  const std::string path = dir + "/notify";
  UniqueFd socket(::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (path.size() >= sizeof(addr.sun_path)) {
    std::fprintf(stderr, "kvoffload-supervise: %s is too long for a socket\n", path.c_str());
    return 1;
  }
  std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
  unlink(path.c_str());
  const int on = 1;
  if (!socket.valid() || bind(socket.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      setsockopt(socket.get(), SOL_SOCKET, SO_PASSCRED, &on, sizeof(on)) != 0) {
    std::perror("kvoffload-supervise: notify socket");
    return 1;
  }
  sigset_t mask;
  sigemptyset(&mask);
  for (int s : {SIGCHLD, SIGTERM, SIGINT, SIGHUP}) sigaddset(&mask, s);
  sigprocmask(SIG_BLOCK, &mask, nullptr);
  UniqueFd signals(signalfd(-1, &mask, SFD_CLOEXEC));
  if (!signals.valid()) {
    std::perror("kvoffload-supervise: signalfd");
    return 1;
  }
  Event(absl::StrCat("notify socket=", path));
  Supervisor supervisor(std::move(command), path, std::move(socket), std::move(signals));
  const int code = supervisor.Run();
  unlink(path.c_str());
  if (own_dir) std::filesystem::remove_all(dir);
  return code;
}

}  // namespace
}  // namespace kvoffload::daemon

int main(int argc, char** argv) { return kvoffload::daemon::Main(argc, argv); }
