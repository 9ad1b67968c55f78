#include "daemon/tier/cluster/slot_map_refresher.h"

#include <hiredis/hiredis.h>

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "daemon/tier/cluster/key_slot.h"

namespace kvoffload::tier::cluster {
namespace {

spdlog::logger* Log() {
  static auto* log = common::Logger("tier");
  return log;
}

// CLUSTER SLOTS: [[first, last, [ip, port, id...], [replica...]...]...]. An empty ip means "the
// node you asked".
absl::StatusOr<std::vector<SlotRange>> ParseClusterSlots(const redisReply* r,
                                                         const NodeAddress& asked) {
  if (r->type == REDIS_REPLY_ERROR) {
    return ErrorReplyStatus(absl::string_view(r->str, r->len), "CLUSTER SLOTS");
  }
  if (r->type != REDIS_REPLY_ARRAY) {
    return absl::InternalError("CLUSTER SLOTS: reply is not an array");
  }
  std::vector<SlotRange> ranges;
  for (size_t i = 0; i < r->elements; ++i) {
    const redisReply* e = r->element[i];
    if (e->type != REDIS_REPLY_ARRAY || e->elements < 3 ||
        e->element[0]->type != REDIS_REPLY_INTEGER || e->element[1]->type != REDIS_REPLY_INTEGER ||
        e->element[2]->type != REDIS_REPLY_ARRAY || e->element[2]->elements < 2 ||
        e->element[2]->element[0]->type != REDIS_REPLY_STRING ||
        e->element[2]->element[1]->type != REDIS_REPLY_INTEGER) {
      return absl::InternalError(absl::StrCat("CLUSTER SLOTS: entry ", i, " malformed"));
    }
    SlotRange range;
    range.first = static_cast<int>(e->element[0]->integer);
    range.last = static_cast<int>(e->element[1]->integer);
    const redisReply* master = e->element[2];
    range.master.host = std::string(master->element[0]->str, master->element[0]->len);
    range.master.port = static_cast<int>(master->element[1]->integer);
    if (range.master.host.empty() || range.master.host == "?") range.master.host = asked.host;
    ranges.push_back(std::move(range));
  }
  return ranges;
}

}  // namespace

SlotMapRefresher::SlotMapRefresher(const ClusterTierOptions& options, AskFn ask)
    : options_(options), ask_(std::move(ask)), retry_after_(options.refresh_interval) {}

SlotMapRefresher::~SlotMapRefresher() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  if (thread_.joinable()) thread_.join();
}

void SlotMapRefresher::Start() {
  thread_ = std::thread([this] { RefreshLoop(); });
}

std::shared_ptr<const SlotTable> SlotMapRefresher::table() const {
  absl::MutexLock lock(&mu_);
  return table_;
}

