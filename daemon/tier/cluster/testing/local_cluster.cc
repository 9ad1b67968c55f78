#include "daemon/tier/cluster/testing/local_cluster.h"

#include <fcntl.h>
#include <hiredis/hiredis.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/errno_status.h"

extern char** environ;

namespace kvoffload::tier::cluster::testing {
namespace {

// External processes give no event to wait for: readiness is polled at this interval, each
// wait bounded by a deadline.
constexpr absl::Duration kPoll = absl::Milliseconds(20);

std::string FindOnPath(const std::string& name) {
  const char* path = getenv("PATH");
  for (absl::string_view dir : absl::StrSplit(path != nullptr ? path : "/usr/bin:/bin", ':')) {
    std::string candidate = absl::StrCat(dir, "/", name);
    if (access(candidate.c_str(), X_OK) == 0) return candidate;
  }
  return "";
}

// A TCP port on loopback that nobody listens on now (the kernel's choice).
absl::StatusOr<int> FreePort(std::set<int>& taken) {
  for (int attempt = 0; attempt < 100; ++attempt) {
    const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return common::ErrnoStatus(errno, "socket");
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = 0;
    socklen_t len = sizeof(a);
    if (bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0 ||
        getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
      const int err = errno;
      close(fd);
      return common::ErrnoStatus(err, "bind a free port");
    }
    close(fd);
    const int port = ntohs(a.sin_port);
    if (taken.insert(port).second) return port;
  }
  return absl::ResourceExhaustedError("no free loopback port");
}

absl::StatusOr<int> WaitExit(pid_t pid, absl::Time deadline) {
  while (true) {
    int status = 0;
    const pid_t r = waitpid(pid, &status, WNOHANG);
    if (r == pid) return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    if (r < 0 && errno != EINTR) return common::ErrnoStatus(errno, "waitpid");
    if (absl::Now() > deadline) {
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      return absl::DeadlineExceededError(absl::StrCat("process ", pid, " did not exit in time"));
    }
    absl::SleepFor(kPoll);
  }
}

std::string ReplyText(const Reply& r) { return std::string(r->str, r->len); }

}  // namespace

absl::StatusOr<std::unique_ptr<LocalCluster>> LocalCluster::Start(LocalClusterOptions options) {
  if (FindOnPath("redis-server").empty() || FindOnPath("redis-cli").empty()) {
    return absl::FailedPreconditionError(
        "redis-server/redis-cli not installed (Debian packages redis-server, redis-tools; "
        "deploy/install_deps.sh installs them)");
  }
  const char* tmp = getenv("TEST_TMPDIR");
  std::string templ = absl::StrCat(tmp != nullptr ? tmp : "/tmp", "/kvo-redis-XXXXXX");
  if (mkdtemp(templ.data()) == nullptr) return common::ErrnoStatus(errno, "mkdtemp " + templ);
  std::unique_ptr<LocalCluster> c(new LocalCluster(std::move(options), templ));
  absl::Status s = c->Launch();
  if (!s.ok()) return s;  // the destructor stops what started
  return c;
}

LocalCluster::~LocalCluster() {
  for (Node& n : nodes_) {
    if (n.pid > 0) {
      kill(n.pid, SIGKILL);
      int status = 0;
      waitpid(n.pid, &status, 0);
      n.pid = -1;
    }
  }
  if (getenv("KVO_KEEP_REDIS_DIR") == nullptr) {
    std::error_code ignored;
    std::filesystem::remove_all(dir_, ignored);
  }
}

absl::StatusOr<pid_t> LocalCluster::Spawn(const std::vector<std::string>& argv,
                                          const std::string& log) {
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&actions, 1, log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0600);
  posix_spawn_file_actions_adddup2(&actions, 1, 2);
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  pid_t pid = -1;
  const int err = posix_spawnp(&pid, args[0], &actions, nullptr, args.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (err != 0) return common::ErrnoStatus(err, "spawn " + argv[0]);
  return pid;
}

absl::StatusOr<std::vector<int>> LocalCluster::FreePorts(int count) {
  std::set<int> taken;
  std::vector<int> out;
  for (int i = 0; i < count; ++i) {
    absl::StatusOr<int> port = FreePort(taken);
    if (!port.ok()) return port.status();
    out.push_back(*port);
  }
  return out;
}

absl::Status LocalCluster::Launch() {
  const int count = options_.masters * (1 + options_.replicas);
  if (nodes_.empty()) {
    if (!options_.ports.empty() && static_cast<int>(options_.ports.size()) != count) {
      return absl::InvalidArgumentError(
          absl::StrCat(options_.ports.size(), " ports for ", count, " nodes"));
    }
    std::set<int> taken(options_.ports.begin(), options_.ports.end());
    for (int i = 0; i < count; ++i) {
      Node n;
      if (options_.ports.empty()) {
        absl::StatusOr<int> port = FreePort(taken);
        if (!port.ok()) return port.status();
        n.port = *port;
      } else {
        n.port = options_.ports[i];
      }
      absl::StatusOr<int> bus = FreePort(taken);
      if (!bus.ok()) return bus.status();
      n.bus_port = *bus;
      nodes_.push_back(n);
    }
  }
  for (Node& n : nodes_) {
    const std::string conf = absl::StrCat(dir_, "/", n.port, ".conf");
    std::ofstream out(conf);
    out << "port " << n.port << "\nbind 127.0.0.1\nprotected-mode no\ndaemonize no\n"
        << "dir " << dir_ << "\nlogfile " << dir_ << "/" << n.port << ".log\n"
        << "save \"\"\nappendonly no\n"
        << "cluster-enabled yes\ncluster-config-file nodes-" << n.port << ".conf\n"
        << "cluster-port " << n.bus_port << "\n"
        << "cluster-node-timeout " << options_.node_timeout_ms << "\n"
        // A cache: the slots of live masters keep serving while one master is down.
        << "cluster-require-full-coverage no\n"
        << "cluster-replica-validity-factor 0\n"
        << "repl-diskless-sync-delay 0\n";
    for (const std::string& line : options_.config_lines) out << line << "\n";
    out.close();
    if (!out) return absl::InternalError("cannot write " + conf);
    absl::StatusOr<pid_t> pid =
        Spawn({"redis-server", conf}, absl::StrCat(dir_, "/", n.port, ".out"));
    if (!pid.ok()) return pid.status();
    n.pid = *pid;
  }
  const absl::Time deadline = absl::Now() + absl::Seconds(20);
  for (int i = 0; i < count; ++i) {
    absl::Status s = AwaitPing(i, deadline);
    if (!s.ok()) return s;
  }
  std::vector<std::string> create = {"redis-cli", "--cluster", "create"};
  for (const Node& n : nodes_) create.push_back(absl::StrCat("127.0.0.1:", n.port));
  create.insert(create.end(), {"--cluster-replicas", absl::StrCat(options_.replicas),
                               "--cluster-yes"});
  absl::StatusOr<pid_t> pid = Spawn(create, dir_ + "/create.log");
  if (!pid.ok()) return pid.status();
  absl::StatusOr<int> rc = WaitExit(*pid, deadline);
  if (!rc.ok()) return rc.status();
  if (*rc != 0) {
    return absl::InternalError(
        absl::StrCat("redis-cli --cluster create exited ", *rc, " (", dir_, "/create.log)"));
  }
  return AwaitHealthy(deadline - absl::Now());
}

absl::Status LocalCluster::AwaitPing(int index, absl::Time deadline) {
  absl::Status last;
  while (absl::Now() < deadline) {
    absl::StatusOr<Reply> r = Command(index, {"PING"});
    if (r.ok() && (*r)->type == REDIS_REPLY_STATUS) return absl::OkStatus();
    last = r.ok() ? absl::UnavailableError(ReplyText(*r)) : r.status();
    absl::SleepFor(kPoll);
  }
  return absl::DeadlineExceededError(
      absl::StrCat("node ", nodes_[index].port, " did not answer PING: ", last.ToString()));
}

std::string LocalCluster::url() const {
  std::vector<std::string> parts;
  for (const Node& n : nodes_) parts.push_back(absl::StrCat("127.0.0.1:", n.port));
  return absl::StrCat("redis://", absl::StrJoin(parts, ","));
}

std::vector<NodeAddress> LocalCluster::seeds() const {
  std::vector<NodeAddress> out;
  for (const Node& n : nodes_) out.push_back({"127.0.0.1", n.port});
  return out;
}

absl::StatusOr<Reply> LocalCluster::Command(int index, const std::vector<absl::string_view>& argv) {
  const absl::Time deadline = absl::Now() + absl::Seconds(5);
  absl::StatusOr<std::unique_ptr<RedisConnection>> conn = RedisConnection::Open(
      {"127.0.0.1", nodes_[index].port}, Credentials{}, absl::Seconds(1), deadline);
  if (!conn.ok()) return conn.status();
  return (*conn)->Call(argv, deadline);
}

absl::StatusOr<int> LocalCluster::Cli(int index, const std::vector<std::string>& args) {
  std::vector<std::string> argv = {"redis-cli", "-h", "127.0.0.1", "-p",
                                   absl::StrCat(nodes_[index].port)};
  argv.insert(argv.end(), args.begin(), args.end());
  absl::StatusOr<pid_t> pid = Spawn(argv, dir_ + "/cli.log");
  if (!pid.ok()) return pid.status();
  return WaitExit(*pid, absl::Now() + absl::Seconds(10));
}

absl::StatusOr<int> LocalCluster::MasterOf(int slot) {
  for (int i = 0; i < static_cast<int>(nodes_.size()); ++i) {
    if (nodes_[i].pid < 0) continue;
    absl::StatusOr<Reply> r = Command(i, {"CLUSTER", "SLOTS"});
    if (!r.ok() || (*r)->type != REDIS_REPLY_ARRAY) continue;
    for (size_t e = 0; e < (*r)->elements; ++e) {
      const redisReply* range = (*r)->element[e];
      if (slot < range->element[0]->integer || slot > range->element[1]->integer) continue;
      const int port = static_cast<int>(range->element[2]->element[1]->integer);
      for (int j = 0; j < static_cast<int>(nodes_.size()); ++j) {
        if (nodes_[j].port == port) return j;
      }
    }
    return absl::NotFoundError(absl::StrCat("slot ", slot, " has no master"));
  }
  return absl::UnavailableError("no live node answered CLUSTER SLOTS");
}

absl::Status LocalCluster::Kill(int index) {
  Node& n = nodes_[index];
  if (n.pid < 0) return absl::FailedPreconditionError("node already killed");
  if (kill(n.pid, SIGKILL) != 0) return common::ErrnoStatus(errno, "kill");
  int status = 0;
  waitpid(n.pid, &status, 0);
  n.pid = -1;
  return absl::OkStatus();
}

absl::Status LocalCluster::Stop() {
  for (int i = 0; i < static_cast<int>(nodes_.size()); ++i) {
    if (nodes_[i].pid < 0) continue;
    absl::Status s = Kill(i);
    if (!s.ok()) return s;
  }
  return absl::OkStatus();
}

absl::Status LocalCluster::Restart() {
  absl::Status s = Stop();
  if (!s.ok()) return s;
  // A new cluster: each node forgets the old one (its nodes-<port>.conf); no data was saved.
  for (const Node& n : nodes_) {
    std::error_code ignored;
    std::filesystem::remove(absl::StrCat(dir_, "/nodes-", n.port, ".conf"), ignored);
  }
  return Launch();
}

absl::Status LocalCluster::Freeze(int index) {
  if (nodes_[index].pid < 0) return absl::FailedPreconditionError("node already killed");
  if (kill(nodes_[index].pid, SIGSTOP) != 0) return common::ErrnoStatus(errno, "kill SIGSTOP");
  return absl::OkStatus();
}

absl::Status LocalCluster::AwaitReplicated(int index, absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  std::string last;
  while (absl::Now() < deadline) {
    absl::StatusOr<Reply> r = Command(index, {"INFO", "replication"});
    if (!r.ok()) return r.status();
    last = ReplyText(*r);
    // "master_repl_offset:N" and one "slaveK:ip=...,port=...,state=online,offset=M,lag=0" each.
    std::string master_offset;
    std::vector<std::string> replica_offsets;
    for (absl::string_view line :
         absl::StrSplit(last, absl::ByAnyChar("\r\n"), absl::SkipEmpty())) {
      if (absl::StartsWith(line, "master_repl_offset:")) {
        master_offset = std::string(line.substr(line.find(':') + 1));
      } else if (absl::StartsWith(line, "slave") && absl::StrContains(line, "offset=")) {
        absl::string_view rest = line.substr(line.find("offset=") + 7);
        replica_offsets.emplace_back(rest.substr(0, rest.find(',')));
      }
    }
    // A master without replicas (the killed master's promoted replica) has nothing to wait for.
    bool caught_up = absl::StrContains(last, "connected_slaves:0") || !replica_offsets.empty();
    for (const std::string& o : replica_offsets) caught_up = caught_up && o == master_offset;
    if (caught_up) return absl::OkStatus();
    absl::SleepFor(kPoll);
  }
  return absl::DeadlineExceededError(absl::StrCat("replicas of node ", nodes_[index].port,
                                                  " did not catch up: ", last));
}

absl::StatusOr<bool> LocalCluster::Healthy() {
  std::set<int> live_ports;
  for (const Node& n : nodes_) {
    if (n.pid > 0) live_ports.insert(n.port);
  }
  std::string first_map;
  for (int i = 0; i < static_cast<int>(nodes_.size()); ++i) {
    if (nodes_[i].pid < 0) continue;
    absl::StatusOr<Reply> info = Command(i, {"CLUSTER", "INFO"});
    if (!info.ok()) return info.status();
    if (!absl::StrContains(ReplyText(*info), "cluster_state:ok")) return false;
    absl::StatusOr<Reply> repl = Command(i, {"INFO", "replication"});
    if (!repl.ok()) return repl.status();
    const std::string r = ReplyText(*repl);
    if (absl::StrContains(r, "role:slave") && !absl::StrContains(r, "master_link_status:up")) {
      return false;
    }
    absl::StatusOr<Reply> slots = Command(i, {"CLUSTER", "SLOTS"});
    if (!slots.ok()) return slots.status();
    std::map<long long, std::string> ranges;
    long long covered = 0;
    for (size_t e = 0; e < (*slots)->elements; ++e) {
      const redisReply* range = (*slots)->element[e];
      const int port = static_cast<int>(range->element[2]->element[1]->integer);
      if (live_ports.count(port) == 0) return false;  // a dead master still serves slots
      covered += range->element[1]->integer - range->element[0]->integer + 1;
      ranges[range->element[0]->integer] = absl::StrCat(range->element[1]->integer, "@", port);
    }
    if (covered != 16384) return false;
    std::string map;
    for (const auto& [first, rest] : ranges) absl::StrAppend(&map, first, "-", rest, ";");
    if (first_map.empty()) first_map = map;
    if (map != first_map) return false;  // nodes do not agree yet
  }
  return true;
}

absl::Status LocalCluster::AwaitHealthy(absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  absl::Status last = absl::DeadlineExceededError("not healthy");
  while (absl::Now() < deadline) {
    absl::StatusOr<bool> ok = Healthy();
    if (ok.ok() && *ok) return absl::OkStatus();
    if (!ok.ok()) last = ok.status();
    absl::SleepFor(kPoll);
  }
  return absl::DeadlineExceededError(
      absl::StrCat("cluster in ", dir_, " not healthy in time: ", last.ToString()));
}

}  // namespace kvoffload::tier::cluster::testing
