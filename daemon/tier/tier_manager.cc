#include "daemon/tier/tier_manager.h"

#include <algorithm>
#include <utility>

#include "daemon/tier/tier_link.h"

namespace kvoffload::daemon {
namespace {

std::vector<std::string> Names(const std::vector<std::unique_ptr<tier::RecordStore>>& stores) {
  std::vector<std::string> names;
  for (const auto& s : stores) names.emplace_back(s->tier_name());
  return names;
}

std::vector<uint64_t> MaxRows(const std::vector<std::unique_ptr<tier::RecordStore>>& stores) {
  std::vector<uint64_t> max;
  for (const auto& s : stores) max.push_back(s->max_record_bytes());
  return max;
}

}  // namespace

void TierCounters::Add(const TierCounters& s) {
  spills_queued += s.spills_queued;
  spills_ok += s.spills_ok;
  spill_bytes += s.spill_bytes;
  spills_failed += s.spills_failed;
  spills_already_held += s.spills_already_held;
  spills_gone += s.spills_gone;
  spill_queue_dropped += s.spill_queue_dropped;
  lookup_tier_hits += s.lookup_tier_hits;
  promotions_started += s.promotions_started;
  promotions_ok += s.promotions_ok;
  promotions_failed += s.promotions_failed;
  promotion_bytes += s.promotion_bytes;
  promotions_timed_out += s.promotions_timed_out;
  promotion_seconds_sum += s.promotion_seconds_sum;
  promotion_seconds_max = std::max(promotion_seconds_max, s.promotion_seconds_max);
  spill_queue_depth += s.spill_queue_depth;
  promotions_in_flight += s.promotions_in_flight;
}

std::shared_ptr<TierManager> TierManager::Create(
    std::vector<std::unique_ptr<tier::RecordStore>> stores, DeferredRelease* release,
    TierOptions options) {
  std::shared_ptr<TierManager> manager(new TierManager(std::move(stores), release, options));
  manager->thread_ = std::thread([raw = manager.get()] { raw->SpillLoop(); });
  return manager;
}

TierManager::TierManager(std::vector<std::unique_ptr<tier::RecordStore>> stores,
                         DeferredRelease* release, TierOptions options)
    : options_(options),
      release_(release),
      names_(Names(stores)),
      max_row_bytes_(MaxRows(stores)),
      stores_(std::move(stores)),
      retired_(names_.size()) {}

TierManager::~TierManager() { Shutdown(); }

std::shared_ptr<TierLink> TierManager::Link(TierTarget target) {
  if (std::none_of(max_row_bytes_.begin(), max_row_bytes_.end(),
                   [&](uint64_t max) { return target.row_bytes <= max; })) {
    return nullptr;
  }
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

void TierManager::Retire(const std::vector<TierCounters>& counters) {
  absl::MutexLock lock(&mu_);
  for (size_t t = 0; t < counters.size() && t < retired_.size(); ++t) retired_[t].Add(counters[t]);
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
    // One batch per link per turn (more while a batch starts no write), until a whole turn finds
    // nothing or the depth is reached. A batch is no larger than the free slots, and each key
    // that starts writes adds at least one to spills_in_flight_: at most max_spills_in_flight
    // rows are pinned.
    bool found = false;
    for (size_t n = 0; n < links.size(); ++n) {
      TierLink& link = *links[(next + n) % links.size()];
      for (;;) {
        size_t free_slots = 0;
        {
          absl::MutexLock lock(&mu_);
          if (spills_in_flight_ < options_.max_spills_in_flight) {
            free_slots = options_.max_spills_in_flight - spills_in_flight_;
          }
        }
        if (free_slots == 0) {
          found = true;  // keys may wait: the next turn comes once a slot frees
          break;
        }
        const size_t batch =
            std::min<size_t>(free_slots, std::max<uint32_t>(options_.max_spill_batch, 1));
        size_t taken = 0;
        const uint32_t writes = link.StartSpills(batch, &taken);
        if (taken == 0) break;
        found = true;
        if (writes > 0) {
          absl::MutexLock lock(&mu_);
          spills_in_flight_ += writes;
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
  std::vector<std::unique_ptr<tier::RecordStore>> stores;
  {
    absl::WriterMutexLock store_lock(&store_mu_);
    stores = std::move(stores_);
    stores_.clear();
  }
  stores.clear();  // each waits for its I/O in flight and their callbacks
}

std::vector<TierManager::TierLine> TierManager::stats() const {
  std::vector<TierLine> lines(names_.size());
  {
    absl::ReaderMutexLock store_lock(&store_mu_);
    for (size_t t = 0; t < lines.size(); ++t) {
      lines[t].name = names_[t];
      if (t < stores_.size()) lines[t].store = stores_[t]->record_stats();
    }
  }
  std::vector<std::shared_ptr<TierLink>> links;
  {
    absl::MutexLock lock(&mu_);
    for (size_t t = 0; t < lines.size(); ++t) lines[t].links = retired_[t];
    for (const std::weak_ptr<TierLink>& weak : links_) {
      if (std::shared_ptr<TierLink> l = weak.lock()) links.push_back(std::move(l));
    }
  }
  for (const auto& link : links) {
    const std::vector<TierCounters> s = link->stats();
    for (size_t t = 0; t < lines.size(); ++t) lines[t].links.Add(s[t]);
  }
  return lines;
}

}  // namespace kvoffload::daemon
