#include "client/ctl/stats.h"

#include <cmath>
#include <map>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "client/ctl/args.h"
#include "client/ctl/json_writer.h"
#include "client/ctl/text_table.h"
#include "common/bytes.h"
#include "kvoffload/v1/kvoffload.grpc.pb.h"

namespace kvoffload::client::ctl {
namespace {

using ::kvoffload::common::FormatBytes;

std::string EngineJson(const v1::EngineStats& e) {
  JsonObjectWriter json;
  json.String("engine_id", e.engine_id());
  json.Uint("dp_rank", e.dp_rank());
  json.Uint("num_rows", e.num_rows());
  json.Uint("rows_free", e.rows_free());
  json.Uint("rows_writing", e.rows_writing());
  json.Uint("rows_ready", e.rows_ready());
  json.Uint("rows_reading", e.rows_reading());
  json.Uint("rows_quarantined", e.rows_quarantined());
  json.Uint("rows_not_ready", e.rows_not_ready());
  json.Uint("region_bytes", e.region_bytes());
  json.Uint("region_ready_bytes", e.region_ready_bytes());
  json.Uint("store_bytes", e.store_bytes());
  json.Uint("load_bytes", e.load_bytes());
  json.Uint("jobs_done", e.jobs_done());
  json.Uint("jobs_failed", e.jobs_failed());
  json.Uint("jobs_in_flight", e.jobs_in_flight());
  json.Uint("hits", e.hits());
  json.Uint("misses", e.misses());
  json.Uint("evictions", e.evictions());
  json.Uint("workers", e.workers());
  json.Double("job_latency_p50_us", e.job_latency_p50_us());
  json.Double("job_latency_p99_us", e.job_latency_p99_us());
  json.Double("idle_seconds", e.idle_seconds());
  json.Bool("replicated", e.geometry().replicated());
  json.Uint("num_copies", e.geometry().num_copies());
  json.Uint("row_bytes", e.geometry().row_bytes());
  return std::move(json).Close();
}

std::string PoolJson(const v1::PoolStats& p) {
  std::vector<std::string> members;
  for (const v1::PoolMemberStats& m : p.members()) {
    JsonObjectWriter json;
    json.Uint("member", m.member());
    json.String("engine", m.engine());
    json.Bool("draining", m.draining());
    json.Uint("rows_held", m.rows_held());
    json.Uint("hits", m.hits());
    json.Uint("cross_member_hits", m.cross_member_hits());
    json.Uint("loads", m.loads());
    json.Uint("cross_member_loads", m.cross_member_loads());
    json.Uint("stores", m.stores());
    json.Uint("evicted", m.evicted());
    json.Uint("floor_skips", m.floor_skips());
    members.push_back(std::move(json).Close());
  }
  JsonObjectWriter json;
  json.String("name", p.name());
  json.Uint("owner_uid", p.owner_uid());
  json.String("model_identity", p.model_identity());
  json.Uint("rows_per_member", p.rows_per_member());
  json.Uint("row_bytes", p.row_bytes());
  json.Uint("rows_online", p.rows_online());
  json.Uint("rows_free", p.rows_free());
  json.Uint("rows_writing", p.rows_writing());
  json.Uint("rows_ready", p.rows_ready());
  json.Uint("rows_reading", p.rows_reading());
  json.Uint("hits", p.hits());
  json.Uint("misses", p.misses());
  json.Uint("evictions", p.evictions());
  json.Uint("reserved_bytes", p.reserved_bytes());
  json.Raw("members", JsonArray(members));
  return std::move(json).Close();
}

// One row per pool member: what it holds, hits and loads, how much of it came from others.
std::string PoolsText(const v1::StatsResponse& stats) {
  TextTable table({{"pool", Align::kLeft},
                   {"member"},
                   {"engine", Align::kLeft},
                   {"rows held"},
                   {"hits"},
                   {"cross-member hits"},
                   {"loads"},
                   {"cross-member loads"},
                   {"stores"},
                   {"evicted"}});
  for (const v1::PoolStats& p : stats.pools()) {
    for (const v1::PoolMemberStats& m : p.members()) {
      table.AddRow({absl::StrCat(p.name(), " (", p.rows_online(), " rows)"),
                    absl::StrCat(m.member()),
                    absl::StrCat(m.engine(), m.draining() ? " (draining)" : ""),
                    absl::StrCat(m.rows_held()), absl::StrCat(m.hits()),
                    absl::StrCat(m.cross_member_hits()), absl::StrCat(m.loads()),
                    absl::StrCat(m.cross_member_loads()), absl::StrCat(m.stores()),
                    absl::StrCat(m.evicted())});
    }
  }
  return table.Render();
}

std::string Micros(double us) { return std::isfinite(us) ? absl::StrFormat("%.0f", us) : "-"; }

std::string TierJson(const v1::TierStats& t) {
  JsonObjectWriter json;
  json.String("name", t.name());
  json.Uint("capacity_bytes", t.capacity_bytes());
  json.Uint("used_bytes", t.used_bytes());
  json.Uint("records", t.records());
  json.Uint("writes_ok", t.writes_ok());
  json.Uint("write_errors", t.write_errors());
  json.Uint("bytes_written", t.bytes_written());
  json.Uint("reads_ok", t.reads_ok());
  json.Uint("read_misses", t.read_misses());
  json.Uint("read_corrupt", t.read_corrupt());
  json.Uint("read_errors", t.read_errors());
  json.Uint("bytes_read", t.bytes_read());
  json.Uint("evictions", t.evictions());
  json.Uint("queue_depth", t.queue_depth());
  json.Uint("spills_queued", t.spills_queued());
  json.Uint("spills_ok", t.spills_ok());
  json.Uint("spill_bytes", t.spill_bytes());
  json.Uint("spills_failed", t.spills_failed());
  json.Uint("spills_already_held", t.spills_already_held());
  json.Uint("spills_gone", t.spills_gone());
  json.Uint("spill_queue_dropped", t.spill_queue_dropped());
  json.Uint("spill_queue_depth", t.spill_queue_depth());
  json.Uint("lookup_tier_hits", t.lookup_tier_hits());
  json.Uint("promotions_started", t.promotions_started());
  json.Uint("promotions_ok", t.promotions_ok());
  json.Uint("promotions_failed", t.promotions_failed());
  json.Uint("promotion_bytes", t.promotion_bytes());
  json.Uint("promotions_timed_out", t.promotions_timed_out());
  json.Uint("promotions_in_flight", t.promotions_in_flight());
  json.Double("promotion_seconds_sum", t.promotion_seconds_sum());
  json.Double("promotion_seconds_max", t.promotion_seconds_max());
  return std::move(json).Close();
}

// One row per tier below the regions: what it holds, what was spilled and promoted, failures.
std::string TiersText(const v1::StatsResponse& stats) {
  TextTable table({{"tier", Align::kLeft},
                   {"records"},
                   {"used"},
                   {"spilled"},
                   {"spill queue"},
                   {"tier hits"},
                   {"promoted"},
                   {"mean/max promote ms"},
                   {"timed out"},
                   {"failed"},
                   {"corrupt"},
                   {"I/O errors"}});
  for (const v1::TierStats& t : stats.tiers()) {
    const double mean_ms = t.promotions_ok() == 0
                               ? NAN
                               : 1e3 * t.promotion_seconds_sum() / double(t.promotions_ok());
    auto ms = [](double v) { return std::isfinite(v) ? absl::StrFormat("%.1f", v) : "-"; };
    table.AddRow({t.name(), absl::StrCat(t.records()),
                  absl::StrCat(FormatBytes(t.used_bytes()), " of ", FormatBytes(t.capacity_bytes())),
                  absl::StrCat(t.spills_ok(), " (", FormatBytes(t.spill_bytes()), ")"),
                  absl::StrCat(t.spill_queue_depth()), absl::StrCat(t.lookup_tier_hits()),
                  absl::StrCat(t.promotions_ok(), " (", FormatBytes(t.promotion_bytes()), ")"),
                  absl::StrCat(ms(mean_ms), "/", ms(1e3 * t.promotion_seconds_max())),
                  absl::StrCat(t.promotions_timed_out()),
                  absl::StrCat(t.spills_failed() + t.promotions_failed()),
                  absl::StrCat(t.read_corrupt()),
                  absl::StrCat(t.write_errors() + t.read_errors())});
  }
  return table.Render();
}

}  // namespace

std::string FormatUptime(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) seconds = 0;
  uint64_t s = static_cast<uint64_t>(seconds);
  const uint64_t days = s / 86400, hours = s / 3600 % 24, minutes = s / 60 % 60;
  s %= 60;
  if (days > 0) return absl::StrCat(days, "d ", hours, "h ", minutes, "m ", s, "s");
  if (hours > 0) return absl::StrCat(hours, "h ", minutes, "m ", s, "s");
  if (minutes > 0) return absl::StrCat(minutes, "m ", s, "s");
  return absl::StrCat(s, "s");
}

