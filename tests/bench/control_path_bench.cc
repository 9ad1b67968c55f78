// control_path_bench: the daemon's control path on the host backend, end to end over gRPC.
// Starts kvoffloadd (--backend=host) on a temporary runtime dir, connects one worker (this
// process; KV in sealed memfds) and measures:
//   - submit → finished latency of a 1-block job (store and load), p50 / p99 / max;
//   - a full scheduler store cycle: PrepareStore → store job → CompleteStore, per key;
//   - the daemon's host CPU per job (utime + stime from /proc, over many jobs) for a load of N
//     blocks sent as ONE range (--cpu_blocks), with 2-byte blocks so that the memcpy the host
//     backend does is small next to the control path (copy path v3's target: ≤ 2× the 1-block job at 1M).
// Prints markdown tables, or JSON with --json.
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "client/host/host_kv_memory.h"
#include "client/kvoffload_client.h"
#include "common/subprocess.h"
#include "tests/bench/process_cpu.h"

ABSL_FLAG(std::string, daemon, "daemon/kvoffloadd", "path of the kvoffloadd binary");
ABSL_FLAG(int32_t, iterations, 5000, "jobs per measurement");
ABSL_FLAG(uint32_t, num_layers, 1, "layers of the benchmark engine");
ABSL_FLAG(uint64_t, page_bytes, 4096,
          "one layer's K+V bytes per block (4 KiB: the control path alone)");
ABSL_FLAG(bool, json, false, "print JSON instead of a markdown table");
ABSL_FLAG(std::string, cpu_blocks, "1,1024,65536,1048576",
          "block counts of the CPU-per-job measurement (each job one range); empty: skip it");
ABSL_FLAG(uint64_t, cpu_page_bytes, 2, "bytes per block of the CPU-per-job engine");
ABSL_FLAG(uint32_t, cpu_blocks_per_row, 2048,
          "blocks_per_row of the CPU-per-job engine (rows of one 4 KiB-aligned slot: a range "
          "is contiguous in the region)");
ABSL_FLAG(double, cpu_seconds, 2.0, "daemon CPU to spend per block count (sets the job count)");

using kvoffload::bench::ProcessCpuSeconds;

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

// A worker of this process on `spec`: KV in memfds, `blocks` blocks of random bytes.
struct BenchWorker {
  kvoffload::client::HostKvMemory kv;
  std::unique_ptr<kvoffload::client::WorkerClient> client;
};
absl::Status ConnectWorker(const std::string& socket, const kvoffload::client::EngineSpec& spec,
                           uint64_t blocks, uint64_t seed, BenchWorker* out) {
  if (auto s = out->kv.Create("stacked_kv", spec.num_layers, spec.page_bytes, blocks); !s.ok()) {
    return s;
  }
  out->kv.Fill(seed);
  kvoffload::client::WorkerOptions options;
  options.socket_path = socket;
  options.spec = spec;
  options.tensors = out->kv.Handles();
  auto worker = kvoffload::client::WorkerClient::Connect(options);
  if (!worker.ok()) return worker.status();
  out->client = std::move(worker).value();
  return absl::OkStatus();
}

