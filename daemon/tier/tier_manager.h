// TierManager: the node's tiers below the pinned host regions — the record stores, fastest first
// (the disk tier, then the cluster tier) — and the one spill thread that writes READY rows to
// them. Each row index has a TierLink (tier_link.h) made here; the manager holds links weakly.
//
//   std::vector<std::unique_ptr<tier::RecordStore>> stores;   // fastest first
//   stores.push_back(std::move(disk_tier));
//   std::shared_ptr<TierManager> tiers = TierManager::Create(std::move(stores), &release, {});
//   std::shared_ptr<TierLink> link = tiers->Link(target);    // before the index is shared
//   ...
//   tiers->Shutdown();   // before `release` is flushed for the last time
//
// Spill: a key that became READY is written to every tier that lacks it and takes rows of its
// size, at most `max_spills_in_flight` rows pinned node-wide (and a quarter of an index's rows at
// most). The spill thread takes a link's keys
// in batches (no more than the free slots, `max_spill_batch` at most) and asks each tier once per
// batch which it holds. Promote: a lookup's miss is read from the
// first tier that holds it (tier_link.h).
//
// Thread-safety: thread-safe. Locks: `store_mu_` is held shared around every call into a store
// (exclusive by Shutdown, to destroy them, and by a link dropping its records) and is taken
// before any SlotIndex lock; `mu_` (the spill thread's state, counters of links gone) is a leaf.
// Ownership: owns the stores and the spill thread; links share the manager (a link may outlive
// Shutdown: it then spills and promotes nothing). `release` outlives the manager and every link.
#ifndef KVOFFLOAD_DAEMON_TIER_TIER_MANAGER_H_
#define KVOFFLOAD_DAEMON_TIER_TIER_MANAGER_H_

#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "daemon/lifetime/deferred_release.h"
#include "daemon/tier/record_store.h"

namespace kvoffload::daemon {

struct TierOptions {
  // A promotion still reading after this looks up as a MISS (the engine recomputes instead of
  // waiting on a slow or failing tier); the read itself goes on and its row becomes READY.
  absl::Duration promote_timeout = absl::Milliseconds(500);
  // Rows pinned by spill writes at once, node-wide (each held out of its LRU list while it is
  // written, with one write per tier that lacks it: up to this times the tiers writes). Each
  // link also pins at most a quarter of its index's online rows (TierLink::kPinnedShare).
  uint32_t max_spills_in_flight = 8;
  // Keys the spill thread takes from a link's queue at once (also bounded by the free spill
  // slots): each tier is asked about them in one ContainsAll, one round trip to a remote tier.
  uint32_t max_spill_batch = 32;
  // Keys waiting to be spilled, per link; past it the oldest are dropped (counted).
  uint64_t max_spill_queue = 1 << 16;
};

// Cumulative counters of one tier, over links (kvoffloadctl stats, metrics). The spill queue is
// a link's, shared by its tiers: its counters (queued, dropped, depth) are the same on each.
struct TierCounters {
  uint64_t spills_queued = 0;
  uint64_t spills_ok = 0;
  uint64_t spill_bytes = 0;
  uint64_t spills_failed = 0;          // the tier refused or failed the write
  uint64_t spills_already_held = 0;    // the tier had the key already
  uint64_t spills_gone = 0;            // evicted or dropped before its turn
  uint64_t spill_queue_dropped = 0;    // queue full: the oldest key was not spilled
  uint64_t lookup_tier_hits = 0;       // keys a Lookup missed in the region and found here
  uint64_t promotions_started = 0;
  uint64_t promotions_ok = 0;
  uint64_t promotions_failed = 0;      // the read failed or its record was corrupt: a miss
  uint64_t promotion_bytes = 0;
  uint64_t promotions_timed_out = 0;   // Lookups that answered MISS for a promotion too slow
  double promotion_seconds_sum = 0;    // over promotions_ok
  double promotion_seconds_max = 0;
  uint64_t spill_queue_depth = 0;      // gauge
  uint64_t promotions_in_flight = 0;   // gauge

  void Add(const TierCounters& other);
};

class TierLink;
struct TierTarget;

class TierManager : public std::enable_shared_from_this<TierManager> {
 public:
  // `stores`: fastest first (at least one).
  static std::shared_ptr<TierManager> Create(std::vector<std::unique_ptr<tier::RecordStore>> stores,
                                             DeferredRelease* release, TierOptions options);
  ~TierManager();  // Shutdown()
  TierManager(const TierManager&) = delete;
  TierManager& operator=(const TierManager&) = delete;

  // A link to `target`'s index (its ready listener is set here: call it before the index is
  // shared); null when no tier holds rows of target.row_bytes.
  std::shared_ptr<TierLink> Link(TierTarget target);

  // Waits until no spill is queued or in flight and no promotion is reading; false if that has
  // not happened within `timeout`.
  bool WaitIdle(absl::Duration timeout);

  // Stops the spill thread and waits for every I/O in flight and its callback (the stores are
  // destroyed). Links keep working afterwards but promote and spill nothing. Idempotent.
  void Shutdown();

  const TierOptions& options() const { return options_; }
  size_t num_tiers() const { return names_.size(); }
  const std::string& tier_name(size_t tier) const { return names_[tier]; }
  // The largest row tier `tier` holds (RecordStore::max_record_bytes).
  uint64_t max_row_bytes(size_t tier) const { return max_row_bytes_[tier]; }

  // One line per tier, fastest first: the store's counters (zero after Shutdown) and the sum of
  // every link's, those of links gone included (gauges: live links only).
  struct TierLine {
    std::string name;
    tier::RecordStoreStats store;
    TierCounters links;
  };
  std::vector<TierLine> stats() const;

 private:
  friend class TierLink;

  TierManager(std::vector<std::unique_ptr<tier::RecordStore>> stores, DeferredRelease* release,
              TierOptions options);
  void Wake();
  void SpillEnded();
  void PromotionStarted();
  void PromotionEnded();
  void SpillLoop();
  void Retire(const std::vector<TierCounters>& counters);

  const TierOptions options_;
  DeferredRelease* const release_;
  const std::vector<std::string> names_;
  const std::vector<uint64_t> max_row_bytes_;
  mutable absl::Mutex store_mu_;
  // Empty after Shutdown.
  std::vector<std::unique_ptr<tier::RecordStore>> stores_ ABSL_GUARDED_BY(store_mu_);

  mutable absl::Mutex mu_;
  absl::CondVar cv_;
  std::vector<std::weak_ptr<TierLink>> links_ ABSL_GUARDED_BY(mu_);
  bool work_ ABSL_GUARDED_BY(mu_) = false;
  uint64_t wakes_ ABSL_GUARDED_BY(mu_) = 0;  // Wake calls, so a scan knows it missed none
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  uint32_t spills_in_flight_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t promotions_in_flight_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<TierCounters> retired_ ABSL_GUARDED_BY(mu_);  // per tier, of links gone
  std::thread thread_;
};

}  // namespace kvoffload::daemon

#endif  // KVOFFLOAD_DAEMON_TIER_TIER_MANAGER_H_