std::string StatsJson(const v1::StatsResponse& stats) {
  JsonObjectWriter gpu;
  const std::map<int32_t, uint64_t> devices(stats.gpu_memory_bytes().begin(),
                                            stats.gpu_memory_bytes().end());  // sorted
  for (const auto& [device, bytes] : devices) gpu.Uint(absl::StrCat(device), bytes);
  std::vector<std::string> engines;
  for (const v1::EngineStats& e : stats.engines()) engines.push_back(EngineJson(e));

  JsonObjectWriter json;
  json.String("backend", stats.backend());
  json.Double("uptime_seconds", stats.uptime_seconds());
  json.Uint("region_bytes", stats.region_bytes());
  json.Uint("max_region_bytes", stats.max_region_bytes());
  json.Raw("gpu_memory_bytes", std::move(gpu).Close());
  json.Raw("engines", JsonArray(engines));
  std::vector<std::string> pools;
  for (const v1::PoolStats& p : stats.pools()) pools.push_back(PoolJson(p));
  json.Raw("pools", JsonArray(pools));
  std::vector<std::string> tiers;
  for (const v1::TierStats& t : stats.tiers()) tiers.push_back(TierJson(t));
  json.Raw("tiers", JsonArray(tiers));
  return std::move(json).Close();
}

