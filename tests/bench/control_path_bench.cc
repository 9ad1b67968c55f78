// control_path_bench: the daemon's control path on the host backend, end to end over gRPC.
// Starts kvoffloadd (--backend=host) on a temporary runtime dir, connects one worker (this
// process; KV in sealed memfds) and measures:
//   - submit → finished latency of a 1-block job (store and load), p50 / p99 / max;
//   - a full scheduler store cycle: PrepareStore → store job → CompleteStore, per key.
// Prints a markdown table, or JSON with --json.
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_cat.h"
#include "client/host/host_kv_memory.h"
#include "client/kvoffload_client.h"
#include "common/subprocess.h"

ABSL_FLAG(std::string, daemon, "daemon/kvoffloadd", "path of the kvoffloadd binary");
ABSL_FLAG(int32_t, iterations, 5000, "jobs per measurement");
ABSL_FLAG(uint32_t, num_layers, 1, "layers of the benchmark engine");
ABSL_FLAG(uint64_t, page_bytes, 4096,
          "one layer's K+V bytes per block (4 KiB: the control path alone)");
ABSL_FLAG(bool, json, false, "print JSON instead of a markdown table");

namespace {

using Clock = std::chrono::steady_clock;

struct Summary {
  std::string name;
  double p50_us, p99_us, max_us;
  int n;
};

Summary Summarize(const std::string& name, std::vector<double> us) {
  std::sort(us.begin(), us.end());
  auto at = [&](double q) {
    return us[std::min(us.size() - 1, static_cast<size_t>(q * us.size()))];
  };
  return {name, at(0.5), at(0.99), us.back(), static_cast<int>(us.size())};
}

double Micros(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::micro>(b - a).count();
}

int Die(const std::string& what) {
  std::fprintf(stderr, "control_path_bench: %s\n", what.c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  char dir[] = "/tmp/kvo-bench-XXXXXX";
  if (mkdtemp(dir) == nullptr) return Die("mkdtemp");
  auto daemon = kvoffload::common::ChildProcess::Spawn(
      {absl::GetFlag(FLAGS_daemon), "--backend=host", absl::StrCat("--runtime_dir=", dir),
       "--metrics_address=", "--max_region_bytes=1GiB", "--log_level=warn"});
  if (!daemon.ok()) return Die(daemon.status().ToString());
  const std::string socket = absl::StrCat(dir, "/kvoffload.sock");
  for (int i = 0; i < 500; ++i) {
    struct stat st;
    if (stat(socket.c_str(), &st) == 0) break;
    usleep(10000);
  }

  const int n = absl::GetFlag(FLAGS_iterations);
  std::vector<Summary> results;
  for (bool indexed : {false, true}) {
    kvoffload::client::EngineSpec spec;
    spec.engine_id = indexed ? "bench-indexed" : "bench";
    spec.num_layers = absl::GetFlag(FLAGS_num_layers);
    spec.page_bytes = absl::GetFlag(FLAGS_page_bytes);
    spec.budget_bytes = 64 * spec.num_layers * spec.page_bytes;  // 64 rows
    spec.rows_assigned_by_engine = !indexed;
    auto scheduler = kvoffload::client::SchedulerClient::Open(socket, spec);
    if (!scheduler.ok()) return Die(scheduler.status().ToString());
    kvoffload::client::HostKvMemory kv;
    if (auto s = kv.Create("stacked_kv", spec.num_layers, spec.page_bytes, 16); !s.ok()) {
      return Die(s.ToString());
    }
    kv.Fill(7);
    kvoffload::client::WorkerOptions options;
    options.socket_path = socket;
    options.spec = spec;
    options.tensors = kv.Handles();
    auto worker = kvoffload::client::WorkerClient::Connect(options);
    if (!worker.ok()) return Die(worker.status().ToString());
    uint64_t job_id = 1;
    if (!indexed) {
      for (auto direction :
           {kvoffload::client::Direction::kStore, kvoffload::client::Direction::kLoad}) {
        std::vector<double> us;
        for (int i = -100; i < n; ++i) {  // 100 warm-up jobs
          kvoffload::client::JobRequest job{job_id,
                                            direction,
                                            {static_cast<uint64_t>(i & 15)},
                                            {static_cast<uint64_t>((i + 100) % 64)},
                                            -1};
          auto t0 = Clock::now();
          if (auto s = (*worker)->Submit(job); !s.ok()) return Die(s.ToString());
          auto done = (*worker)->WaitFinished(job_id++, absl::Seconds(10));
          auto t1 = Clock::now();
          if (!done.ok()) return Die(done.status().ToString());
          if (!done->status.ok()) return Die(done->status.ToString());
          if (i >= 0) us.push_back(Micros(t0, t1));
        }
        results.push_back(Summarize(
            absl::StrCat("1-block ",
                         direction == kvoffload::client::Direction::kStore ? "store" : "load",
                         " job: submit → finished (", spec.num_layers * spec.page_bytes, " bytes)"),
            us));
      }
    } else {
      std::vector<double> us;
      for (int i = -100; i < n; ++i) {
        const std::string key = absl::StrCat("key-", i + 100);
        auto t0 = Clock::now();
        auto prepared = (*scheduler)->PrepareStore({key});
        if (!prepared.ok()) return Die(prepared.status().ToString());
        kvoffload::client::JobRequest job{job_id,
                                          kvoffload::client::Direction::kStore,
                                          {static_cast<uint64_t>(i & 15)},
                                          prepared->rows,
                                          -1};
        if (auto s = (*worker)->Submit(job); !s.ok()) return Die(s.ToString());
        auto done = (*worker)->WaitFinished(job_id++, absl::Seconds(10));
        if (!done.ok()) return Die(done.status().ToString());
        if (!done->status.ok()) return Die(done->status.ToString());
        if (auto s = (*scheduler)->CompleteStore({key}, true); !s.ok()) return Die(s.ToString());
        auto t1 = Clock::now();
        if (i >= 0) us.push_back(Micros(t0, t1));
      }
      results.push_back(Summarize("store cycle: PrepareStore → 1-block job → CompleteStore", us));
    }
  }
  (*daemon)->Signal(SIGTERM);
  (*daemon)->Wait();
  std::string rm = absl::StrCat("rm -rf ", dir);
  if (system(rm.c_str()) != 0) std::fprintf(stderr, "could not remove %s\n", dir);

  if (absl::GetFlag(FLAGS_json)) {
    std::printf("[");
    for (size_t i = 0; i < results.size(); ++i) {
      std::printf(
          "%s{\"name\": \"%s\", \"n\": %d, \"p50_us\": %.1f, \"p99_us\": %.1f, \"max_us\": %.1f}",
          i ? ", " : "", results[i].name.c_str(), results[i].n, results[i].p50_us,
          results[i].p99_us, results[i].max_us);
    }
    std::printf("]\n");
  } else {
    std::printf(
        "| control path (host backend, gRPC over a Unix socket) | n | p50 µs | p99 µs | max µs "
        "|\n");
    std::printf("|---|---:|---:|---:|---:|\n");
    for (const Summary& s : results) {
      std::printf("| %s | %d | %.1f | %.1f | %.1f |\n", s.name.c_str(), s.n, s.p50_us, s.p99_us,
                  s.max_us);
    }
  }
  return 0;
}
