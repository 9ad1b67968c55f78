// TierLink and TierManager: the tiers below the pinned host region, wired to the row indexes
// (docs/disk_tier.md "Spill and promote").
//
// A node has one TierManager, over one RecordStore (the disk tier), and one TierLink per row
// index (an engine's private index or a pool's). The link
//   - spills: every key that becomes READY in its index (SlotIndex::SetReadyListener) is queued,
//     and the manager's spill thread writes its row to the tier while SlotIndex::BeginSpill keeps
//     the row from being evicted, reset or parked — so a row evicted later is already on disk;
//   - promotes: a Lookup's keys that miss the region but are in the tier (up to the first key
//     that is nowhere: vLLM loads prefixes) get rows (PrepareStore, as any store) that the tier
//     reads into; Lookup answers HIT_PENDING for them, and once the read is checked the rows are
//     READY (EndStoreCopyRuns + CompleteStore) and load like any row. A promotion still reading
//     after `promote_timeout` looks up as a MISS, so no request waits on a slow disk longer.
//
//   std::shared_ptr<TierManager> tiers =
//       TierManager::Create(std::move(disk_tier), &release, TierOptions{});
//   std::shared_ptr<TierLink> link = tiers->Link(target);  // before the index is shared
//   std::vector<SlotIndex::KeyState> states = index.Lookup(keys, member);
//   link->Promote(keys, member, &states);                  // MISS → HIT_PENDING where it can
//
// Namespaces (tier_namespace.h): one per link, from who may read the rows and their layout, so a
// record is never promoted into another owner's or another layout's rows.
//
// Thread-safety: both classes are thread-safe. Lock order: a SlotIndex's lock, then a link's
// mutex, then the manager's (the ready listener runs under the index's lock); the link and the
// manager never call an index or the store while holding their own mutex. Ownership: the manager
// owns the store and its spill thread and holds links weakly; an engine or pool owns its link.
// An I/O in flight holds its target alive (TierTarget::lock_owner) and hands that reference to
// DeferredRelease when it ends. Shutdown (or the destructor) stops spilling and waits for every
// I/O callback; it must run before `release` is flushed for the last time.
#ifndef KVOFFLOAD_DAEMON_TIER_TIER_LINK_H_
#define KVOFFLOAD_DAEMON_TIER_TIER_LINK_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "daemon/index/slot_index.h"
#include "daemon/lifetime/deferred_release.h"
#include "daemon/tier/record_store.h"

namespace kvoffload::daemon {

struct TierOptions {
  // A promotion still reading after this looks up as a MISS (the engine recomputes instead of
  // waiting on a slow or failing disk); the read itself goes on and its row becomes READY.
  absl::Duration promote_timeout = absl::Milliseconds(500);
  // Spill writes in flight at most, node-wide (each holds one row out of its LRU list).
  uint32_t max_spills_in_flight = 8;
  // Keys waiting to be spilled, per link; past it the oldest are dropped (counted).
  uint64_t max_spill_queue = 1 << 16;
};

// What a link reaches of one index. `lock_owner` returns a reference that keeps the index and
// its rows' memory alive (the engine, or the pool), or null once it is gone; `row_memory` gives
// row `row`'s bytes (row_bytes of them) and may add what keeps that memory alive (a pool's
// member) to `*keepalive`; null when the row's memory is gone.
struct TierTarget {
  SlotIndex* index = nullptr;
  uint64_t row_bytes = 0;
  uint64_t namespace_id = 0;
  std::string label;  // the engine's key or "pool <name>", for logs
  std::function<std::shared_ptr<void>()> lock_owner;
  std::function<uint8_t*(uint64_t row, std::shared_ptr<void>* keepalive)> row_memory;
};

// Cumulative counters of one link (kvoffloadctl stats, metrics).
struct TierLinkStats {
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
};

class TierManager;

class TierLink : public std::enable_shared_from_this<TierLink> {
 public:
  TierLink(std::shared_ptr<TierManager> manager, TierTarget target);
  ~TierLink();  // hands its counters to the manager's totals
  TierLink(const TierLink&) = delete;
  TierLink& operator=(const TierLink&) = delete;

