// MetricsCollector: the daemon's Prometheus metrics, built at scrape time (DESIGN.md §5). Each
// Collect() reads EngineRegistry::List() → Engine::Snapshot(), the node MemoryBudget and
// CopyBackend::GpuMemoryBytes(); nothing is counted on the copy path for Prometheus' sake (the
// engines' own counters are the source). docs/metrics.md lists every family.
//
//   auto collector = std::make_shared<MetricsCollector>(registry, budget, backend);
//   exposer.RegisterCollectable(collector);            // or: MetricsServer::Start(addr, collector)
//   std::string text = MetricsCollector::Serialize(collector->Collect());
#ifndef KVOFFLOAD_DAEMON_METRICS_METRICS_COLLECTOR_H_
#define KVOFFLOAD_DAEMON_METRICS_METRICS_COLLECTOR_H_

#include <string>
#include <vector>

#include "daemon/copy/copy_backend.h"
#include "daemon/engine/registry.h"
#include "daemon/region/memory_budget.h"
#include "daemon/tier/tier_link.h"
#include "prometheus/collectable.h"
#include "prometheus/metric_family.h"

namespace kvoffload::daemon {

// The version kvoffload_build_info reports.
inline constexpr char kKvoffloadVersion[] = "0.1.0";

// Thread-safe (Collect runs on the exposer's HTTP threads). Holds no references of its own:
// the registry, budget and backend are not owned and must outlive every Collect() call, i.e.
// the exposer serving this collector must be stopped before they are destroyed.
class MetricsCollector : public prometheus::Collectable {
 public:
  // `tiers`: the node's tiers below the regions, or null.
  MetricsCollector(const EngineRegistry* registry, const MemoryBudget* budget,
                   const CopyBackend* backend, const TierManager* tiers = nullptr,
                   std::string version = kKvoffloadVersion);
  MetricsCollector(const MetricsCollector&) = delete;
  MetricsCollector& operator=(const MetricsCollector&) = delete;

  std::vector<prometheus::MetricFamily> Collect() const override;

  // Prometheus text exposition format (0.0.4) of `families`, as served on /metrics.
  static std::string Serialize(const std::vector<prometheus::MetricFamily>& families);

 private:
  const EngineRegistry* const registry_;
  const MemoryBudget* const budget_;
  const CopyBackend* const backend_;
  const TierManager* const tiers_;
  const std::string version_;
};

}  // namespace kvoffload::daemon

#endif  // KVOFFLOAD_DAEMON_METRICS_METRICS_COLLECTOR_H_
