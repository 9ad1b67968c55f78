#include "daemon/tier/tier_link.h"

#include <algorithm>
#include <atomic>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/logging.h"

namespace kvoffload::daemon {
namespace {

using KeyState = SlotIndex::KeyState;

spdlog::logger* Log() {
  static auto* log = common::Logger("tier");
  return log;
}

// The reference an I/O holds: the target's owner and whatever keeps the row's memory alive.
std::shared_ptr<void> Both(std::shared_ptr<void> a, std::shared_ptr<void> b) {
  if (b == nullptr) return a;
  return std::make_shared<std::pair<std::shared_ptr<void>, std::shared_ptr<void>>>(std::move(a),
                                                                                   std::move(b));
}

}  // namespace

TierLink::TierLink(std::shared_ptr<TierManager> manager, TierTarget target)
    : manager_(std::move(manager)), target_(std::move(target)), stats_(manager_->num_tiers()) {}

TierLink::~TierLink() {
  std::vector<TierCounters> s = stats();
  for (TierCounters& c : s) c.spill_queue_depth = c.promotions_in_flight = 0;
  manager_->Retire(s);
}

void TierLink::Count(size_t tier, uint64_t TierCounters::*counter, uint64_t n) {
  absl::MutexLock lock(&mu_);
  stats_[tier].*counter += n;
}

void TierLink::Queue(absl::string_view key) {
  {
    absl::MutexLock lock(&mu_);
    const bool full = spill_queue_.size() >= manager_->options_.max_spill_queue;
    if (full) spill_queue_.pop_front();
    spill_queue_.emplace_back(key);
    for (TierCounters& c : stats_) {  // one queue for every tier
      ++c.spills_queued;
      if (full) ++c.spill_queue_dropped;
    }
  }
  manager_->Wake();
}

std::vector<std::string> TierLink::PopSpills(size_t max_keys) {
  std::vector<std::string> keys;
  absl::MutexLock lock(&mu_);
  while (keys.size() < max_keys && !spill_queue_.empty()) {
    // A key queued twice waits for the next batch: it is asked about after its first write began,
    // as it would be one key at a time.
    if (std::find(keys.begin(), keys.end(), spill_queue_.front()) != keys.end()) break;
    keys.push_back(std::move(spill_queue_.front()));
    spill_queue_.pop_front();
  }
  return keys;
}

uint32_t TierLink::StartSpills(size_t max_keys, size_t* taken) {
  *taken = 0;
  // Of the rows online now: a pool's index counts its offline members' segments too.
  const uint64_t max_pinned =
      std::max<uint64_t>(1, target_.index->counts().rows_online() / kPinnedShare);
  {
    absl::MutexLock lock(&mu_);
    if (spill_queue_.empty() || rows_pinned_ >= max_pinned) return 0;
    // Only this thread pins rows: the room cannot shrink before the writes below start.
    max_keys = std::min<uint64_t>(max_keys, max_pinned - rows_pinned_);
  }
  const size_t tiers = manager_->num_tiers();
  // Taken before the store lock, so the owner's last reference is never dropped under it.
  std::shared_ptr<void> owner = target_.lock_owner();
  // Popped under the store lock: DropRecords (exclusive) never falls between a pop and its write.
  absl::ReaderMutexLock store_lock(&manager_->store_mu_);
  const std::vector<std::string> keys = PopSpills(max_keys);
  *taken = keys.size();
  if (keys.empty()) return 0;
  if (owner == nullptr) {
    for (size_t t = 0; t < tiers; ++t) Count(t, &TierCounters::spills_gone, keys.size());
    return 0;
  }
  if (manager_->stores_.empty()) return 0;  // shut down
  // What each tier holds of the batch: one ContainsAll per tier (one round trip to a remote
  // tier). Empty for a tier that takes no rows of this size.
  std::vector<std::vector<bool>> held(tiers);
  for (size_t t = 0; t < tiers; ++t) {
    if (target_.row_bytes > manager_->max_row_bytes_[t]) continue;
    held[t] = manager_->stores_[t]->ContainsAll(target_.namespace_id, keys);
    const uint64_t n = std::count(held[t].begin(), held[t].end(), true);
    if (n > 0) Count(t, &TierCounters::spills_already_held, n);
  }
  uint32_t started = 0;
  for (size_t i = 0; i < keys.size(); ++i) {
    // The key's row counts as pinned from its first write to its last end; `writes` holds one
    // extra count until every write of the key has been started.
    auto writes = std::make_shared<std::atomic<uint32_t>>(1);
    {
      absl::MutexLock lock(&mu_);
      ++rows_pinned_;
    }
    for (size_t t = 0; t < tiers; ++t) {
      if (held[t].empty() || held[t][i]) continue;
      if (StartWrite(t, manager_->stores_[t].get(), keys[i], owner, writes)) ++started;
    }
    if (writes->fetch_sub(1) == 1) RowUnpinned();
  }
  return started;
}

void TierLink::RowUnpinned() {
  bool queued = false;
  {
    absl::MutexLock lock(&mu_);
    --rows_pinned_;
    queued = !spill_queue_.empty();
  }
  // The spill thread may have gone idle with this link's keys waiting for room.
  if (queued) manager_->Wake();
}

bool TierLink::StartWrite(size_t t, tier::RecordStore* store, const std::string& key,
                          const std::shared_ptr<void>& owner,
                          const std::shared_ptr<std::atomic<uint32_t>>& writes) {
  // One copy in flight per write: the row stays put until the last tier has read it.
  absl::StatusOr<RowRun> run = target_.index->copies().BeginSpill(key);
  if (!run.ok()) {  // evicted, reset or dropped since it was queued
    Count(t, &TierCounters::spills_gone);
    return false;
  }
  std::shared_ptr<void> memory_keepalive;
  uint8_t* memory = target_.row_memory(run->first_row, &memory_keepalive);
  if (memory == nullptr) {
    (void)target_.index->copies().End({*run});
    Count(t, &TierCounters::spills_gone);
    return false;
  }
  std::shared_ptr<void> keepalive = Both(owner, std::move(memory_keepalive));
  std::shared_ptr<TierLink> self = shared_from_this();
  const RowRun ended = *run;
  writes->fetch_add(1);
  absl::Status status = store->Write(
      target_.namespace_id, key, memory, target_.row_bytes,
      [self, t, ended, keepalive, writes](absl::Status written) mutable {
        // The row's memory is no longer read: it may be evicted or written again.
        (void)self->target_.index->copies().End({ended});
        if (writes->fetch_sub(1) == 1) self->RowUnpinned();
        uint64_t failed = 0;
        {
          absl::MutexLock lock(&self->mu_);
          TierCounters& c = self->stats_[t];
          if (written.ok()) {
            ++c.spills_ok;
            c.spill_bytes += self->target_.row_bytes;
          } else {
            failed = ++c.spills_failed;
          }
        }
        // The 1st, 2nd, 4th, 8th... failure: a tier that is down (a cluster away for an hour)
        // fails every spill, and a line per row would drown the log.
        if (!written.ok() && !absl::IsAborted(written) && (failed & (failed - 1)) == 0) {
          Log()->warn("{}: spill to the {} tier failed ({} failures): {}", self->target_.label,
                      self->manager_->names_[t], failed, written.ToString());
        }
        DeferredRelease* release = self->manager_->release_;
        std::shared_ptr<TierManager> manager = self->manager_;
        release->Defer(std::move(keepalive));
        release->Defer(std::move(self));
        manager->SpillEnded();
      });
  if (!status.ok()) {
    (void)target_.index->copies().End({ended});
    writes->fetch_sub(1);  // never the last: StartSpills holds one
    Count(t, &TierCounters::spills_failed);
    return false;
  }
  return true;
}

void TierLink::Promote(const std::vector<std::string>& keys, uint32_t member,
                       std::vector<KeyState>* states) {
  const absl::Time now = absl::Now();
  std::vector<std::string> misses;
  std::vector<int> miss_of(keys.size(), -1);  // position in `misses` of each key that missed
  {
    absl::MutexLock lock(&mu_);
    for (size_t i = 0; i < keys.size(); ++i) {
      KeyState& state = (*states)[i];
      if (state == KeyState::kMiss) {
        miss_of[i] = static_cast<int>(misses.size());
        misses.push_back(keys[i]);
      } else if (state == KeyState::kHitPending && !promoting_.empty()) {
        auto it = promoting_.find(keys[i]);
        if (it != promoting_.end() && now - it->second.since > manager_->options_.promote_timeout) {
          state = KeyState::kMiss;  // the engine recomputes rather than wait on the tier
          ++stats_[it->second.tier].promotions_timed_out;
        }
      }
    }
  }
  if (misses.empty()) return;
  std::shared_ptr<void> owner = target_.lock_owner();
  if (owner == nullptr) return;
  absl::ReaderMutexLock store_lock(&manager_->store_mu_);
  if (manager_->stores_.empty()) return;
  // Which tier holds each miss: the fastest first, each asked once about what the ones before
  // it lack (a remote tier answers in one batch).
  constexpr int kNowhere = -1;
  std::vector<int> source(misses.size(), kNowhere);
  std::vector<size_t> unknown(misses.size());
  for (size_t m = 0; m < misses.size(); ++m) unknown[m] = m;
  for (size_t t = 0; t < manager_->num_tiers() && !unknown.empty(); ++t) {
    if (target_.row_bytes > manager_->max_row_bytes_[t]) continue;
    std::vector<std::string> ask;
    for (size_t m : unknown) ask.push_back(misses[m]);
    const std::vector<bool> held = manager_->stores_[t]->ContainsAll(target_.namespace_id, ask);
    std::vector<size_t> still;
    for (size_t j = 0; j < unknown.size(); ++j) {
      if (held[j]) {
        source[unknown[j]] = static_cast<int>(t);
      } else {
        still.push_back(unknown[j]);
      }
    }
    unknown = std::move(still);
  }
  // The candidates: missed keys some tier holds, up to the first key that misses everywhere (a
  // prefix is loaded up to its first miss; what follows it would never be read).
  std::vector<std::string> wanted;
  absl::flat_hash_map<std::string, size_t> tier_of;
  for (size_t i = 0; i < keys.size(); ++i) {
    if ((*states)[i] != KeyState::kMiss) continue;
    if (miss_of[i] < 0 || source[miss_of[i]] == kNowhere) break;
    wanted.push_back(keys[i]);
    tier_of[keys[i]] = static_cast<size_t>(source[miss_of[i]]);
  }
  if (wanted.empty()) return;
  {
    absl::MutexLock lock(&mu_);
    for (const auto& [key, t] : tier_of) ++stats_[t].lookup_tier_hits;
  }
  // The keys this lookup found in the region go into the same call: present keys are skipped and
  // never evicted by it, so making room for the tail never evicts the head the engine is about
  // to load (a prefix's head is its least recently used part).
  std::vector<std::string> request;
  absl::flat_hash_map<absl::string_view, bool> seen;
  for (size_t i = 0; i < keys.size(); ++i) {
    if ((*states)[i] != KeyState::kMiss && seen.emplace(keys[i], true).second) {
      request.push_back(keys[i]);
    }
  }
  for (const std::string& key : wanted) {
    if (seen.emplace(key, true).second) request.push_back(key);
  }
  absl::StatusOr<SlotIndex::PrepareStoreResult> prepared =
      target_.index->PrepareStore(request, member);
  if (!prepared.ok()) return;  // no room (every row pinned or being written): misses
  std::shared_ptr<TierLink> self = shared_from_this();
  absl::flat_hash_map<std::string, bool> started;
  for (size_t i = 0; i < prepared->keys.size(); ++i) {
    const std::string& key = prepared->keys[i];
    const size_t t = tier_of[key];
    const RowRun run{prepared->rows[i], 1, prepared->ticket};
    std::shared_ptr<void> memory_keepalive;
    uint8_t* memory = target_.row_memory(run.first_row, &memory_keepalive);
    absl::Status status = memory == nullptr
                              ? absl::UnavailableError("the row's memory is gone")
                              : target_.index->copies().Begin(CopyDirection::kStore, {run});
    if (!status.ok()) {
      (void)target_.index->CompleteStore({key}, false);
      continue;
    }
    {
      absl::MutexLock lock(&mu_);
      promoting_[key] = Promoting{now, t};
      ++stats_[t].promotions_started;
      ++stats_[t].promotions_in_flight;
    }
    manager_->PromotionStarted();
    std::shared_ptr<void> keepalive = Both(owner, std::move(memory_keepalive));
    status = manager_->stores_[t]->Read(
        target_.namespace_id, key, memory, target_.row_bytes,
        [self, t, key, run, now, keepalive](absl::StatusOr<uint64_t> read) mutable {
          const bool ok = read.ok() && *read == self->target_.row_bytes;
          if (!ok) {
            Log()->warn("{}: promotion from the {} tier failed: {}", self->target_.label,
                        self->manager_->names_[t],
                        read.ok() ? absl::StrCat("a record of ", *read, " bytes for rows of ",
                                                 self->target_.row_bytes)
                                  : read.status().ToString());
          }
          self->EndPromotion(t, key, run, now, ok, ok ? *read : 0, std::move(keepalive));
        });
    if (!status.ok()) {  // refused at once: the row was never written
      EndPromotion(t, key, run, now, false, 0, nullptr);
      continue;
    }
    started[key] = true;
  }
  // What started is pending; the rest stays a miss.
  for (size_t i = 0; i < keys.size() && !started.empty(); ++i) {
    if ((*states)[i] == KeyState::kMiss && started.contains(keys[i])) {
      (*states)[i] = KeyState::kHitPending;
    }
  }
}

void TierLink::EndPromotion(size_t tier, const std::string& key, RowRun run, absl::Time started,
                            bool ok, uint64_t bytes, std::shared_ptr<void> keepalive) {
  // The store job's end, then its commit: the row is READY now, or freed.
  (void)target_.index->copies().EndStore({run}, ok);
  (void)target_.index->CompleteStore({key}, ok);
  {
    absl::MutexLock lock(&mu_);
    promoting_.erase(key);
    TierCounters& c = stats_[tier];
    --c.promotions_in_flight;
    if (ok) {
      ++c.promotions_ok;
      c.promotion_bytes += bytes;
      const double seconds = absl::ToDoubleSeconds(absl::Now() - started);
      c.promotion_seconds_sum += seconds;
      c.promotion_seconds_max = std::max(c.promotion_seconds_max, seconds);
    } else {
      ++c.promotions_failed;
    }
  }
  if (keepalive != nullptr) manager_->release_->Defer(std::move(keepalive));
  manager_->PromotionEnded();
}

absl::Status TierLink::DropRecords() {
  // Exclusive: no spill of this link is between its pop and its write now, and the queue is
  // empty, so nothing written before this call survives it (a write still in flight is
  // discarded by the tier: RecordStore::DropNamespace).
  absl::WriterMutexLock store_lock(&manager_->store_mu_);
  {
    absl::MutexLock lock(&mu_);
    spill_queue_.clear();
  }
  absl::Status first;
  for (const auto& store : manager_->stores_) {
    absl::Status dropped = store->DropNamespace(target_.namespace_id);
    if (first.ok()) first = dropped;
  }
  return first;
}

std::vector<TierCounters> TierLink::stats() const {
  absl::MutexLock lock(&mu_);
  std::vector<TierCounters> s = stats_;
  for (TierCounters& c : s) c.spill_queue_depth = spill_queue_.size();
  return s;
}

}  // namespace kvoffload::daemon
