// ClusterTierOptions: what the cluster tier (cluster_tier.h) needs to reach its Redis Cluster,
// each default written once here; Validate checks them, ParseClusterUrl reads the flag form
// `redis://host:port[,host:port...]`, ReadSecretFile the password file.
//
// Secrets: the password is never an option value, a flag or a URL part: `password_file` names a
// file holding it (the URL parser refuses `user:pass@`). Nothing here logs it.
//
// Thread safety: plain data and pure functions.
#ifndef KVOFFLOAD_DAEMON_TIER_CLUSTER_CLUSTER_OPTIONS_H_
#define KVOFFLOAD_DAEMON_TIER_CLUSTER_CLUSTER_OPTIONS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace kvoffload::tier::cluster {

struct NodeAddress {
  std::string host;  // a name or an IP address (IPv6 without brackets)
  int port = 0;

  std::string ToString() const;  // "host:port", "[v6]:port"
  bool operator==(const NodeAddress& o) const { return host == o.host && port == o.port; }
  bool operator!=(const NodeAddress& o) const { return !(*this == o); }
};

// "host:port" or "[v6]:port"; ports 1..65535. INVALID_ARGUMENT otherwise.
absl::StatusOr<NodeAddress> ParseHostPort(absl::string_view text);

// `redis://host:port[,host:port...]`: the cluster's seed nodes (any nodes of it; the slot map is
// learnt from the first that answers). INVALID_ARGUMENT for another scheme (rediss:// is not
// supported), credentials in the URL (they belong in the password file), a database path or
// query (a cluster has database 0 only), or a bad host:port.
absl::StatusOr<std::vector<NodeAddress>> ParseClusterUrl(absl::string_view url);

struct ClusterTierOptions {
  // Seed nodes (ParseClusterUrl).
  std::vector<NodeAddress> seeds;
  // ACL user for `AUTH user password`; empty: `AUTH password` (the default user).
  std::string user;
  // File holding the password (one line; a trailing newline is dropped). Empty: no AUTH.
  std::string password_file;
  // Per-deployment key prefix: every key of the tier starts with "<key_prefix>/". 1..64 bytes
  // of [A-Za-z0-9._-] (no '{': keys carry no hash tag; no glob characters: SCAN MATCH uses it).
  std::string key_prefix = "kvo";
  // TCP connect (and AUTH) to one node.
  absl::Duration connect_timeout = absl::Milliseconds(250);
  // The bound on one Write or Read (all values of one record, redirects and a reconnect
  // included), measured from the moment a tier thread starts it.
  absl::Duration command_timeout = absl::Seconds(1);
  // The bound on one ContainsAll (the lookup path: one pipelined EXISTS batch).
  absl::Duration lookup_timeout = absl::Milliseconds(100);
  // Blocking connections kept per cluster node (each used by one batch at a time).
  int connections_per_node = 4;
  // The largest value the tier writes, its 4 KiB record header included; a record longer than
  // this minus the header is split into several values (parts). Every node of a deployment
  // should use the same value (a reader fetches the parts its own setting implies, then any
  // further parts the first part's header says exist).
  uint64_t max_value_bytes = 8ull << 20;
  // Threads that run Writes and Reads (the caller never waits for the cluster).
  int threads = 4;
  // Writes + Reads queued or running at most; beyond it Write/Read refuse RESOURCE_EXHAUSTED.
  int max_queued = 1024;
  // Least time between two slot-map refreshes (CLUSTER SLOTS) forced by errors or MOVED.
  absl::Duration refresh_interval = absl::Milliseconds(100);
  // While no node answers for the slot map (the cluster down at start, or gone), it is asked
  // again in the background after refresh_interval, then twice as long each time, at most
  // max(this, refresh_interval) apart: the longest a cluster that is back waits to be used
  // again (plus one load).
  absl::Duration max_refresh_backoff = absl::Seconds(2);
  // After a failed connect, calls to that node fail at once (UNAVAILABLE) for this long.
  absl::Duration down_backoff = absl::Milliseconds(100);
};

// INVALID_ARGUMENT naming the first bad field.
absl::Status Validate(const ClusterTierOptions& options);

// The secret in `path` (first line, trailing "\r\n" dropped). NOT_FOUND/PERMISSION_DENIED as the
// file system says; INVALID_ARGUMENT when it is empty. Never logs the content; logs a warning
// when the file is readable by group or others.
absl::StatusOr<std::string> ReadSecretFile(const std::string& path);

}  // namespace kvoffload::tier::cluster

#endif  // KVOFFLOAD_DAEMON_TIER_CLUSTER_CLUSTER_OPTIONS_H_
