#include "daemon/tier/tier_link.h"

#include <algorithm>
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

void Add(TierLinkStats* to, const TierLinkStats& s) {
  to->spills_queued += s.spills_queued;
  to->spills_ok += s.spills_ok;
  to->spill_bytes += s.spill_bytes;
  to->spills_failed += s.spills_failed;
  to->spills_already_held += s.spills_already_held;
  to->spills_gone += s.spills_gone;
  to->spill_queue_dropped += s.spill_queue_dropped;
  to->lookup_tier_hits += s.lookup_tier_hits;
  to->promotions_started += s.promotions_started;
  to->promotions_ok += s.promotions_ok;
  to->promotions_failed += s.promotions_failed;
  to->promotion_bytes += s.promotion_bytes;
  to->promotions_timed_out += s.promotions_timed_out;
  to->promotion_seconds_sum += s.promotion_seconds_sum;
  to->promotion_seconds_max = std::max(to->promotion_seconds_max, s.promotion_seconds_max);
  to->spill_queue_depth += s.spill_queue_depth;
  to->promotions_in_flight += s.promotions_in_flight;
}

}  // namespace

// ---- TierLink ---------------------------------------------------------------------------------

TierLink::TierLink(std::shared_ptr<TierManager> manager, TierTarget target)
    : manager_(std::move(manager)), target_(std::move(target)) {}

TierLink::~TierLink() {
  TierLinkStats s = stats();
  s.spill_queue_depth = 0;
  s.promotions_in_flight = 0;
  manager_->Retire(s);
}

void TierLink::Queue(absl::string_view key) {
  {
    absl::MutexLock lock(&mu_);
    if (spill_queue_.size() >= manager_->options_.max_spill_queue) {
      spill_queue_.pop_front();
      ++stats_.spill_queue_dropped;
    }
    spill_queue_.emplace_back(key);
    ++stats_.spills_queued;
  }
  manager_->Wake();
}

bool TierLink::PopSpill(std::string* key) {
  absl::MutexLock lock(&mu_);
  if (spill_queue_.empty()) return false;
  *key = std::move(spill_queue_.front());
  spill_queue_.pop_front();
  return true;
}

