// e2e_bench: kvoffload end to end on a GPU — worker process → daemon (CUDA backend) → region and
// back — for every page size and model shape of the benchmark, plus the 1-block job latency and
// the slowdown of a concurrent compute-bound kernel. Prints one JSON object per line:
//   {"method":"kvoffload","direction":"store","page_bytes":4096,"shape":"...","gbps":51.2}
//   {"latency_us":{"p50":..,"p99":..}}
//   {"interference_slowdown_pct":..,"alone_ms":..,"loaded_ms":..,"copy_gbps":..}
// Starts its own kvoffloadd on a temporary runtime dir; workers are kvoffload_cuda_worker.
#include <signal.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/subprocess.h"
#include "grpcpp/grpcpp.h"
#include "kvoffload/v1/kvoffload.grpc.pb.h"

ABSL_FLAG(std::string, daemon, "daemon/kvoffloadd", "kvoffloadd binary");
ABSL_FLAG(std::string, worker, "tests/gpu_e2e/kvoffload_cuda_worker", "CUDA worker binary");
ABSL_FLAG(uint64_t, bytes_per_job, 1ull << 30, "bytes moved by one timed job");
ABSL_FLAG(int32_t, reps, 5, "timed jobs per point (median)");
ABSL_FLAG(std::string, daemon_args, "", "extra kvoffloadd flags, comma separated");
ABSL_FLAG(int64_t, interference_iterations, 2000000, "FMA iterations per compute launch");
ABSL_FLAG(bool, latency_only, false, "only the 1-block job latency (no shapes, no interference)");