struct CpuPerJob {
  uint64_t blocks;
  uint64_t bytes;
  int jobs;
  double daemon_cpu_us;  // per job
  double wall_us;        // per job, submit → finished, one at a time
  double memcpy_us;      // one memcpy of `bytes` in this process
};

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
    BenchWorker bench_worker;
    if (auto s = ConnectWorker(socket, spec, 16, 7, &bench_worker); !s.ok()) {
      return Die(s.ToString());
    }
    auto* worker = &bench_worker.client;
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
  std::vector<CpuPerJob> cpu;
  if (!absl::GetFlag(FLAGS_cpu_blocks).empty()) {
    std::vector<uint64_t> counts;
    for (absl::string_view c : absl::StrSplit(absl::GetFlag(FLAGS_cpu_blocks), ',')) {
      uint64_t v = 0;
      if (!absl::SimpleAtoi(c, &v) || v == 0) return Die(absl::StrCat("bad --cpu_blocks ", c));
      counts.push_back(v);
    }
    const uint64_t max_blocks = *std::max_element(counts.begin(), counts.end());
    const uint32_t bpr = absl::GetFlag(FLAGS_cpu_blocks_per_row);
    kvoffload::client::EngineSpec spec;
    spec.engine_id = "bench-cpu";
    spec.num_layers = 1;
    spec.page_bytes = absl::GetFlag(FLAGS_cpu_page_bytes);
    spec.blocks_per_row = bpr;
    const uint64_t row_bytes = (bpr * spec.page_bytes + 4095) / 4096 * 4096;
    spec.budget_bytes = ((max_blocks + bpr - 1) / bpr + 1) * row_bytes;
    spec.rows_assigned_by_engine = true;  // the control path alone: no index bookkeeping
    auto scheduler = kvoffload::client::SchedulerClient::Open(socket, spec);
    if (!scheduler.ok()) return Die(scheduler.status().ToString());
    BenchWorker bench_worker;
    if (auto s = ConnectWorker(socket, spec, max_blocks, 11, &bench_worker); !s.ok()) {
      return Die(s.ToString());
    }
    auto* worker = &bench_worker.client;
    uint64_t job_id = 1;
    auto run_job = [&](uint64_t blocks) -> absl::Status {
      kvoffload::client::JobRequest job;
      job.job_id = job_id++;
      job.direction = kvoffload::client::Direction::kLoad;
      job.ranges.push_back({/*gpu_block=*/0, /*row=*/0, /*first_block=*/0, blocks});
      if (auto s = (*worker)->Submit(job); !s.ok()) return s;
      auto done = (*worker)->WaitFinished(job.job_id, absl::Seconds(60));
      if (!done.ok()) return done.status();
      return done->status;
    };
    const pid_t pid = (*daemon)->pid();
    // Two passes, the first thrown away: it absorbs what the daemon still does after the
    // engine was created (seen: the first count measured up to 1.7× its second-pass cost).
    std::vector<uint64_t> passes = counts;
    passes.insert(passes.end(), counts.begin(), counts.end());
    for (size_t k = 0; k < passes.size(); ++k) {
      const uint64_t blocks = passes[k];
      // Warm-up, then an estimate of the cost per job for the job count (wall time: the CPU
      // counters tick every 10 ms, too coarse for a few small jobs).
      for (int i = 0; i < 5; ++i) {
        if (auto s = run_job(blocks); !s.ok()) return Die(s.ToString());
      }
      const auto w0 = Clock::now();
      for (int i = 0; i < 5; ++i) {
        if (auto s = run_job(blocks); !s.ok()) return Die(s.ToString());
      }
      const double estimate = std::max(1e-5, Micros(w0, Clock::now()) * 1e-6 / 5);
      const int jobs =
          std::clamp(static_cast<int>(absl::GetFlag(FLAGS_cpu_seconds) / estimate), 10, 20000);
      const double cpu0 = ProcessCpuSeconds(pid);
      const auto t0 = Clock::now();
      for (int i = 0; i < jobs; ++i) {
        if (auto s = run_job(blocks); !s.ok()) return Die(s.ToString());
      }
      const auto t1 = Clock::now();
      const double cpu1 = ProcessCpuSeconds(pid);
      // What moving the same bytes costs by itself (one memcpy in this process, median of 21):
      // the host backend's share of the daemon's CPU that the GPU backend leaves to DMA.
      const uint64_t bytes = blocks * spec.page_bytes;
      std::vector<uint8_t> from(bytes, 1), to(bytes, 2);
      std::vector<double> copy_us;
      for (int i = 0; i < 21; ++i) {
        const auto m0 = Clock::now();
        std::memcpy(to.data(), from.data(), bytes);
        copy_us.push_back(Micros(m0, Clock::now()));
      }
      std::sort(copy_us.begin(), copy_us.end());
      if (k < counts.size()) continue;
      cpu.push_back({blocks, bytes, jobs, (cpu1 - cpu0) * 1e6 / jobs, Micros(t0, t1) / jobs,
                     copy_us[copy_us.size() / 2]});
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
    for (const CpuPerJob& c : cpu) {
      std::printf("{\"cpu_us_per_job\": {\"blocks\": %llu, \"us\": %.1f, \"jobs\": %d, "
                  "\"bytes\": %llu, \"wall_us\": %.1f, \"memcpy_us\": %.1f, "
                  "\"where\": \"host backend, one range\"}}\n",
                  static_cast<unsigned long long>(c.blocks), c.daemon_cpu_us, c.jobs,
                  static_cast<unsigned long long>(c.bytes), c.wall_us, c.memcpy_us);
    }
  } else {
    std::printf(
        "| control path (host backend, gRPC over a Unix socket) | n | p50 µs | p99 µs | max µs "
        "|\n");
    std::printf("|---|---:|---:|---:|---:|\n");
    for (const Summary& s : results) {
      std::printf("| %s | %d | %.1f | %.1f | %.1f |\n", s.name.c_str(), s.n, s.p50_us, s.p99_us,
                  s.max_us);
    }
    if (!cpu.empty()) {
      std::printf("\n| load job of N blocks as one range (host backend, %llu-byte blocks) | jobs "
                  "| bytes | daemon CPU µs/job | × 1 block | memcpy of the bytes µs | CPU − memcpy "
                  "× 1 block | wall µs/job |\n|---|---:|---:|---:|---:|---:|---:|---:|\n",
                  static_cast<unsigned long long>(absl::GetFlag(FLAGS_cpu_page_bytes)));
      const double base = cpu.front().daemon_cpu_us - cpu.front().memcpy_us;
      for (const CpuPerJob& c : cpu) {
        std::printf("| %llu blocks | %d | %llu | %.1f | %.2f | %.1f | %.2f | %.1f |\n",
                    static_cast<unsigned long long>(c.blocks), c.jobs,
                    static_cast<unsigned long long>(c.bytes), c.daemon_cpu_us,
                    c.daemon_cpu_us / cpu.front().daemon_cpu_us, c.memcpy_us,
                    (c.daemon_cpu_us - c.memcpy_us) / base, c.wall_us);
      }
    }
  }
  return 0;
}
