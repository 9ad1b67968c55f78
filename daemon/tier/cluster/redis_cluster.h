// RedisCluster: the KvBackend (kv_backend.h) for Redis Cluster (and Valkey, the same protocol),
// on Debian's hiredis 0.14 with blocking-style connections driven by deadlines
// (connection.h).
//
// Routing: each key goes to the master of its slot (key_slot.h) in the current slot map, which a
// SlotMapRefresher (slot_map_refresher.h) loads at start and again, in the background, whenever
// a call meets a MOVED, a connection failure, a timeout or a slot without a master (calls never
// wait for it). A MOVED reply re-sends that key to the named node at once (and asks for a
// refresh); an ASK reply re-sends it there preceded by ASKING (no refresh: the slot is
// migrating). At most kMaxRedirects hops per key, all within the call's deadline.
//
// Batches: a call's keys are grouped per node; each group is pipelined on one pooled
// connection; all groups are sent before any reply is read, so the nodes work in parallel.
// SET values go from the caller's memory to the socket by writev, and GetInto's values from the
// socket into the caller's memory by readv (no copy either way; Get copies through hiredis).
//
// Connections: up to `connections_per_node` per node, opened on demand (connect + AUTH bounded
// by `connect_timeout`), kept while healthy, dropped after any error or timeout (a reply might
// still be on its way; the node's idle connections are closed with it: if the node restarted
// they are dead too). A node whose connect failed is skipped (UNAVAILABLE at once) for
// `down_backoff`, so a dead node costs each call nothing. A call waiting for a free connection
// waits until its deadline at most.
//
// A cluster that is not there: Connect succeeds without a slot map when no seed answers, and
// every call answers UNAVAILABLE at once (no network wait) until the refresher's thread, which
// keeps asking the seeds with a bounded backoff (`max_refresh_backoff`), has loaded one. A
// cluster that goes away (every node killed) is the same: calls fail UNAVAILABLE (connects
// refused, or bounded by their deadline), the refresher keeps trying the last map's masters and
// the seeds, and once a node answers with a map, calls are routed again — to a cluster restarted
// empty, whose missing values read as NOT_FOUND.
//
// Thread safety: thread-safe; the destructor needs every call to have returned.
#ifndef KVOFFLOAD_DAEMON_TIER_CLUSTER_REDIS_CLUSTER_H_
#define KVOFFLOAD_DAEMON_TIER_CLUSTER_REDIS_CLUSTER_H_

#include <atomic>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "daemon/tier/cluster/cluster_options.h"
#include "daemon/tier/cluster/connection.h"
#include "daemon/tier/cluster/kv_backend.h"
#include "daemon/tier/cluster/slot_map_refresher.h"
#include "daemon/tier/cluster/slot_table.h"

namespace kvoffload::tier::cluster {

class RedisCluster : public KvBackend {
 public:
  static constexpr int kMaxRedirects = 3;

  // Loads the slot map from the first seed that answers (each seed bounded by connect +
  // command timeouts). When none does, still OK: the client starts without a map (calls answer
  // UNAVAILABLE) and loads one in the background once a seed answers (above); connected() in
  // backend_stats() says which. UNAUTHENTICATED when AUTH is refused, PERMISSION_DENIED when
  // the ACL user may not ask for the map; the last seed's error (INTERNAL) when it answered but
  // not with a cluster's map (e.g. a Redis without cluster mode).
  static absl::StatusOr<std::unique_ptr<RedisCluster>> Connect(const ClusterTierOptions& options,
                                                               Credentials credentials);
  ~RedisCluster() override;

  std::vector<absl::Status> Put(const std::vector<KvPut>& puts, absl::Time deadline) override;
  std::vector<KvValue> Get(const std::vector<std::string>& keys, absl::Time deadline) override;
  std::vector<absl::StatusOr<uint64_t>> GetInto(const std::vector<KvGetInto>& gets,
                                                absl::Time deadline) override;
  std::vector<absl::StatusOr<bool>> Exists(const std::vector<std::string>& keys,
                                           absl::Time deadline) override;
  std::vector<absl::Status> Delete(const std::vector<std::string>& keys,
                                   absl::Time deadline) override;
  absl::StatusOr<uint64_t> DeletePrefix(absl::string_view prefix, absl::Time deadline) override;
  KvBackendStats backend_stats() const override;

  // The current slot map (tests, logs); nullptr until one loaded.
  std::shared_ptr<const SlotTable> slot_table() const;
  // Asks the background thread to load the slot map again (at most once per
  // `refresh_interval`; until it loads, failing calls keep answering UNAVAILABLE). Calls do it
  // themselves after a redirect, a failed connection or a slot without a master; they never
  // wait for it.
  void RequestRefresh();

 private:
  class NodePool;
  struct Op;

  RedisCluster(const ClusterTierOptions& options, Credentials credentials);
  NodePool* Pool(const NodeAddress& address);
  // Runs `ops` (each filled in with its reply or status) through routing, pipelines and
  // redirects.
  void Run(std::vector<Op>& ops, absl::Time deadline);

  const ClusterTierOptions options_;
  const Credentials credentials_;

  absl::Mutex mu_;
  std::map<std::string, std::unique_ptr<NodePool>> pools_ ABSL_GUARDED_BY(mu_);

  std::atomic<uint64_t> connects_{0};
  std::atomic<uint64_t> connect_failures_{0};
  std::atomic<uint64_t> broken_{0};
  std::atomic<uint64_t> redirects_{0};

  // Last: its thread asks nodes through Pool(), so it is stopped before the pools go.
  SlotMapRefresher slot_map_;
};

}  // namespace kvoffload::tier::cluster

#endif  // KVOFFLOAD_DAEMON_TIER_CLUSTER_REDIS_CLUSTER_H_
