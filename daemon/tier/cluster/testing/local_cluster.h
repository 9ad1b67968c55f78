// LocalCluster: a real Redis Cluster on loopback for tests and benchmarks — `masters` masters
// with `replicas` replicas each, Debian's redis-server processes started by pid in a temporary
// directory on free ports (client and cluster-bus ports both asked from the kernel), joined with
// `redis-cli --cluster create --cluster-replicas N --cluster-yes`, and ready once every node says
// cluster_state:ok, every replica's link to its master is up and every node's slot map agrees.
// The destructor kills each process by its pid and deletes the directory.
//
// Start is FAILED_PRECONDITION when redis-server or redis-cli is not installed (tests skip with
// that message: deploy/install_deps.sh installs them).
//
// Not thread-safe (a test drives it from one thread).
#ifndef KVOFFLOAD_DAEMON_TIER_CLUSTER_TESTING_LOCAL_CLUSTER_H_
#define KVOFFLOAD_DAEMON_TIER_CLUSTER_TESTING_LOCAL_CLUSTER_H_

#include <sys/types.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "daemon/tier/cluster/cluster_options.h"
#include "daemon/tier/cluster/connection.h"

namespace kvoffload::tier::cluster::testing {

struct LocalClusterOptions {
  int masters = 3;
  int replicas = 1;  // per master
  // cluster-node-timeout: how long a master may be silent before its replica takes over.
  int node_timeout_ms = 1000;
  // Extra redis.conf lines for every node (an ACL user, maxmemory...).
  std::vector<std::string> config_lines;
  // The nodes' client ports, masters * (1 + replicas) of them (FreePorts); empty: free ones
  // asked from the kernel. A test that points a client at a cluster before it exists uses them.
  std::vector<int> ports;
};

class LocalCluster {
 public:
  struct Node {
    int port = 0;
    int bus_port = 0;
    pid_t pid = -1;  // -1 once killed
  };

  static absl::StatusOr<std::unique_ptr<LocalCluster>> Start(LocalClusterOptions options);
  ~LocalCluster();
  // `count` distinct loopback ports nobody listens on now (for LocalClusterOptions::ports).
  static absl::StatusOr<std::vector<int>> FreePorts(int count);

  // "redis://127.0.0.1:p0,127.0.0.1:p1,..." (every node).
  std::string url() const;
  std::vector<NodeAddress> seeds() const;
  const std::vector<Node>& nodes() const { return nodes_; }
  const std::string& dir() const { return dir_; }

  // One command to node `index` (unauthenticated: the default user), within 5 s.
  absl::StatusOr<Reply> Command(int index, const std::vector<absl::string_view>& argv);
  // Runs redis-cli with `args` (its -h/-p are added: node `index`); its exit status.
  absl::StatusOr<int> Cli(int index, const std::vector<std::string>& args);

  // The node index of the master that serves `slot`, asked of a live node.
  absl::StatusOr<int> MasterOf(int slot);
  // SIGKILLs node `index` by its pid and reaps it.
  absl::Status Kill(int index);
  // SIGKILLs every live node (the whole cluster gone; its values with it).
  absl::Status Stop();
  // Stop, then a new cluster on the same ports: every node started again with no data and no
  // memory of the old cluster, joined again (--cluster create) and awaited healthy.
  absl::Status Restart();
  // SIGSTOPs node `index`: it keeps its sockets but answers nothing (a hung node). The
  // destructor still kills it.
  absl::Status Freeze(int index);
  // Waits until every replica of master `index` has acknowledged all the master's writes
  // (INFO replication: each slave's offset equals master_repl_offset); OK at once for a master
  // without replicas.
  absl::Status AwaitReplicated(int index, absl::Duration timeout);
  // Waits until every live node says cluster_state:ok and serves every slot from a live master
  // (after a Kill: the failover is over).
  absl::Status AwaitHealthy(absl::Duration timeout);

 private:
  LocalCluster(LocalClusterOptions options, std::string dir)
      : options_(std::move(options)), dir_(std::move(dir)) {}
  absl::Status Launch();
  absl::StatusOr<pid_t> Spawn(const std::vector<std::string>& argv, const std::string& log);
  absl::Status AwaitPing(int index, absl::Time deadline);
  absl::StatusOr<bool> Healthy();

  const LocalClusterOptions options_;
  const std::string dir_;
  std::vector<Node> nodes_;
};

}  // namespace kvoffload::tier::cluster::testing

#endif  // KVOFFLOAD_DAEMON_TIER_CLUSTER_TESTING_LOCAL_CLUSTER_H_
