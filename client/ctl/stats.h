// `kvoffloadctl stats [--json]`: Admin.Stats as a table, or as one JSON line for scripts.
//
//   AdminTarget target{"/run/kvoffload/admin.sock", absl::Seconds(10)};
//   int rc = RunStats({"--json"}, target, std::cout, std::cerr);
//
// The JSON object has exactly these keys, every one always present:
//   {"backend", "uptime_seconds", "region_bytes", "max_region_bytes",
//    "gpu_memory_bytes": {"<device>": bytes, ...},
//    "engines": [{"engine_id", "dp_rank", "num_rows", "rows_free", "rows_writing",
//                 "rows_ready", "rows_reading", "rows_quarantined", "rows_not_ready",
//                 "region_bytes", "region_ready_bytes", "store_bytes", "load_bytes",
//                 "jobs_done", "jobs_failed", "jobs_in_flight", "hits", "misses", "evictions",
//                 "workers", "job_latency_p50_us", "job_latency_p99_us", "idle_seconds",
//                 "replicated", "num_copies", "row_bytes"}, ...]}
// Integers are JSON numbers (not strings as in protobuf's JSON mapping). Thread-safe.
#ifndef KVOFFLOAD_CLIENT_CTL_STATS_H_
#define KVOFFLOAD_CLIENT_CTL_STATS_H_

#include <ostream>
#include <string>
#include <vector>

#include "client/ctl/admin_client.h"
#include "kvoffload/v1/kvoffload.pb.h"

namespace kvoffload::client::ctl {

// Runs `kvoffloadctl stats` with the arguments after "stats"; exit codes as admin_client.h.
int RunStats(const std::vector<std::string>& args, const AdminTarget& target, std::ostream& out,
             std::ostream& err);
std::string StatsUsage();

// One JSON object, no newline.
std::string StatsJson(const v1::StatsResponse& stats);
// The node header, a blank line, then one table row per engine (or "no engines").
std::string StatsText(const v1::StatsResponse& stats);
// "3d 4h 5m 6s", "5m 0s", "42s": whole seconds, leading zero units left out.
std::string FormatUptime(double seconds);

}  // namespace kvoffload::client::ctl

#endif  // KVOFFLOAD_CLIENT_CTL_STATS_H_
