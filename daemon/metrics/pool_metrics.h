// Pool metrics: per pool, its rows by state; per member, rows held, hits, loads and
// the cross-member part of them (a row another member stored), stores and evictions. Built at
// scrape time from Pool::Snapshot; docs/metrics.md lists them.
#ifndef KVOFFLOAD_DAEMON_METRICS_POOL_METRICS_H_
#define KVOFFLOAD_DAEMON_METRICS_POOL_METRICS_H_

#include <vector>

#include "daemon/pool/pool.h"
#include "prometheus/metric_family.h"

namespace kvoffload::daemon {

// Appends the kvoffload_pool_* families (present, possibly empty, without pools).
void AppendPoolMetrics(const std::vector<PoolSnapshot>& pools,
                       std::vector<prometheus::MetricFamily>* out);

}  // namespace kvoffload::daemon

#endif  // KVOFFLOAD_DAEMON_METRICS_POOL_METRICS_H_
