// TierLink: one row index (an engine's private index or a pool's) wired to the node's tiers
// (tier_manager.h; docs/disk_tier.md "Spill and promote"). The link
//   - spills: every key that becomes READY in its index (SlotIndex::SetReadyListener) is queued,
//     and the manager's spill thread takes the queue in batches (up to the free spill slots, at
//     most TierOptions::max_spill_batch keys), asks each tier once per batch which keys it holds
//     (ContainsAll: one round trip to a remote tier) and writes each row to every tier that lacks
//     it while IndexCopies::BeginSpill (index.copies()) keeps the row from being evicted, reset or
//     parked — so a row evicted later is already in a tier;
//   - promotes: a Lookup's keys that miss the region but are in a tier (up to the first key that
//     is nowhere: vLLM loads prefixes) get rows (PrepareStore, as any store) that the first tier
//     holding each reads into; Lookup answers HIT_PENDING for them, and once the read is checked
//     the rows are READY (copies().EndStore + CompleteStore) and load like any row. A promotion
//     still reading after `promote_timeout` looks up as a MISS, so no request waits on a slow
//     tier longer.
//
//   std::shared_ptr<TierLink> link = tiers->Link(target);  // before the index is shared
//   std::vector<SlotIndex::KeyState> states = index.Lookup(keys, member);
//   link->Promote(keys, member, &states);                  // MISS → HIT_PENDING where it can
//
// Namespaces (tier_namespace.h): one per link, from who may read the rows and their layout, so a
// record is never promoted into another owner's or another layout's rows.
//
// Thread-safety: thread-safe. Lock order: TierManager::store_mu_ (shared), then a SlotIndex's
// lock, then the link's mutex, then TierManager::mu_ (the ready listener runs under the index's
// lock and takes only the last two). The link calls no index and no store while holding its own
// mutex. Ownership: an engine or pool owns its link; the link shares its manager. An I/O in flight
// holds its target alive (TierTarget::lock_owner) and hands that reference to DeferredRelease
// when it ends.
#ifndef KVOFFLOAD_DAEMON_TIER_TIER_LINK_H_
#define KVOFFLOAD_DAEMON_TIER_TIER_LINK_H_

#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "daemon/index/slot_index.h"
#include "daemon/lifetime/deferred_release.h"
#include "daemon/tier/record_store.h"
#include "daemon/tier/tier_manager.h"

namespace kvoffload::daemon {

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

  // Forgets the namespace's records in every tier and the keys queued for spilling (kvoffloadctl
  // drop, cleanup): no row stored before the call is promoted after it.
  absl::Status DropRecords();

  uint64_t namespace_id() const { return target_.namespace_id; }
  const std::string& label() const { return target_.label; }
  // Its counters, one per tier of the manager.
  std::vector<TierCounters> stats() const;

 private:
  friend class TierManager;

  // The ready listener (under the index's lock): queue the key.
  void Queue(absl::string_view key);
  // The manager's spill thread: takes up to `max_keys` queued keys (*taken: how many), asks each
  // tier once which of them it holds (one ContainsAll per tier per batch) and starts the writes
  // of the rows each tier lacks; returns the writes in flight (each end calls
  // TierManager::SpillEnded). A batch stops before a key it holds already.
  uint32_t StartSpills(size_t max_keys, size_t* taken);
  std::vector<std::string> PopSpills(size_t max_keys);
  // Pins `key`'s row (IndexCopies::BeginSpill) and writes it to tier `t`; false (counted) if the
  // row is gone or the tier refused. Under the manager's store lock, shared.
  // `writes` counts the key's writes in flight (one more while they are being started).
  bool StartWrite(size_t t, tier::RecordStore* store, const std::string& key,
                  const std::shared_ptr<void>& owner,
                  const std::shared_ptr<std::atomic<uint32_t>>& writes);
  // The last write of a pinned row ended: one row of room more.
  void RowUnpinned() ABSL_LOCKS_EXCLUDED(mu_);
  void EndPromotion(size_t tier, const std::string& key, RowRun run, absl::Time started, bool ok,
                    uint64_t bytes, std::shared_ptr<void> keepalive);
  // Counts one event on `tier`'s counters (queue events on every tier's).
  void Count(size_t tier, uint64_t TierCounters::*counter, uint64_t n = 1);

  // Spills pin at most this share of the index's online rows (at least one), however many spill
  // slots the node has: a small region keeps rows for its own stores (a 16-row region with 8
  // rows pinned refused them).
  static constexpr uint64_t kPinnedShare = 4;

  const std::shared_ptr<TierManager> manager_;
  const TierTarget target_;

  mutable absl::Mutex mu_;
  uint64_t rows_pinned_ ABSL_GUARDED_BY(mu_) = 0;  // rows with a spill write in flight
  std::deque<std::string> spill_queue_ ABSL_GUARDED_BY(mu_);
  struct Promoting {
    absl::Time since;
    size_t tier = 0;
  };
  absl::flat_hash_map<std::string, Promoting> promoting_ ABSL_GUARDED_BY(mu_);
  std::vector<TierCounters> stats_ ABSL_GUARDED_BY(mu_);  // one per tier
};

}  // namespace kvoffload::daemon

#endif  // KVOFFLOAD_DAEMON_TIER_TIER_LINK_H_
