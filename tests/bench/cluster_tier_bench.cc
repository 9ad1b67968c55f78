// Cluster tier benchmark: a local Redis Cluster (3 masters + 3 replicas on loopback,
// daemon/tier/cluster/testing/local_cluster.h), then `rounds` rounds of
//   1. redis-benchmark's own SET rate at the row size, same cluster, same concurrency (-c = the
//      tier's threads, --cluster, -r 64 so nearly every GET hits a key SET before);
//   2. the tier writing `rows` rows of `row_bytes` (4 × threads queued, its own threads; new
//      keys in round 1, replaced values later, as redis-benchmark's SETs mostly are);
//   3. redis-benchmark's GET rate, then the tier reading the rows back; GB/s of payload, the
//      median over rounds (round 1's write apart), ratios tier / redis-benchmark per round;
// and at the end
//   promotion of a long prefix: `prefix_rows` rows written, then timed: one ContainsAll of
//      them all (the lookup) and the Reads of them all (queued at once, at most
//      `dst_rows` destination rows in use) — 16k tokens of Llama-3-8B (128 KiB/token) are 1024
//      rows of 2 MiB (16 tokens a row).
// Prints one JSON object (and writes it to --out). Needs redis-server, redis-tools.
//
//   bazel run //tests/bench:cluster_tier_bench -- --row_bytes=2097152 --threads=4
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "daemon/tier/cluster/cluster_tier.h"
#include "daemon/tier/cluster/testing/local_cluster.h"
#include "daemon/tier/cluster/testing/sync_calls.h"

ABSL_FLAG(uint64_t, row_bytes, 2ull << 20, "bytes per row (record) = redis-benchmark -d");
ABSL_FLAG(int32_t, rows, 256, "rows written then read for the GB/s figures");
ABSL_FLAG(int32_t, threads, 4, "tier threads = redis-benchmark clients (-c)");
ABSL_FLAG(int32_t, connections_per_node, 4, "tier connections per cluster node");
ABSL_FLAG(uint64_t, max_value_bytes, 8ull << 20, "tier max_value_bytes (header included)");
ABSL_FLAG(int32_t, redis_benchmark_requests, 512, "redis-benchmark -n per test");
ABSL_FLAG(int32_t, rounds, 4, "rounds of (SET, tier write, GET, tier read); the first writes "
          "new keys and is left out of the write comparison");
ABSL_FLAG(int32_t, prefix_rows, 1024, "rows of the promoted prefix (0: skip)");
ABSL_FLAG(int32_t, dst_rows, 256, "destination rows the promotion reuses (memory bound)");
ABSL_FLAG(std::string, out, "", "also write the JSON here");

namespace kvoffload::tier::cluster {
namespace {

using Clock = std::chrono::steady_clock;
double Seconds(Clock::time_point since) {
  return std::chrono::duration<double>(Clock::now() - since).count();
}

// redis-benchmark --csv: a header line, then "TEST","rps",... per test. Requests per second of
// `test` (SET, GET).
absl::StatusOr<double> RedisBenchmarkRps(int port, const std::string& test) {
  const std::string cmd = absl::StrCat(
      "redis-benchmark -h 127.0.0.1 -p ", port, " --cluster -t ", test, " -d ",
      absl::GetFlag(FLAGS_row_bytes), " -n ", absl::GetFlag(FLAGS_redis_benchmark_requests),
      " -c ", absl::GetFlag(FLAGS_threads), " -r 64 --csv 2>&1");
  FILE* p = popen(cmd.c_str(), "r");
  if (p == nullptr) return absl::InternalError("popen redis-benchmark");
  std::string out;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), p)) > 0) out.append(buf, n);
  if (pclose(p) != 0) return absl::InternalError("redis-benchmark failed: " + out.substr(0, 2000));
  for (absl::string_view line : absl::StrSplit(out, '\n')) {
    std::vector<std::string> f = absl::StrSplit(line, ',');
    if (f.size() < 2 || f[0] != absl::StrCat("\"", test, "\"")) continue;
    double rps = 0;
    if (absl::SimpleAtod(absl::StripAsciiWhitespace(absl::string_view(f[1]).substr(
                             1, f[1].size() - 2)),
                         &rps)) {
      return rps;
    }
  }
  return absl::InternalError("no " + test + " line in redis-benchmark's output: " + out);
}

// Counts callbacks; Await blocks until `target` have come; the first error is kept.
class Gate {
 public:
  void Done(absl::Status s) {
    absl::MutexLock lock(&mu_);
    ++done_;
    if (!s.ok() && first_error_.ok()) first_error_ = s;
  }
  void AwaitAtLeast(int target) {
    absl::MutexLock lock(&mu_);
    auto reached = [this, target]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return done_ >= target;
    };
    mu_.Await(absl::Condition(&reached));
  }
  absl::Status first_error() {
    absl::MutexLock lock(&mu_);
    return first_error_;
  }

 private:
  absl::Mutex mu_;
  int done_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Status first_error_ ABSL_GUARDED_BY(mu_);
};

