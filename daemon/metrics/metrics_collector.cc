#include "daemon/metrics/metrics_collector.h"

#include <functional>
#include <memory>
#include <string>
#include <utility>

#include "daemon/engine/engine.h"
#include "daemon/engine/latency_histogram.h"
#include "daemon/metrics/pool_metrics.h"
#include "daemon/metrics/tier_metrics.h"
#include "prometheus/text_serializer.h"

namespace kvoffload::daemon {
namespace {

using prometheus::ClientMetric;
using prometheus::MetricFamily;
using prometheus::MetricType;

MetricFamily Family(const char* name, const char* help, MetricType type) {
  MetricFamily family;
  family.name = name;
  family.help = help;
  family.type = type;
  return family;
}

ClientMetric Gauge(double value, std::vector<ClientMetric::Label> labels = {}) {
  ClientMetric m;
  m.label = std::move(labels);
  m.gauge.value = value;
  return m;
}

// A family of one sample (a node-wide value).
MetricFamily OneGauge(const char* name, const char* help, double value,
                      std::vector<ClientMetric::Label> labels = {}) {
  MetricFamily family = Family(name, help, MetricType::Gauge);
  family.metric.push_back(Gauge(value, std::move(labels)));
  return family;
}

// One gauge per CUDA device of `by_device`: value(entry).
template <typename Map, typename Value>
MetricFamily PerDevice(const char* name, const char* help, const Map& by_device, Value value) {
  MetricFamily family = Family(name, help, MetricType::Gauge);
  for (const auto& entry : by_device) {
    family.metric.push_back(Gauge(value(entry), {{"device", std::to_string(entry.first)}}));
  }
  return family;
}

ClientMetric Counter(double value, std::vector<ClientMetric::Label> labels) {
  ClientMetric m;
  m.label = std::move(labels);
  m.counter.value = value;
  return m;
}

std::vector<ClientMetric::Label> EngineLabels(const EngineSnapshot& s) {
  return {{"engine", s.spec.engine_id}, {"dp_rank", std::to_string(s.spec.dp_rank)}};
}

// One family with one sample per engine: value(snapshot).
MetricFamily PerEngine(const char* name, const char* help, MetricType type,
                       const std::vector<EngineSnapshot>& engines,
                       const std::function<double(const EngineSnapshot&)>& value) {
  MetricFamily family = Family(name, help, type);
  for (const EngineSnapshot& s : engines) {
    family.metric.push_back(type == MetricType::Counter ? Counter(value(s), EngineLabels(s))
                                                        : Gauge(value(s), EngineLabels(s)));
  }
  return family;
}

ClientMetric LatencyHistogramMetric(const EngineSnapshot& s) {
  ClientMetric m;
  m.label = EngineLabels(s);
  uint64_t cumulative = 0;
  for (int i = 0; i < LatencyHistogram::kBuckets; ++i) {
    cumulative += s.latency.counts[i];
    ClientMetric::Bucket bucket;
    bucket.cumulative_count = cumulative;
    bucket.upper_bound = LatencyHistogram::UpperBoundSeconds(i);  // the last one is +Inf
    m.histogram.bucket.push_back(bucket);
  }
  m.histogram.sample_count = s.latency.count;
  m.histogram.sample_sum = s.latency.sum_seconds;
  return m;
}

}  // namespace

MetricsCollector::MetricsCollector(const EngineRegistry* registry, const MemoryBudget* budget,
                                   const CopyBackend* backend, const TierManager* tiers,
                                   std::string version)
    : registry_(registry),
      budget_(budget),
      backend_(backend),
      tiers_(tiers),
      version_(std::move(version)) {}

std::vector<MetricFamily> MetricsCollector::Collect() const {
  std::vector<EngineSnapshot> engines;
  for (const std::shared_ptr<Engine>& engine : registry_->List()) {
    engines.push_back(engine->Snapshot());
  }
  constexpr MetricType kGauge = MetricType::Gauge;
  constexpr MetricType kCounter = MetricType::Counter;
  std::vector<MetricFamily> out;

  // Node.
  out.push_back(OneGauge("kvoffload_up", "1 while kvoffloadd is serving.", 1));
  out.push_back(OneGauge("kvoffload_build_info",
                         "Always 1; the version label is kvoffloadd's version.", 1,
                         {{"version", version_}}));
  out.push_back(OneGauge("kvoffload_node_region_bytes",
                         "Host memory reserved against the node cap by all engines on this "
                         "node: regions plus index metadata, in bytes (includes regions still "
                         "held by in-flight copies).",
                         static_cast<double>(budget_->reserved())));
  out.push_back(OneGauge("kvoffload_node_max_region_bytes",
                         "Node-wide cap over all regions (--max_region_bytes), in bytes.",
                         static_cast<double>(budget_->cap())));
  out.push_back(OneGauge("kvoffload_engines", "Engines (DP replicas) with a region on this node.",
                         static_cast<double>(engines.size())));
  out.push_back(PerDevice("kvoffload_daemon_gpu_memory_bytes",
                          "GPU memory kvoffloadd itself uses per CUDA device (context, streams, "
                          "descriptor tables), in bytes. Absent with the host backend.",
                          backend_->GpuMemoryBytes(),
                          [](const auto& entry) { return static_cast<double>(entry.second); }));
  out.push_back(PerDevice("kvoffload_device_failed",
                          "1 for a CUDA device that can no longer copy (sticky CUDA error, or a "
                          "worker's mappings whose release has not returned); see kvoffloadctl "
                          "stats for the reason. Absent while healthy.",
                          backend_->FailedDevices(), [](const auto&) { return 1.0; }));

  // Per engine.
  out.push_back(PerEngine("kvoffload_region_bytes", "Size of the engine's host region, in bytes.",
                          kGauge, engines,
                          [](const EngineSnapshot& s) { return double(s.region_bytes); }));
  out.push_back(PerEngine(
      "kvoffload_region_ready_bytes",
      "Bytes of the engine's region populated and registered so far (serve while pinning); "
      "equals kvoffload_region_bytes once the region is fully ready.",
      kGauge, engines, [](const EngineSnapshot& s) { return double(s.region_ready_bytes); }));
  out.push_back(PerEngine(
      "kvoffload_rows_not_durable_total",
      "Rows stored with keys longer than the durable state's key capacity (--state_key_bytes): "
      "served, but not kept across a daemon restart.",
      kCounter, engines, [](const EngineSnapshot& s) { return double(s.rows_not_durable); }));
  {
    MetricFamily rows = Family(
        "kvoffload_rows",
        "Rows of the engine's region by state: free (allocatable), writing (a store in "
        "progress), ready (stored, readable), reading (a load in progress), quarantined (freed, "
        "waiting for a copy still in flight), not_ready (memory still being populated and "
        "registered). The states add up to the region's rows (a pool member: the pool's rows "
        "online, its members' regions).",
        kGauge);
    for (const EngineSnapshot& s : engines) {
      const std::pair<const char*, uint64_t> states[] = {
          {"free", s.index.rows_free},
          {"writing", s.index.rows_writing},
          {"ready", s.index.rows_ready},
          {"reading", s.index.rows_reading},
          {"quarantined", s.index.rows_quarantined},
          {"not_ready", s.index.rows_not_ready},
      };
      for (const auto& [state, count] : states) {
        std::vector<ClientMetric::Label> labels = EngineLabels(s);
        labels.push_back({"state", state});
        rows.metric.push_back(Gauge(static_cast<double>(count), std::move(labels)));
      }
    }
    out.push_back(std::move(rows));
  }
  out.push_back(PerEngine("kvoffload_store_bytes_total",
                          "Bytes copied GPU to region by finished store copies.", kCounter, engines,
                          [](const EngineSnapshot& s) { return double(s.store_bytes); }));
  out.push_back(PerEngine("kvoffload_load_bytes_total",
                          "Bytes copied region to GPU by finished load copies.", kCounter, engines,
                          [](const EngineSnapshot& s) { return double(s.load_bytes); }));
  out.push_back(PerEngine("kvoffload_store_jobs_total", "Store jobs that finished successfully.",
                          kCounter, engines,
                          [](const EngineSnapshot& s) { return double(s.store_jobs); }));
  out.push_back(PerEngine("kvoffload_load_jobs_total", "Load jobs that finished successfully.",
                          kCounter, engines,
                          [](const EngineSnapshot& s) { return double(s.load_jobs); }));
  out.push_back(PerEngine("kvoffload_jobs_failed_total",
                          "Jobs (store or load) that finished with an error.", kCounter, engines,
                          [](const EngineSnapshot& s) { return double(s.jobs_failed); }));
  out.push_back(PerEngine("kvoffload_jobs_in_flight",
                          "Jobs submitted and not yet finished (waiting for votes or copies).",
                          kGauge, engines,
                          [](const EngineSnapshot& s) { return double(s.jobs_in_flight); }));
  out.push_back(PerEngine("kvoffload_lookup_hits_total",
                          "Keys looked up that were stored (READY or READING).", kCounter, engines,
                          [](const EngineSnapshot& s) { return double(s.index.hits); }));
  out.push_back(PerEngine("kvoffload_lookup_pending_hits_total",
                          "Keys looked up while their store was still in progress (WRITING).",
                          kCounter, engines,
                          [](const EngineSnapshot& s) { return double(s.index.hits_pending); }));
  out.push_back(PerEngine("kvoffload_lookup_misses_total", "Keys looked up that were absent.",
                          kCounter, engines,
                          [](const EngineSnapshot& s) { return double(s.index.misses); }));
  out.push_back(PerEngine("kvoffload_evictions_total",
                          "Keys evicted (LRU) to make room for new stores.", kCounter, engines,
                          [](const EngineSnapshot& s) { return double(s.index.evictions); }));
  out.push_back(PerEngine("kvoffload_workers", "Worker sessions attached to the engine.", kGauge,
                          engines, [](const EngineSnapshot& s) { return double(s.workers); }));
  {
    MetricFamily latency =
        Family("kvoffload_job_latency_seconds",
               "Job latency, first part submitted to job finished (successful or not), in seconds.",
               MetricType::Histogram);
    for (const EngineSnapshot& s : engines) latency.metric.push_back(LatencyHistogramMetric(s));
    out.push_back(std::move(latency));
  }
  std::vector<PoolSnapshot> pools;
  for (const std::shared_ptr<Pool>& pool : registry_->ListPools()) pools.push_back(pool->Snapshot());
  AppendPoolMetrics(pools, &out);
  AppendTierMetrics(tiers_, &out);
  return out;
}

std::string MetricsCollector::Serialize(const std::vector<MetricFamily>& families) {
  return prometheus::TextSerializer().Serialize(families);
}

}  // namespace kvoffload::daemon