std::string StatsText(const v1::StatsResponse& stats) {
  TextTable header({{"", Align::kLeft}, {"", Align::kLeft}});
  header.AddRow({"backend", stats.backend()});
  header.AddRow({"uptime", FormatUptime(stats.uptime_seconds())});
  header.AddRow({"region bytes", absl::StrCat(FormatBytes(stats.region_bytes()), " of ",
                                              FormatBytes(stats.max_region_bytes()),
                                              " node cap")});
  if (!stats.gpu_memory_bytes().empty()) {
    const std::map<int32_t, uint64_t> devices(stats.gpu_memory_bytes().begin(),
                                              stats.gpu_memory_bytes().end());
    std::vector<std::string> parts;
    for (const auto& [device, bytes] : devices) {
      parts.push_back(absl::StrCat("cuda:", device, " ", FormatBytes(bytes)));
    }
    header.AddRow({"gpu memory", absl::StrJoin(parts, ", ")});
  }
  std::string text = header.Render(/*with_header=*/false) + "\n";
  if (!stats.tiers().empty()) text += TiersText(stats) + "\n";
  if (stats.engines().empty()) return text + "no engines\n";

  TextTable table({{"engine", Align::kLeft},
                   {"rows"},
                   {"free"},
                   {"writing"},
                   {"ready"},
                   {"reading"},
                   {"not ready"},
                   {"region ready"},
                   {"store bytes"},
                   {"load bytes"},
                   {"jobs done"},
                   {"failed"},
                   {"in flight"},
                   {"hits"},
                   {"misses"},
                   {"evictions"},
                   {"workers"},
                   {"p50/p99 µs"}});
  for (const v1::EngineStats& e : stats.engines()) {
    table.AddRow({absl::StrCat(e.engine_id(), "/", e.dp_rank()), absl::StrCat(e.num_rows()),
                  absl::StrCat(e.rows_free()), absl::StrCat(e.rows_writing()),
                  absl::StrCat(e.rows_ready()), absl::StrCat(e.rows_reading()),
                  absl::StrCat(e.rows_not_ready()),
                  absl::StrCat(FormatBytes(e.region_ready_bytes()), " of ",
                               FormatBytes(e.region_bytes())),
                  FormatBytes(e.store_bytes()), FormatBytes(e.load_bytes()),
                  absl::StrCat(e.jobs_done()), absl::StrCat(e.jobs_failed()),
                  absl::StrCat(e.jobs_in_flight()), absl::StrCat(e.hits()),
                  absl::StrCat(e.misses()), absl::StrCat(e.evictions()),
                  absl::StrCat(e.workers()),
                  absl::StrCat(Micros(e.job_latency_p50_us()), "/",
                               Micros(e.job_latency_p99_us()))});
  }
  text += table.Render();
  if (!stats.pools().empty()) text += "\n" + PoolsText(stats);
  return text;
}

std::string StatsUsage() {
  return "usage: kvoffloadctl [global flags] stats [--json]\n"
         "\n"
         "Node and per-engine statistics of kvoffloadd (Admin.Stats): backend, uptime, region\n"
         "bytes against the node cap, GPU memory per device, one row per tier below the regions\n"
         "(the disk tier: records, rows spilled and promoted, promotion time, failures), then one\n"
         "row per engine (with its readiness: rows not registered yet, region bytes ready of the\n"
         "region's), then one row per member of each pool (rows held, hits and loads,\n"
         "cross-member ones).\n"
         "\n"
         "  --json    one JSON object on one line instead of the table\n";
}

int RunStats(const std::vector<std::string>& args, const AdminTarget& target, std::ostream& out,
             std::ostream& err) {
  if (WantsHelp(args)) {
    out << StatsUsage();
    return kExitOk;
  }
  absl::StatusOr<ParsedArgs> parsed = ParseCommandArgs(args, {{"json", false}}, 0, 0, "");
  if (!parsed.ok()) {
    err << UsageErrorLine("stats", parsed.status().message());
    return kExitUsage;
  }
  v1::StatsResponse stats;
  const int rc = CallDaemon(target, err, [&](const std::shared_ptr<grpc::Channel>& channel,
                                             grpc::ClientContext* context) {
    return v1::Admin::NewStub(channel)->Stats(context, v1::StatsRequest(), &stats);
  });
  if (rc != kExitOk) return rc;
  if (parsed->Has("json")) {
    out << StatsJson(stats) << "\n";
  } else {
    out << StatsText(stats);
  }
  return kExitOk;
}

}  // namespace kvoffload::client::ctl