bool TierLink::StartSpill(const std::string& key) {
  auto count = [this](uint64_t TierLinkStats::*counter) {
    absl::MutexLock lock(&mu_);
    ++(stats_.*counter);
  };
  std::shared_ptr<void> owner = target_.lock_owner();
  if (owner == nullptr) {
    count(&TierLinkStats::spills_gone);
    return false;
  }
  absl::ReaderMutexLock store_lock(&manager_->store_mu_);
  tier::RecordStore* store = manager_->store_.get();
  if (store == nullptr) return false;
  if (store->ContainsAll(target_.namespace_id, {key})[0]) {
    count(&TierLinkStats::spills_already_held);
    return false;
  }
  absl::StatusOr<RowRun> run = target_.index->BeginSpill(key);
  if (!run.ok()) {  // evicted, reset or dropped since it was queued
    count(&TierLinkStats::spills_gone);
    return false;
  }
  std::shared_ptr<void> memory_keepalive;
  uint8_t* memory = target_.row_memory(run->first_row, &memory_keepalive);
  if (memory == nullptr) {
    (void)target_.index->EndCopyRuns({*run});
    count(&TierLinkStats::spills_gone);
    return false;
  }
  std::shared_ptr<void> keepalive = Both(std::move(owner), std::move(memory_keepalive));
  std::shared_ptr<TierLink> self = shared_from_this();
  const RowRun ended = *run;
  absl::Status started = store->Write(
      target_.namespace_id, key, memory, target_.row_bytes,
      [self, ended, keepalive](absl::Status status) mutable {
        // The row's memory is no longer read: it may be evicted or written again.
        (void)self->target_.index->EndCopyRuns({ended});
        {
          absl::MutexLock lock(&self->mu_);
          if (status.ok()) {
            ++self->stats_.spills_ok;
            self->stats_.spill_bytes += self->target_.row_bytes;
          } else {
            ++self->stats_.spills_failed;
          }
        }
        if (!status.ok() && !absl::IsAborted(status)) {
          Log()->warn("{}: spill to the {} tier failed: {}", self->target_.label,
                      self->manager_->tier_name_, std::string(status.message()));
        }
        DeferredRelease* release = self->manager_->release_;
        std::shared_ptr<TierManager> manager = self->manager_;
        release->Defer(std::move(keepalive));
        release->Defer(std::move(self));
        manager->SpillEnded();
      });
  if (!started.ok()) {
    (void)target_.index->EndCopyRuns({ended});
    count(&TierLinkStats::spills_failed);
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
        if (it != promoting_.end() && now - it->second > manager_->options_.promote_timeout) {
          state = KeyState::kMiss;  // the engine recomputes rather than wait on the disk
          ++stats_.promotions_timed_out;
        }
      }
    }
  }
  if (misses.empty()) return;
  std::shared_ptr<void> owner = target_.lock_owner();
  if (owner == nullptr) return;
  absl::ReaderMutexLock store_lock(&manager_->store_mu_);
  tier::RecordStore* store = manager_->store_.get();
  if (store == nullptr) return;
  const std::vector<bool> held = store->ContainsAll(target_.namespace_id, misses);
  // The candidates: missed keys the tier holds, up to the first key that misses everywhere (a
  // prefix is loaded up to its first miss; what follows it would never be read).
  std::vector<std::string> wanted;
  for (size_t i = 0; i < keys.size(); ++i) {
    if ((*states)[i] != KeyState::kMiss) continue;
    if (miss_of[i] < 0 || !held[miss_of[i]]) break;
    wanted.push_back(keys[i]);
  }
  if (wanted.empty()) return;
  {
    absl::MutexLock lock(&mu_);
    stats_.lookup_tier_hits += wanted.size();
  }
  absl::StatusOr<SlotIndex::PrepareStoreResult> prepared =
      target_.index->PrepareStore(wanted, member);
  if (!prepared.ok()) return;  // no room (every row pinned or being written): misses
  std::shared_ptr<TierLink> self = shared_from_this();
  std::vector<std::string> started_keys;
  for (size_t i = 0; i < prepared->keys.size(); ++i) {
    const std::string& key = prepared->keys[i];
    const RowRun run{prepared->rows[i], 1, prepared->ticket};
    std::shared_ptr<void> memory_keepalive;
    uint8_t* memory = target_.row_memory(run.first_row, &memory_keepalive);
    absl::Status status =
        memory == nullptr ? absl::UnavailableError("the row's memory is gone")
                          : target_.index->BeginCopyRuns(CopyDirection::kStore, {run});
    if (status.ok()) {
      {
        absl::MutexLock lock(&mu_);
        promoting_[key] = now;
        ++stats_.promotions_started;
        ++stats_.promotions_in_flight;
      }
      manager_->PromotionStarted();
      std::shared_ptr<void> keepalive = Both(owner, std::move(memory_keepalive));
      status = store->Read(
          target_.namespace_id, key, memory, target_.row_bytes,
          [self, key, run, now, keepalive](absl::StatusOr<uint64_t> read) mutable {
            const bool ok = read.ok() && *read == self->target_.row_bytes;
            if (!ok) {
              Log()->warn("{}: promotion from the {} tier failed: {}", self->target_.label,
                          self->manager_->tier_name_,
                          read.ok() ? absl::StrCat("a record of ", *read, " bytes for rows of ",
                                                   self->target_.row_bytes)
                                    : read.status().ToString());
            }
            self->EndPromotion(key, run, now, ok, ok ? *read : 0, std::move(keepalive));
          });
      if (!status.ok()) {  // refused at once: the row was never written
        EndPromotion(key, run, now, false, 0, nullptr);
        continue;
      }
      started_keys.push_back(key);
    } else {
      (void)target_.index->CompleteStore({key}, false);
    }
  }
  // What started is pending; the rest stays a miss.
  if (started_keys.empty()) return;
  absl::flat_hash_map<absl::string_view, bool> started;
  for (const std::string& key : started_keys) started[key] = true;
  for (size_t i = 0; i < keys.size(); ++i) {
    if ((*states)[i] == KeyState::kMiss && started.contains(keys[i])) {
      (*states)[i] = KeyState::kHitPending;
    }
  }
}