absl::Status SlotMapRefresher::Load() {
  std::vector<NodeAddress> candidates;
  {
    absl::MutexLock lock(&mu_);
    if (table_ != nullptr) candidates = table_->masters();
  }
  for (const NodeAddress& s : options_.seeds) {
    if (std::find(candidates.begin(), candidates.end(), s) == candidates.end()) {
      candidates.push_back(s);
    }
  }
  absl::Status last = absl::UnavailableError("no node to ask for the slot map");
  // A node that answered wrongly (credentials refused, not a cluster) says more than one that did
  // not answer: its error is returned whatever the order of the nodes.
  absl::Status wrong = absl::OkStatus();
  for (const NodeAddress& a : candidates) {
    {
      // The destructor waits for one node's bound at most, not for every node of a hung cluster.
      absl::MutexLock lock(&mu_);
      if (stopping_) return absl::CancelledError("slot map refresher stopping");
    }
    // Each node its own bound, so that a hung one costs one timeout, not the whole refresh.
    const absl::Time deadline = absl::Now() + options_.connect_timeout + options_.command_timeout;
    absl::StatusOr<Reply> r = ask_(a, deadline);
    if (!r.ok()) {
      last = r.status();
      if (!absl::IsUnavailable(last) && wrong.ok()) wrong = last;
      if (absl::IsUnauthenticated(last) || absl::IsPermissionDenied(last)) break;
      continue;
    }
    absl::StatusOr<std::vector<SlotRange>> ranges = ParseClusterSlots(r->get(), a);
    absl::StatusOr<SlotTable> table =
        ranges.ok() ? SlotTable::Build(*ranges) : absl::StatusOr<SlotTable>(ranges.status());
    if (table.ok() && table->covered_slots() == 0) {
      // A node not (or no longer) part of a cluster, e.g. one restarted and not yet joined: a
      // map that routes nothing is no map; keep the last one and keep trying.
      table = absl::UnavailableError(absl::StrCat(a.ToString(), " serves no slot"));
    }
    if (!table.ok()) {
      last = table.status();
      if (!absl::IsUnavailable(last) && wrong.ok()) wrong = last;
      continue;
    }
    const int covered = table->covered_slots();
    const size_t masters = table->masters().size();
    auto next = std::make_shared<const SlotTable>(*std::move(table));
    refreshes_.fetch_add(1, std::memory_order_relaxed);
    connected_.store(true, std::memory_order_relaxed);
    absl::MutexLock lock(&mu_);
    if (covered != kClusterSlots) {
      Log()->warn("cluster tier: slot map from {} covers {} of {} slots", a.ToString(), covered,
                  kClusterSlots);
    }
    if (failures_in_row_ > 0) {
      Log()->info("cluster tier: slot map loaded from {} ({} masters) after {} failed tries",
                  a.ToString(), masters, failures_in_row_);
    }
    table_ = std::move(next);
    last_refresh_ = absl::Now();
    retry_after_ = options_.refresh_interval;
    failures_in_row_ = 0;
    return absl::OkStatus();
  }
  if (!wrong.ok()) last = wrong;
  refresh_failures_.fetch_add(1, std::memory_order_relaxed);
  connected_.store(false, std::memory_order_relaxed);
  absl::MutexLock lock(&mu_);
  // Try again on the thread, backing off: refresh_interval, then doubling, at most
  // max(max_refresh_backoff, refresh_interval) apart, and 10 ms at least (never a busy loop,
  // whatever refresh_interval says).
  const absl::Duration longest = std::max(options_.max_refresh_backoff, options_.refresh_interval);
  retry_after_ =
      std::min(std::max(failures_in_row_ == 0 ? options_.refresh_interval : retry_after_ * 2,
                        absl::Milliseconds(10)),
               longest);
  if (failures_in_row_ == 0 && absl::IsUnavailable(last)) {
    Log()->warn(
        "cluster tier: no node answers for the slot map ({}); retrying in the "
        "background, at most {} apart",
        last.ToString(), absl::FormatDuration(longest));
  } else if (failures_in_row_ == 0) {
    Log()->warn("cluster tier: slot map not loaded: {}", last.ToString());
  } else {
    Log()->debug("cluster tier: slot map load {} failed: {}", failures_in_row_ + 1,
                 last.ToString());
  }
  ++failures_in_row_;
  last_refresh_ = absl::Now();
  refresh_wanted_ = true;
  return last;
}

void SlotMapRefresher::RequestRefresh() {
  absl::MutexLock lock(&mu_);
  refresh_wanted_ = true;
}

void SlotMapRefresher::RefreshLoop() {
  while (true) {
    absl::Time not_before;
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(
          +[](SlotMapRefresher* r)
               ABSL_EXCLUSIVE_LOCKS_REQUIRED(r->mu_) { return r->stopping_ || r->refresh_wanted_; },
          this));
      if (stopping_) return;
      not_before = last_refresh_ + retry_after_;
    }
    // Rate limit: wait out the interval (or the stop).
    {
      absl::MutexLock lock(&mu_);
      mu_.AwaitWithDeadline(absl::Condition(&stopping_), not_before);
      if (stopping_) return;
      refresh_wanted_ = false;
    }
    Load().IgnoreError();  // a failure logs and leaves the next try pending
  }
}

}  // namespace kvoffload::tier::cluster
