// Tier metrics: per tier below the regions (label tier="disk", "cluster"), its space, whether its
// storage answers, I/O, integrity failures, spills and promotions. Built at scrape time from TierManager; docs/metrics.md lists
// them. Rates (writes/s, GB/s, promotions/s) are Prometheus's rate() of the counters.
#ifndef KVOFFLOAD_DAEMON_METRICS_TIER_METRICS_H_
#define KVOFFLOAD_DAEMON_METRICS_TIER_METRICS_H_

#include <vector>

#include "daemon/tier/tier_manager.h"
#include "prometheus/metric_family.h"

namespace kvoffload::daemon {

// Appends the kvoffload_tier_* families (present, without samples, when `tiers` is null).
void AppendTierMetrics(const TierManager* tiers, std::vector<prometheus::MetricFamily>* out);

}  // namespace kvoffload::daemon

#endif  // KVOFFLOAD_DAEMON_METRICS_TIER_METRICS_H_