void TierLink::EndPromotion(const std::string& key, RowRun run, absl::Time started, bool ok,
                            uint64_t bytes, std::shared_ptr<void> keepalive) {
  // The store job's end, then its commit: the row is READY now, or freed.
  (void)target_.index->EndStoreCopyRuns({run}, ok);
  (void)target_.index->CompleteStore({key}, ok);
  {
    absl::MutexLock lock(&mu_);
    promoting_.erase(key);
    --stats_.promotions_in_flight;
    if (ok) {
      ++stats_.promotions_ok;
      stats_.promotion_bytes += bytes;
      const double seconds = absl::ToDoubleSeconds(absl::Now() - started);
      stats_.promotion_seconds_sum += seconds;
      stats_.promotion_seconds_max = std::max(stats_.promotion_seconds_max, seconds);
    } else {
      ++stats_.promotions_failed;
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
  if (manager_->store_ == nullptr) return absl::OkStatus();
  return manager_->store_->DropNamespace(target_.namespace_id);
}

TierLinkStats TierLink::stats() const {
  absl::MutexLock lock(&mu_);
  TierLinkStats s = stats_;
  s.spill_queue_depth = spill_queue_.size();
  return s;
}

// ---- TierManager ------------------------------------------------------------------------------

std::shared_ptr<TierManager> TierManager::Create(std::unique_ptr<tier::RecordStore> store,
                                                 DeferredRelease* release, TierOptions options) {
  std::shared_ptr<TierManager> manager(new TierManager(std::move(store), release, options));
  manager->thread_ = std::thread([raw = manager.get()] { raw->SpillLoop(); });
  return manager;
}

TierManager::TierManager(std::unique_ptr<tier::RecordStore> store, DeferredRelease* release,
                         TierOptions options)
    : options_(options),
      release_(release),
      tier_name_(store->tier_name()),
      max_row_bytes_(store->max_record_bytes()),
      store_(std::move(store)) {}

TierManager::~TierManager() { Shutdown(); }

std::shared_ptr<TierLink> TierManager::Link(TierTarget target) {
  auto link = std::make_shared<TierLink>(shared_from_this(), std::move(target));
  // The listener holds the link weakly: the index outlives nothing of it.
  std::weak_ptr<TierLink> weak = link;
  link->target_.index->SetReadyListener([weak](absl::string_view key) {
    if (std::shared_ptr<TierLink> l = weak.lock()) l->Queue(key);
  });
  absl::MutexLock lock(&mu_);
  links_.erase(std::remove_if(links_.begin(), links_.end(),
                              [](const std::weak_ptr<TierLink>& l) { return l.expired(); }),
               links_.end());
  links_.push_back(link);
  return link;
}

void TierManager::Wake() {
  absl::MutexLock lock(&mu_);
  work_ = true;
  ++wakes_;
  cv_.SignalAll();
}

void TierManager::SpillEnded() {
  absl::MutexLock lock(&mu_);
  --spills_in_flight_;
  cv_.SignalAll();
}

void TierManager::PromotionStarted() {
  absl::MutexLock lock(&mu_);
  ++promotions_in_flight_;
}

void TierManager::PromotionEnded() {
  absl::MutexLock lock(&mu_);
  --promotions_in_flight_;
  cv_.SignalAll();
}

bool TierManager::WaitIdle(absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  absl::MutexLock lock(&mu_);
  while (work_ || spills_in_flight_ > 0 || promotions_in_flight_ > 0) {
    if (cv_.WaitWithDeadline(&mu_, deadline)) {
      return !work_ && spills_in_flight_ == 0 && promotions_in_flight_ == 0;
    }
  }
  return true;
}

void TierManager::Retire(const TierLinkStats& stats) {
  absl::MutexLock lock(&mu_);
  Add(&retired_, stats);
}

void TierManager::SpillLoop() {
  size_t next = 0;  // round robin over links
  for (;;) {
    std::vector<std::shared_ptr<TierLink>> links;
    uint64_t wakes_seen = 0;
    {
      absl::MutexLock lock(&mu_);
      while (!stopping_ && (!work_ || spills_in_flight_ >= options_.max_spills_in_flight)) {
        cv_.Wait(&mu_);
      }
      if (stopping_) return;
      wakes_seen = wakes_;
      for (const std::weak_ptr<TierLink>& weak : links_) {
        if (std::shared_ptr<TierLink> l = weak.lock()) links.push_back(std::move(l));
      }
    }
    // One key per link per turn, until a whole turn finds nothing or the depth is reached.
    bool found = false;
    for (size_t n = 0; n < links.size(); ++n) {
      TierLink& link = *links[(next + n) % links.size()];
      std::string key;
      while (link.PopSpill(&key)) {
        found = true;
        if (link.StartSpill(key)) {
          absl::MutexLock lock(&mu_);
          ++spills_in_flight_;
          break;
        }
      }
      absl::MutexLock lock(&mu_);
      if (stopping_ || spills_in_flight_ >= options_.max_spills_in_flight) break;
    }
    next = links.empty() ? 0 : next + 1;
    if (!found) {
      absl::MutexLock lock(&mu_);
      // Idle only if nothing was queued since the scan began (its Wake counted).
      if (wakes_ == wakes_seen) {
        work_ = false;
        cv_.SignalAll();
      }
    }
  }
}

void TierManager::Shutdown() {
  {
    absl::MutexLock lock(&mu_);
    if (stopping_ && !thread_.joinable()) return;
    stopping_ = true;
    cv_.SignalAll();
  }
  // The owner calls Shutdown before it drops its reference, so this never runs on the spill
  // thread; if it does (a bug), detaching beats std::terminate.
  if (thread_.joinable()) {
    if (thread_.get_id() == std::this_thread::get_id()) {
      thread_.detach();
    } else {
      thread_.join();
    }
  }
  std::unique_ptr<tier::RecordStore> store;
  {
    absl::WriterMutexLock store_lock(&store_mu_);
    store = std::move(store_);
  }
  store.reset();  // waits for every I/O in flight and its callback
}

tier::RecordStoreStats TierManager::store_stats() const {
  absl::ReaderMutexLock store_lock(&store_mu_);
  return store_ == nullptr ? tier::RecordStoreStats{} : store_->record_stats();
}

TierLinkStats TierManager::link_stats() const {
  std::vector<std::shared_ptr<TierLink>> links;
  TierLinkStats total;
  {
    absl::MutexLock lock(&mu_);
    total = retired_;
    for (const std::weak_ptr<TierLink>& weak : links_) {
      if (std::shared_ptr<TierLink> l = weak.lock()) links.push_back(std::move(l));
    }
  }
  for (const auto& link : links) Add(&total, link->stats());
  return total;
}

}  // namespace kvoffload::daemon
