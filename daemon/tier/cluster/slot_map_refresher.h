// SlotMapRefresher: RedisCluster's current slot map (slot_table.h) and the background thread
// that loads it again. Purpose: the slot-map half of routing, apart from the calls that route.
// A map is loaded with CLUSTER SLOTS from the first node that answers with a map serving at
// least one slot (the masters of the current map first, then the seeds), each node bounded by
// connect_timeout + command_timeout, and replaces the current one whole. Load runs on the
// caller's thread (RedisCluster::Connect); after Start, RequestRefresh wakes the thread, which
// loads at most once per `refresh_interval`. A failed load is tried again by the thread on its
// own, without anyone asking: after `refresh_interval`, then twice as long after each further
// failure, at most max(`max_refresh_backoff`, `refresh_interval`) apart, until one succeeds (a
// cluster down at start, or gone and back, is found again without a call having to come).
// Nobody waits for it: until it loads, callers route with the map they have (none before the
// first load: table() is nullptr).
//
// Thread safety: thread-safe. Load must not run while the thread does (call it before Start).
// Ownership: owns the thread and the tables it publishes (shared_ptr: a caller keeps the one it
// routes with). It does not own the connections: `ask` (given at construction) sends CLUSTER
// SLOTS to one node; it must stay callable until the destructor, which stops and joins the
// thread, has returned.
#ifndef KVOFFLOAD_DAEMON_TIER_CLUSTER_SLOT_MAP_REFRESHER_H_
#define KVOFFLOAD_DAEMON_TIER_CLUSTER_SLOT_MAP_REFRESHER_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "daemon/tier/cluster/cluster_options.h"
#include "daemon/tier/cluster/connection.h"
#include "daemon/tier/cluster/slot_table.h"

namespace kvoffload::tier::cluster {

class SlotMapRefresher {
 public:
  // Sends CLUSTER SLOTS to `node` and returns its reply, or why not (UNAUTHENTICATED and
  // PERMISSION_DENIED end a load at once; anything else moves on to the next node).
  using AskFn = std::function<absl::StatusOr<Reply>(const NodeAddress& node, absl::Time deadline)>;

  SlotMapRefresher(const ClusterTierOptions& options, AskFn ask);
  // Stops and joins the thread: waits for the node it is asking (connect_timeout +
  // command_timeout at most), not for the rest of a load.
  ~SlotMapRefresher();
  SlotMapRefresher(const SlotMapRefresher&) = delete;
  SlotMapRefresher& operator=(const SlotMapRefresher&) = delete;

  // Loads a map now, on this thread. UNAVAILABLE when no node answers (UNAUTHENTICATED or
  // PERMISSION_DENIED when one refuses the credentials). A failure leaves a try by the thread
  // pending (it runs once Start has been called), after the backoff above.
  absl::Status Load();
  // Starts the thread (once).
  void Start();
  // Asks the thread for a load (at most once per refresh_interval); returns at once.
  void RequestRefresh();
  // The current map; nullptr before the first Load succeeded.
  std::shared_ptr<const SlotTable> table() const;
  // Maps loaded (KvBackendStats::refreshes).
  uint64_t refreshes() const { return refreshes_.load(std::memory_order_relaxed); }
  // Loads that failed (KvBackendStats::refresh_failures).
  uint64_t refresh_failures() const { return refresh_failures_.load(std::memory_order_relaxed); }
  // Whether the last load succeeded (KvBackendStats::connected).
  bool connected() const { return connected_.load(std::memory_order_relaxed); }

 private:
  void RefreshLoop();

  const ClusterTierOptions& options_;
  const AskFn ask_;

  mutable absl::Mutex mu_;
  std::shared_ptr<const SlotTable> table_ ABSL_GUARDED_BY(mu_);
  absl::Time last_refresh_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  bool refresh_wanted_ ABSL_GUARDED_BY(mu_) = false;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  // The wait before the thread's next try after a failed load (refresh_interval after a success).
  absl::Duration retry_after_ ABSL_GUARDED_BY(mu_);
  uint64_t failures_in_row_ ABSL_GUARDED_BY(mu_) = 0;
  std::thread thread_;  // RefreshLoop: the only caller of Load after Start
  std::atomic<uint64_t> refreshes_{0};
  std::atomic<uint64_t> refresh_failures_{0};
  std::atomic<bool> connected_{false};
};

}  // namespace kvoffload::tier::cluster

#endif  // KVOFFLOAD_DAEMON_TIER_CLUSTER_SLOT_MAP_REFRESHER_H_