namespace {

using kvoffload::common::ChildProcess;

struct Shape {
  std::string name;
  std::string layout;
  uint32_t layers;
  uint64_t layer_page;  // K+V of one layer of one block
  uint64_t page_bytes;  // of one tensor
};

std::map<std::string, std::string> Fields(const std::string& line) {
  std::map<std::string, std::string> out;
  for (absl::string_view part : absl::StrSplit(line, ' ')) {
    std::vector<std::string> kv = absl::StrSplit(part, absl::MaxSplits('=', 1));
    if (kv.size() == 2) out[kv[0]] = kv[1];
  }
  return out;
}

int Die(const std::string& what) {
  std::fprintf(stderr, "e2e_bench: %s\n", what.c_str());
  return 1;
}

void Drop(const std::string& admin_socket, const std::string& engine) {
  auto stub = kvoffload::v1::Admin::NewStub(
      grpc::CreateChannel(absl::StrCat("unix:", admin_socket), grpc::InsecureChannelCredentials()));
  grpc::ClientContext context;
  kvoffload::v1::DropEngineRequest request;
  request.set_engine_id(engine);
  request.set_force(true);
  kvoffload::v1::Empty response;
  stub->DropEngine(&context, request, &response);
}

}  // namespace

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  char dir[] = "/tmp/kvo-e2e-XXXXXX";
  if (mkdtemp(dir) == nullptr) return Die("mkdtemp");
  std::vector<std::string> daemon_argv = {
      absl::GetFlag(FLAGS_daemon), "--backend=cuda", absl::StrCat("--runtime_dir=", dir),
      "--metrics_address=", "--max_region_bytes=8GiB", "--populate_threads=16",
      // Jobs name rows across the whole region (no index): pinned before OpenEngine returns.
      "--region_chunk_bytes=0", "--log_level=warn"};
  for (absl::string_view a :
       absl::StrSplit(absl::GetFlag(FLAGS_daemon_args), ',', absl::SkipEmpty())) {
    daemon_argv.emplace_back(a);
  }
  auto daemon = ChildProcess::Spawn(daemon_argv);
  if (!daemon.ok()) return Die(daemon.status().ToString());
  const std::string socket = absl::StrCat(dir, "/kvoffload.sock");
  const std::string admin = absl::StrCat(dir, "/admin.sock");
  for (int i = 0; i < 1000; ++i) {
    struct stat st;
    if (stat(admin.c_str(), &st) == 0) break;
    usleep(10000);
  }

  std::vector<Shape> shapes = {
      {"pages", "stacked_kv", 8, 4 << 10, 4 << 10},
      {"pages", "stacked_kv", 8, 16 << 10, 16 << 10},
      {"pages", "stacked_kv", 8, 64 << 10, 64 << 10},
      {"pages", "stacked_kv", 8, 256 << 10, 256 << 10},
      {"pages", "stacked_kv", 8, 2 << 20, 2 << 20},
      // Llama-3-8B TP1: 32 layers, separate K and V tensors of 16 tokens × 8 heads × 128 × 2 B.
      {"llama3-8b", "separate_kv", 32, 64 << 10, 32 << 10},
      // DeepSeek-V3 MLA: 61 layers, one latent tensor per layer, 16 tokens × 576 × 2 B.
      {"deepseek-v3-mla", "stacked_kv", 61, 18 << 10, 18 << 10},
  };
  if (absl::GetFlag(FLAGS_latency_only)) shapes.clear();
  int engine_no = 0;
  for (const Shape& shape : shapes) {
    const uint64_t block_bytes = shape.layers * shape.layer_page;
    const uint64_t blocks = std::max<uint64_t>(1, absl::GetFlag(FLAGS_bytes_per_job) / block_bytes);
    const uint64_t row_bytes = (block_bytes + 4095) / 4096 * 4096;
    const std::string engine = absl::StrCat("bench-", engine_no++);
    auto worker = ChildProcess::Spawn(
        {absl::GetFlag(FLAGS_worker), absl::StrCat("--socket=", socket),
         absl::StrCat("--engine_id=", engine), "--rows_assigned_by_engine",
         absl::StrCat("--layout=", shape.layout), absl::StrCat("--num_layers=", shape.layers),
         absl::StrCat("--page_bytes=", shape.layer_page), absl::StrCat("--num_blocks=", blocks),
         absl::StrCat("--budget_bytes=", blocks * row_bytes)});
    if (!worker.ok()) return Die(worker.status().ToString());
    const std::string hello = (*worker)->ReadLine(120);
    if (hello.rfind("registered", 0) != 0) return Die(absl::StrCat(shape.name, ": ", hello));
    for (const char* direction : {"store", "load"}) {
      const std::string line = (*worker)->Command(
          absl::StrCat("bench ", direction, " ", direction[0] == 's' ? 1000 : 2000, " 0 ", blocks,
                       " ", absl::GetFlag(FLAGS_reps)),
          300);
      auto f = Fields(line);
      if (f.count("gbps") == 0) return Die(absl::StrCat(shape.name, " ", direction, ": ", line));
      // gbps: throughput with two jobs in flight (how an engine submits, step after step);
      // gbps_single_job: one job at a time, submit → finished.
      std::printf(
          "{\"method\":\"kvoffload\",\"direction\":\"%s\",\"page_bytes\":%lu,\"shape\":\"%s\","
          "\"gbps\":%s,\"gbps_single_job\":%s,\"bytes\":%s,\"median_us\":%s}\n",
          direction, static_cast<unsigned long>(shape.page_bytes), shape.name.c_str(),
          f["pipelined_gbps"].c_str(), f["gbps"].c_str(), f["bytes"].c_str(),
          f["median_us"].c_str());
      std::fflush(stdout);
    }
    if (shape.name == "llama3-8b") {
      // Concurrent compute: a compute-bound kernel while this worker keeps 64 MiB jobs going.
      const uint64_t n = std::min<uint64_t>(blocks, 32);
      const std::string line = (*worker)->Command(
          absl::StrCat("interference ", absl::GetFlag(FLAGS_interference_iterations), " ", n, " ",
                       blocks),
          300);
      auto f = Fields(line);
      if (f.count("slowdown_pct") == 0) return Die(absl::StrCat("interference: ", line));
      std::printf(
          "{\"interference_slowdown_pct\":%s,\"alone_ms\":%s,\"loaded_ms\":%s,\"copy_gbps\":%s,"
          "\"job_bytes\":%lu}\n",
          f["slowdown_pct"].c_str(), f["alone_ms"].c_str(), f["loaded_ms"].c_str(),
          f["copy_gbps"].c_str(), static_cast<unsigned long>(n * block_bytes));
      std::fflush(stdout);
    }
    (*worker)->Command("quit", 5);
    (*worker)->Wait();
    Drop(admin, engine);
  }

  // 1-block latency on a small engine (4 KiB blocks).
  auto worker = ChildProcess::Spawn({absl::GetFlag(FLAGS_worker), absl::StrCat("--socket=", socket),
                                     "--engine_id=latency", "--rows_assigned_by_engine",
                                     "--layout=stacked_kv", "--num_layers=1", "--page_bytes=4096",
                                     "--num_blocks=64", "--budget_bytes=262144"});
  if (!worker.ok()) return Die(worker.status().ToString());
  const std::string hello = (*worker)->ReadLine(60);
  if (hello.rfind("registered", 0) != 0) return Die(absl::StrCat("latency: ", hello));
  auto f = Fields((*worker)->Command("latency 2000 64", 120));
  if (f.count("p50_us") == 0) return Die("latency failed");
  std::printf("{\"latency_us\":{\"p50\":%s,\"p99\":%s}}\n", f["p50_us"].c_str(),
              f["p99_us"].c_str());
  (*worker)->Command("quit", 5);
  (*worker)->Wait();
  (*daemon)->Signal(SIGTERM);
  (*daemon)->Wait();
  return 0;
}
