#include "daemon/metrics/tier_metrics.h"

#include <string>
#include <utility>

namespace kvoffload::daemon {

using prometheus::ClientMetric;
using prometheus::MetricFamily;
using prometheus::MetricType;

void AppendTierMetrics(const TierManager* tiers, std::vector<MetricFamily>* out) {
  constexpr MetricType kGauge = MetricType::Gauge;
  constexpr MetricType kCounter = MetricType::Counter;
  const std::vector<TierManager::TierLine> lines =
      tiers != nullptr ? tiers->stats() : std::vector<TierManager::TierLine>{};
  // One family, one sample per tier: value(line).
  using Value = double (*)(const TierManager::TierLine&);
  auto add = [&](const char* family_name, const char* help, MetricType type, Value value) {
    MetricFamily family{family_name, help, type, {}};
    for (const TierManager::TierLine& line : lines) {
      ClientMetric m;
      m.label = {{"tier", line.name}};
      if (type == kCounter) {
        m.counter.value = value(line);
      } else {
        m.gauge.value = value(line);
      }
      family.metric.push_back(std::move(m));
    }
    out->push_back(std::move(family));
  };
  add("kvoffload_tier_capacity_bytes", "Bytes the tier may hold.", kGauge,
      [](const TierManager::TierLine& l) { return double(l.store.capacity_bytes); });
  add("kvoffload_tier_used_bytes", "Bytes of records the tier holds.", kGauge,
      [](const TierManager::TierLine& l) { return double(l.store.used_bytes); });
  add("kvoffload_tier_records", "Records (rows) the tier holds.", kGauge, [](const TierManager::TierLine& l) { return double(l.store.records); });
  add("kvoffload_tier_queue_depth", "Tier I/O requests queued or in flight.", kGauge,
      [](const TierManager::TierLine& l) { return double(l.store.queue_depth); });
  add("kvoffload_tier_reachable",
      "1 while the tier's storage answers, 0 while it cannot be reached (the cluster tier: no "
      "node answered for the slot map; it reconnects by itself).",
      kGauge, [](const TierManager::TierLine& l) { return double(l.store.reachable); });
  add("kvoffload_tier_writes_total", "Records written to the tier.", kCounter,
      [](const TierManager::TierLine& l) { return double(l.store.writes_ok); });
  add("kvoffload_tier_write_errors_total", "Record writes the device failed (ENOSPC, EIO, ...).",
      kCounter, [](const TierManager::TierLine& l) { return double(l.store.write_errors); });
  add("kvoffload_tier_written_bytes_total", "Payload bytes written to the tier.", kCounter,
      [](const TierManager::TierLine& l) { return double(l.store.bytes_written); });
  add("kvoffload_tier_reads_total", "Records read from the tier and checked.", kCounter,
      [](const TierManager::TierLine& l) { return double(l.store.reads_ok); });
  add("kvoffload_tier_read_errors_total", "Record reads the device failed.", kCounter,
      [](const TierManager::TierLine& l) { return double(l.store.read_errors); });
  add("kvoffload_tier_read_corrupt_total",
      "Records whose header or checksum did not match: a miss, never served.", kCounter,
      [](const TierManager::TierLine& l) { return double(l.store.read_corrupt); });
  add("kvoffload_tier_read_bytes_total", "Payload bytes read from the tier.", kCounter,
      [](const TierManager::TierLine& l) { return double(l.store.bytes_read); });
  add("kvoffload_tier_evictions_total", "Records the tier evicted (LRU) to make room.", kCounter,
      [](const TierManager::TierLine& l) { return double(l.store.evictions); });
  add("kvoffload_tier_spills_total", "READY rows written to the tier.", kCounter,
      [](const TierManager::TierLine& l) { return double(l.links.spills_ok); });
  add("kvoffload_tier_spill_failures_total", "Spills the tier refused or failed.", kCounter,
      [](const TierManager::TierLine& l) { return double(l.links.spills_failed); });
  add("kvoffload_tier_spills_skipped_total",
      "Spills not needed: the tier held the key, or the row was evicted or dropped first.",
      kCounter, [](const TierManager::TierLine& l) {
        return double(l.links.spills_already_held + l.links.spills_gone);
      });
  add("kvoffload_tier_spill_queue_dropped_total",
      "READY rows never spilled because the spill queue was full.", kCounter,
      [](const TierManager::TierLine& l) { return double(l.links.spill_queue_dropped); });
  add("kvoffload_tier_spill_queue_depth", "READY rows waiting to be spilled.", kGauge,
      [](const TierManager::TierLine& l) { return double(l.links.spill_queue_depth); });
  add("kvoffload_tier_lookup_hits_total",
      "Keys a lookup missed in the region and found in the tier (the tier's hits).", kCounter,
      [](const TierManager::TierLine& l) { return double(l.links.lookup_tier_hits); });
  add("kvoffload_tier_promotions_total", "Rows promoted from the tier into a region.", kCounter,
      [](const TierManager::TierLine& l) { return double(l.links.promotions_ok); });
  add("kvoffload_tier_promotion_failures_total",
      "Promotions whose read failed or whose record was corrupt (a miss).", kCounter,
      [](const TierManager::TierLine& l) { return double(l.links.promotions_failed); });
  add("kvoffload_tier_promotion_timeouts_total",
      "Lookups answered as a miss because a promotion ran past --tier_promote_timeout_ms.",
      kCounter, [](const TierManager::TierLine& l) { return double(l.links.promotions_timed_out); });
  add("kvoffload_tier_promotion_seconds_total",
      "Seconds from lookup to READY, summed over promotions (divide by promotions_total).",
      kCounter, [](const TierManager::TierLine& l) { return l.links.promotion_seconds_sum; });
  add("kvoffload_tier_promotions_in_flight", "Promotions being read now.", kGauge,
      [](const TierManager::TierLine& l) { return double(l.links.promotions_in_flight); });
}

}  // namespace kvoffload::daemon