  // Promotes what it can of `keys` (see the file comment), turning their MISS into HIT_PENDING;
  // a HIT_PENDING key whose promotion has run past promote_timeout becomes MISS. `member`: the
  // caller's member tag for PrepareStore (pools). Never fails: a key it cannot promote stays a
  // MISS.
  void Promote(const std::vector<std::string>& keys, uint32_t member,
               std::vector<SlotIndex::KeyState>* states);

  // Forgets the namespace's records in the tier and the keys queued for spilling (kvoffloadctl
  // drop, cleanup): no row stored before the call is promoted after it.
  absl::Status DropRecords();

  uint64_t namespace_id() const { return target_.namespace_id; }
  const std::string& label() const { return target_.label; }
  TierLinkStats stats() const;

 private:
  friend class TierManager;

  // The ready listener (under the index's lock): queue the key.
  void Queue(absl::string_view key);
  // The manager's spill thread: the next queued key, if any.
  bool PopSpill(std::string* key);
  // Starts the spill of `key`; true when a write is in flight (its end calls
  // TierManager::SpillEnded).
  bool StartSpill(const std::string& key);
  void EndPromotion(const std::string& key, RowRun run, absl::Time started, bool ok,
                    uint64_t bytes, std::shared_ptr<void> keepalive);

  const std::shared_ptr<TierManager> manager_;
  const TierTarget target_;

  mutable absl::Mutex mu_;
  std::deque<std::string> spill_queue_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<std::string, absl::Time> promoting_ ABSL_GUARDED_BY(mu_);
  TierLinkStats stats_ ABSL_GUARDED_BY(mu_);
};

class TierManager : public std::enable_shared_from_this<TierManager> {
 public:
  // `release` outlives the manager and every link.
  static std::shared_ptr<TierManager> Create(std::unique_ptr<tier::RecordStore> store,
                                             DeferredRelease* release, TierOptions options);
  ~TierManager();  // Shutdown()
  TierManager(const TierManager&) = delete;
  TierManager& operator=(const TierManager&) = delete;

  // A link to `target`'s index: its ready listener is set here, so call it before the index is
  // shared.
  std::shared_ptr<TierLink> Link(TierTarget target);

  // Waits until no spill is queued or in flight and no promotion is reading; false if that has
  // not happened within `timeout`.
  bool WaitIdle(absl::Duration timeout);

  // Stops the spill thread and waits for every I/O in flight and its callback (the store is
  // destroyed). Links keep working afterwards but promote and spill nothing. Idempotent.
  void Shutdown();

  const TierOptions& options() const { return options_; }
  // The largest row the store holds (RecordStore::max_record_bytes): larger rows are not linked.
  uint64_t max_row_bytes() const { return max_row_bytes_; }
  // The store's name ("disk") and counters (zero after Shutdown).
  const std::string& tier_name() const { return tier_name_; }
  tier::RecordStoreStats store_stats() const;
  // The sum of every link's counters, those of links gone included (gauges: live links only).
  TierLinkStats link_stats() const;

 private:
  friend class TierLink;

  TierManager(std::unique_ptr<tier::RecordStore> store, DeferredRelease* release,
              TierOptions options);
  void Wake();
  void SpillEnded();
  void PromotionStarted();
  void PromotionEnded();
  void SpillLoop();
  void Retire(const TierLinkStats& stats);

  const TierOptions options_;
  DeferredRelease* const release_;
  const std::string tier_name_;
  const uint64_t max_row_bytes_;
  // Every call into the store holds this shared; Shutdown holds it exclusively to destroy it.
  mutable absl::Mutex store_mu_;
  std::unique_ptr<tier::RecordStore> store_ ABSL_GUARDED_BY(store_mu_);

  mutable absl::Mutex mu_;
  absl::CondVar cv_;
  std::vector<std::weak_ptr<TierLink>> links_ ABSL_GUARDED_BY(mu_);
  bool work_ ABSL_GUARDED_BY(mu_) = false;
  uint64_t wakes_ ABSL_GUARDED_BY(mu_) = 0;  // Wake calls, so a scan knows it missed none
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  uint32_t spills_in_flight_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t promotions_in_flight_ ABSL_GUARDED_BY(mu_) = 0;
  TierLinkStats retired_ ABSL_GUARDED_BY(mu_);
  std::thread thread_;
};

}  // namespace kvoffload::daemon

#endif  // KVOFFLOAD_DAEMON_TIER_TIER_LINK_H_
