#include "daemon/metrics/pool_metrics.h"

#include <functional>
#include <string>
#include <utility>

namespace kvoffload::daemon {
namespace {

using prometheus::ClientMetric;
using prometheus::MetricFamily;
using prometheus::MetricType;

ClientMetric Sample(MetricType type, double value, std::vector<ClientMetric::Label> labels) {
  ClientMetric m;
  m.label = std::move(labels);
  if (type == MetricType::Counter) {
    m.counter.value = value;
  } else {
    m.gauge.value = value;
  }
  return m;
}

// One family with one sample per pool member: value(counts).
MetricFamily PerMember(const char* name, const char* help, MetricType type,
                       const std::vector<PoolSnapshot>& pools,
                       const std::function<uint64_t(const SlotIndex::MemberCounts&)>& value) {
  MetricFamily family{name, help, type, {}};
  for (const PoolSnapshot& p : pools) {
    for (const PoolMemberSnapshot& m : p.members) {
      family.metric.push_back(Sample(type, static_cast<double>(value(m.counts)),
                                     {{"pool", p.name}, {"engine", m.engine}}));
    }
  }
  return family;
}

}  // namespace

void AppendPoolMetrics(const std::vector<PoolSnapshot>& pools, std::vector<MetricFamily>* out) {
  constexpr MetricType kGauge = MetricType::Gauge;
  constexpr MetricType kCounter = MetricType::Counter;
  MetricFamily rows{"kvoffload_pool_rows",
                    "Rows of a pool's index by state: online (the members' rows: its capacity), "
                    "free, writing, ready, reading.",
                    kGauge,
                    {}};
  for (const PoolSnapshot& p : pools) {
    const std::pair<const char*, uint64_t> states[] = {
        {"online", p.rows_online},          {"free", p.index.rows_free},
        {"writing", p.index.rows_writing},  {"ready", p.index.rows_ready},
        {"reading", p.index.rows_reading},
    };
    for (const auto& [state, count] : states) {
      rows.metric.push_back(
          Sample(kGauge, static_cast<double>(count), {{"pool", p.name}, {"state", state}}));
    }
  }
  out->push_back(std::move(rows));
  out->push_back(PerMember("kvoffload_pool_member_rows_held",
                           "READY or READING rows of the pool this member stored.", kGauge, pools,
                           [](const SlotIndex::MemberCounts& c) { return c.rows_held; }));
  out->push_back(PerMember("kvoffload_pool_member_hits_total",
                           "Keys this member looked up that were stored (by any member).",
                           kCounter, pools,
                           [](const SlotIndex::MemberCounts& c) { return c.hits; }));
  out->push_back(PerMember("kvoffload_pool_member_cross_hits_total",
                           "Keys this member looked up that another member stored.", kCounter,
                           pools,
                           [](const SlotIndex::MemberCounts& c) { return c.cross_member_hits; }));
  out->push_back(PerMember("kvoffload_pool_member_loads_total",
                           "Keys this member pinned for loading.", kCounter, pools,
                           [](const SlotIndex::MemberCounts& c) { return c.loads; }));
  out->push_back(PerMember("kvoffload_pool_member_cross_loads_total",
                           "Keys this member pinned for loading that another member stored.",
                           kCounter, pools,
                           [](const SlotIndex::MemberCounts& c) { return c.cross_member_loads; }));
  out->push_back(PerMember("kvoffload_pool_member_stores_total",
                           "Keys this member's PrepareStore gave a row.", kCounter, pools,
                           [](const SlotIndex::MemberCounts& c) { return c.stores; }));
  out->push_back(PerMember("kvoffload_pool_member_evicted_total",
                           "Of the rows this member stored, those evicted by any member's store.",
                           kCounter, pools,
                           [](const SlotIndex::MemberCounts& c) { return c.evicted; }));
}

}  // namespace kvoffload::daemon