// Writes rows 0..count-1 of namespace `ns` (contents: `sources` in turn), at most `window`
// queued at once; returns seconds.
absl::StatusOr<double> WriteRows(ClusterTier& tier, uint64_t ns, int count,
                                 const std::vector<std::string>& sources, int window) {
  Gate gate;
  const auto start = Clock::now();
  for (int i = 0; i < count; ++i) {
    if (i >= window) gate.AwaitAtLeast(i - window + 1);
    const std::string& src = sources[i % sources.size()];
    absl::Status s = tier.Write(ns, absl::StrCat("row-", i), src.data(), src.size(),
                                [&gate](absl::Status st) { gate.Done(std::move(st)); });
    if (!s.ok()) return s;
  }
  gate.AwaitAtLeast(count);
  const double secs = Seconds(start);
  if (!gate.first_error().ok()) return gate.first_error();
  return secs;
}

// Reads rows 0..count-1 into `dst` in turn (at most dst.size() queued at once); returns seconds.
absl::StatusOr<double> ReadRows(ClusterTier& tier, uint64_t ns, int count,
                                std::vector<std::string>& dst) {
  Gate gate;
  const int window = static_cast<int>(dst.size());
  const auto start = Clock::now();
  for (int i = 0; i < count; ++i) {
    if (i >= window) gate.AwaitAtLeast(i - window + 1);
    std::string& d = dst[i % window];
    const uint64_t want = d.size();
    absl::Status s =
        tier.Read(ns, absl::StrCat("row-", i), d.data(), d.size(),
                  [&gate, want](absl::StatusOr<uint64_t> n) {
                    gate.Done(!n.ok()         ? n.status()
                              : *n != want    ? absl::DataLossError("short row")
                                              : absl::OkStatus());
                  });
    if (!s.ok()) return s;
  }
  gate.AwaitAtLeast(count);
  const double secs = Seconds(start);
  if (!gate.first_error().ok()) return gate.first_error();
  return secs;
}

int Main() {
  const uint64_t row = absl::GetFlag(FLAGS_row_bytes);
  const int rows = absl::GetFlag(FLAGS_rows);
  const int threads = absl::GetFlag(FLAGS_threads);
  absl::StatusOr<std::unique_ptr<testing::LocalCluster>> cluster = testing::LocalCluster::Start({});
  if (!cluster.ok()) {
    std::cerr << "cluster: " << cluster.status() << "\n";
    return 1;
  }
  const int port = (*cluster)->nodes()[0].port;

  ClusterTierOptions o;
  o.seeds = (*cluster)->seeds();
  o.threads = threads;
  o.connections_per_node = absl::GetFlag(FLAGS_connections_per_node);
  o.max_value_bytes = absl::GetFlag(FLAGS_max_value_bytes);
  o.max_queued = 1 << 20;
  o.command_timeout = absl::Seconds(10);
  absl::StatusOr<std::unique_ptr<ClusterTier>> tier = ClusterTier::Create(o);
  if (!tier.ok()) {
    std::cerr << "tier: " << tier.status() << "\n";
    return 1;
  }
  std::vector<std::string> sources;
  for (int i = 0; i < 16; ++i) sources.push_back(testing::RowBytes(i, row));
  std::vector<std::string> dst(std::min(rows, absl::GetFlag(FLAGS_dst_rows)), std::string(row, 1));

  // Rounds of redis-benchmark SET, the tier's write, redis-benchmark GET, the tier's read, one
  // after the other, so that load from elsewhere on the machine hits both sides alike; each
  // figure is the median over the rounds, each ratio the median of the rounds' ratios.
  constexpr uint64_t kNs = 0xBE7C;
  const double bytes = static_cast<double>(rows) * row;
  std::vector<double> set_gbps, get_gbps, write_gbps, read_gbps, write_ratio, read_ratio;
  double write_new_gbps = 0;
  for (int round = 0; round < absl::GetFlag(FLAGS_rounds); ++round) {
    absl::StatusOr<double> set_rps = RedisBenchmarkRps(port, "SET");
    if (!set_rps.ok()) {
      std::cerr << set_rps.status() << "\n";
      return 1;
    }
    // Round 0 writes new keys; later rounds replace values (as redis-benchmark's SETs, -r 64
    // with -n 512, mostly do). The first is reported apart, the others compared.
    absl::StatusOr<double> write_s = WriteRows(**tier, kNs, rows, sources, 4 * threads);
    if (!write_s.ok()) {
      std::cerr << "tier write: " << write_s.status() << "\n";
      return 1;
    }
    absl::StatusOr<double> get_rps = RedisBenchmarkRps(port, "GET");
    if (!get_rps.ok()) {
      std::cerr << get_rps.status() << "\n";
      return 1;
    }
    absl::StatusOr<double> read_s = ReadRows(**tier, kNs, rows, dst);
    if (!read_s.ok()) {
      std::cerr << "tier read: " << read_s.status() << "\n";
      return 1;
    }
    get_gbps.push_back(*get_rps * row / 1e9);
    read_gbps.push_back(bytes / *read_s / 1e9);
    read_ratio.push_back(read_gbps.back() / get_gbps.back());
    if (round == 0) {
      write_new_gbps = bytes / *write_s / 1e9;
      continue;
    }
    set_gbps.push_back(*set_rps * row / 1e9);
    write_gbps.push_back(bytes / *write_s / 1e9);
    write_ratio.push_back(write_gbps.back() / set_gbps.back());
  }

  std::string promotion = "null";
  const int prefix_rows = absl::GetFlag(FLAGS_prefix_rows);
  if (prefix_rows > 0) {
    absl::Status dropped = (*tier)->DropNamespace(kNs);  // frees the first pass's memory
    if (!dropped.ok()) std::cerr << "drop: " << dropped << "\n";
    constexpr uint64_t kPrefixNs = 0x11A3A;
    absl::StatusOr<double> w = WriteRows(**tier, kPrefixNs, prefix_rows, sources, 4 * threads);
    if (!w.ok()) {
      std::cerr << "prefix write: " << w.status() << "\n";
      return 1;
    }
    std::vector<std::string> keys;
    for (int i = 0; i < prefix_rows; ++i) keys.push_back(absl::StrCat("row-", i));
    std::vector<std::string> pdst(std::min(prefix_rows, absl::GetFlag(FLAGS_dst_rows)),
                                  std::string(row, 1));
    const auto start = Clock::now();
    std::vector<bool> found = (*tier)->ContainsAll(kPrefixNs, keys);
    const double contains_s = Seconds(start);
    const int hits = static_cast<int>(std::count(found.begin(), found.end(), true));
    absl::StatusOr<double> r = ReadRows(**tier, kPrefixNs, prefix_rows, pdst);
    if (!r.ok()) {
      std::cerr << "prefix read: " << r.status() << "\n";
      return 1;
    }
    const double total_s = Seconds(start);
    promotion = absl::StrFormat(
        "{\"rows\":%d,\"row_bytes\":%d,\"tokens\":%d,\"model\":\"Llama-3-8B, 128 KiB/token, "
        "16 tokens/row\",\"contains_hits\":%d,\"contains_ms\":%.2f,\"read_ms\":%.1f,"
        "\"total_ms\":%.1f,\"read_gbps\":%.3f,\"write_gbps\":%.3f}",
        prefix_rows, row, prefix_rows * 16, hits, contains_s * 1e3, *r * 1e3, total_s * 1e3,
        static_cast<double>(prefix_rows) * row / *r / 1e9,
        static_cast<double>(prefix_rows) * row / *w / 1e9);
  }
  auto median = [](std::vector<double> v) {
    if (v.empty()) return 0.0;
    std::sort(v.begin(), v.end());
    return v.size() % 2 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
  };
  auto list = [](const std::vector<double>& v) {
    std::string out = "[";
    for (size_t i = 0; i < v.size(); ++i) absl::StrAppendFormat(&out, "%s%.3f", i ? "," : "", v[i]);
    return out + "]";
  };
  const KvBackendStats b = (*tier)->backend_stats();
  const std::string json = absl::StrFormat(
      "{\"bench\":\"cluster_tier\",\"cluster\":\"3 masters + 3 replicas, loopback\","
      "\"row_bytes\":%d,\"rows\":%d,\"rounds\":%d,\"threads\":%d,"
      "\"connections_per_node\":%d,\"max_value_bytes\":%d,"
      "\"redis_benchmark\":{\"clients\":%d,\"requests\":%d,\"set_gbps\":%.3f,"
      "\"get_gbps\":%.3f,\"set_gbps_rounds\":%s,\"get_gbps_rounds\":%s},"
      "\"tier\":{\"write_new_keys_gbps\":%.3f,\"write_gbps\":%.3f,\"read_gbps\":%.3f,"
      "\"write_gbps_rounds\":%s,\"read_gbps_rounds\":%s},"
      "\"ratio\":{\"write\":%.2f,\"read\":%.2f,\"write_rounds\":%s,\"read_rounds\":%s},"
      "\"promotion\":%s,\"backend\":{\"connects\":%d,\"broken\":%d,\"redirects\":%d}}",
      row, rows, absl::GetFlag(FLAGS_rounds), threads, o.connections_per_node,
      o.max_value_bytes, threads, absl::GetFlag(FLAGS_redis_benchmark_requests),
      median(set_gbps), median(get_gbps), list(set_gbps), list(get_gbps), write_new_gbps,
      median(write_gbps), median(read_gbps), list(write_gbps), list(read_gbps),
      median(write_ratio), median(read_ratio), list(write_ratio), list(read_ratio), promotion,
      b.connects, b.broken, b.redirects);
  std::cout << json << std::endl;
  if (!absl::GetFlag(FLAGS_out).empty()) std::ofstream(absl::GetFlag(FLAGS_out)) << json << "\n";
  return 0;
}

}  // namespace
}  // namespace kvoffload::tier::cluster

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  return kvoffload::tier::cluster::Main();
}
