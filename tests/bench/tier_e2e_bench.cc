// tier_e2e_bench: the disk tier end to end, through the real path. Starts the real kvoffloadd
// (--backend=host) with --disk_tier_path, drives it with the C++ SchedulerClient, moves the bytes
// with a WorkerClient of this process (KV in memfds, client/host/host_kv_memory.h; the daemon's
// host backend copies them), and reads the tier's counters from Admin.Stats `tiers`. Prints one
// JSON object per line.
//
//   --mode=bandwidth (one row size, --row_bytes, --rows rows; the region holds exactly --rows):
//     ceiling   the device's own O_DIRECT ceiling in the same run, in a file of the same
//               directory, block = row + 4 KiB (the tier's one vectored request per record:
//               [4 KiB header, payload]); writes at the spill depth (min(--tier_spills_in_flight,
//               --disk_tier_write_depth)), reads at --disk_tier_queue_depth. By fio
//               (--direct=1 --ioengine=io_uring) when fio is on PATH, and always by a built-in
//               reader/writer (that many threads, each one pwrite/pread of O_DIRECT at a time)
//               so that a machine without fio still has a ceiling ("ceiling_source").
//     spill     store --rows rows (PrepareStore, a store job, CompleteStore; 64 a batch) and time
//               the first commit → TierStats.spills_ok reaching --rows; the daemon's CPU
//               (/proc/<pid>/stat utime+stime) over the drain after the last commit, per GB.
//     promote   store as many other rows (evicting the first, already on disk), wait for their
//               spills, then Lookup the first rows (all at once: the prefix) every --poll_us
//               until every key is a HIT, PrepareLoad + one load job + CompleteLoad; times
//               lookup → all HIT (promote GB/s) and lookup → loaded (the prefix's
//               "promoted and loaded"), the loaded blocks compared byte for byte; CPU per GB.
//     latency   one evicted row at a time: Lookup until HIT (spinning), p50/p99 of
//               --latency_samples, and the daemon's own promotion time (promotion_seconds_sum).
//     dram      load jobs of --load_rows resident rows (one job a time) with the tier idle, then
//               again while the tier drains a backlog of spills (rows stored just before: the
//               stores are over, only the tier's writes run) — the slowdown of DRAM loads while
//               the tier writes at full speed; the spill GB/s during that window is reported.
//   --mode=trace: the hit rate of a prefix trace whose working set is --trace_ws_factor × the
//     region's rows, without and with the tier (two daemons, same trace): see RunTrace.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "client/host/host_kv_memory.h"
#include "client/kvoffload_client.h"
#include "grpcpp/grpcpp.h"
#include "tests/bench/bench_env.h"
#include "tests/bench/process_cpu.h"
#include "tests/integration/harness.h"

ABSL_FLAG(std::string, mode, "bandwidth", "bandwidth or trace");
ABSL_FLAG(std::string, dir, "/var/tmp/kvo-tier-e2e", "directory on the device under test");
ABSL_FLAG(uint64_t, row_bytes, 2ull << 20, "row (= record payload) bytes");
ABSL_FLAG(uint64_t, rows, 1024, "rows of the region, and rows spilled and promoted");
ABSL_FLAG(int32_t, queue_depth, 32, "--disk_tier_queue_depth");
ABSL_FLAG(int32_t, write_depth, 16, "--disk_tier_write_depth");
ABSL_FLAG(int32_t, spills_in_flight, 8, "--tier_spills_in_flight");
ABSL_FLAG(int64_t, promote_timeout_ms, 20000,
          "--tier_promote_timeout_ms (large: the bandwidth phases time whole promotions)");
ABSL_FLAG(int32_t, poll_us, 1000, "Lookup / Stats poll interval while waiting");
ABSL_FLAG(int32_t, latency_samples, 200, "single-row promotions timed");
ABSL_FLAG(uint64_t, load_rows, 16, "rows per DRAM load job in the dram phase");
ABSL_FLAG(bool, fio, true, "also measure the ceiling with fio when it is on PATH");
// Trace mode.
ABSL_FLAG(uint64_t, trace_rows, 256, "trace: region rows (the DRAM budget)");
ABSL_FLAG(uint64_t, trace_row_bytes, 256 << 10, "trace: row bytes (one 16-token block a row)");
ABSL_FLAG(int32_t, trace_ws_factor, 4, "trace: working set = this × the region's rows");
ABSL_FLAG(int32_t, trace_requests, 3000, "trace: requests");
ABSL_FLAG(int32_t, trace_step_ms, 5, "trace: an engine step (the wait before re-looking up)");
ABSL_FLAG(int32_t, trace_max_steps, 50, "trace: steps a request waits on pending keys at most");
ABSL_FLAG(int64_t, trace_promote_timeout_ms, 500, "trace: --tier_promote_timeout_ms (default)");
ABSL_FLAG(uint64_t, seed, 42, "trace seed");
ABSL_FLAG(std::string, trace_name, "chat", "trace: a label for the JSON");
ABSL_FLAG(int32_t, trace_sys_prompts, 8, "trace: system prompts (0: none)");
ABSL_FLAG(int32_t, trace_sys_blocks, 16, "trace: blocks of a system prompt");
ABSL_FLAG(int32_t, trace_conv_blocks, 16, "trace: blocks of a conversation's full history");

namespace kvoffload::bench {
namespace {

using client::Direction;
using client::KeyState;
using client::SchedulerClient;
using client::WorkerClient;
using Clock = std::chrono::steady_clock;
using testing::DaemonProcess;

// The daemon of the phase running, stopped by Die (it would outlive us holding our stdout).
DaemonProcess* g_daemon = nullptr;

[[noreturn]] void Die(const std::string& what) {
  std::fprintf(stderr, "tier_e2e_bench: %s\n", what.c_str());
  if (g_daemon != nullptr) g_daemon->Stop();
  std::fflush(stdout);
  std::exit(1);
}
template <typename T>
T Ok(absl::StatusOr<T> v, const char* what) {
  if (!v.ok()) Die(absl::StrCat(what, ": ", v.status().ToString()));
  return *std::move(v);
}
void Ok(const absl::Status& s, const char* what) {
  if (!s.ok()) Die(absl::StrCat(what, ": ", s.ToString()));
}

double Mean(const std::vector<double>& v) {
  double s = 0;
  for (double x : v) s += x;
  return v.empty() ? 0 : s / v.size();
}

// ---- The ceiling ----------------------------------------------------------------------------

void Shell(const std::string& cmd) {
  if (std::system(cmd.c_str()) != 0) Die("failed: " + cmd);
}

bool OnPath(const std::string& tool) {
  return std::system(absl::StrCat("command -v ", tool, " >/dev/null 2>&1").c_str()) == 0;
}

// fio once (one job, O_DIRECT, io_uring), bytes/s; < 0 on failure.
double Fio(const std::string& rw, const std::string& file, uint64_t bs, int qd, uint64_t size,
           std::string* error) {
  const std::string cmd = absl::StrCat(
      "fio --name=ceiling --filename=", file, " --rw=", rw, " --direct=1 --ioengine=io_uring",
      " --bs=", bs, " --iodepth=", qd, " --size=", size, " --numjobs=1 --output-format=json 2>&1");
  FILE* p = popen(cmd.c_str(), "r");
  if (p == nullptr) return -1;
  std::string out;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), p)) > 0) out.append(buf, n);
  if (pclose(p) != 0) {
    *error = out.substr(0, 500);
    return -1;
  }
  std::regex re("\"bw_bytes\"\\s*:\\s*([0-9]+)");
  double best = 0;
  for (auto it = std::sregex_iterator(out.begin(), out.end(), re); it != std::sregex_iterator();
       ++it) {
    best = std::max(best, std::stod((*it)[1]));
  }
  return best > 0 ? best : -1;
}

// The built-in ceiling: `qd` threads, each with one O_DIRECT pwrite/pread of `bs` at a time, over
// a fallocate'd file of `size` bytes (sequential offsets handed out in order). bytes/s.
double DirectCeiling(const std::string& file, bool write, uint64_t bs, int qd, uint64_t size) {
  const uint64_t blocks = size / bs;
  int fd = open(file.c_str(), O_RDWR | O_CREAT | O_DIRECT, 0640);
  if (fd < 0) Die(absl::StrCat("open O_DIRECT ", file, ": ", strerror(errno)));
  if (write && fallocate(fd, 0, 0, blocks * bs) != 0) Die("fallocate for the ceiling");
  std::atomic<uint64_t> next{0};
  std::atomic<bool> failed{false};
  const auto t0 = Clock::now();
  std::vector<std::thread> threads;
  for (int t = 0; t < qd; ++t) {
    threads.emplace_back([&, t] {
      void* buf = nullptr;
      if (posix_memalign(&buf, 4096, bs) != 0) return;
      std::memset(buf, 0x5a + t, bs);
      for (uint64_t b; (b = next.fetch_add(1)) < blocks;) {
        const ssize_t n = write ? pwrite(fd, buf, bs, b * bs) : pread(fd, buf, bs, b * bs);
        if (n != static_cast<ssize_t>(bs)) failed = true;
      }
      free(buf);
    });
  }
  for (auto& t : threads) t.join();
  const double s = Since(t0);
  close(fd);
  if (failed) Die("the built-in O_DIRECT ceiling's I/O failed");
  return blocks * bs / s;
}

struct Ceiling {
  double write = 0, read = 0;              // bytes/s, the one targets are judged against
  double fio_write = -1, fio_read = -1;    // -1: not measured
  double builtin_write = 0, builtin_read = 0;
  std::string source;
};

Ceiling MeasureCeiling(const std::string& dir, uint64_t bs, int write_qd, int read_qd,
                       uint64_t size) {
  Ceiling c;
  const std::string file = dir + "/ceiling.dat";
  std::string error;
  if (absl::GetFlag(FLAGS_fio) && OnPath("fio")) {
    c.fio_write = Fio("write", file, bs, write_qd, size, &error);
    c.fio_read = Fio("read", file, bs, read_qd, size, &error);
    if (!error.empty()) std::fprintf(stderr, "fio: %s\n", error.c_str());
    std::remove(file.c_str());
  }
  c.builtin_write = DirectCeiling(file, true, bs, write_qd, size);
  c.builtin_read = DirectCeiling(file, false, bs, read_qd, size);
  std::remove(file.c_str());
  if (c.fio_write > 0 && c.fio_read > 0) {
    c.write = c.fio_write, c.read = c.fio_read, c.source = "fio";
  } else {
    c.write = c.builtin_write, c.read = c.builtin_read;
    c.source = "builtin (fio absent or failed)";
  }
  return c;
}

// ---- The daemon, an engine, a worker -----------------------------------------------------------

struct Node {
  std::unique_ptr<DaemonProcess> daemon;
  std::unique_ptr<v1::Admin::Stub> admin;
  std::unique_ptr<SchedulerClient> scheduler;
  client::HostKvMemory kv;
  std::unique_ptr<WorkerClient> worker;
  client::EngineSpec spec;
  uint64_t job = 1;
  uint64_t row_bytes = 0;

  v1::TierStats Tier() {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    v1::StatsRequest request;
    v1::StatsResponse response;
    grpc::Status s = admin->Stats(&context, request, &response);
    if (!s.ok()) Die("Admin.Stats: " + s.error_message());
    for (const v1::TierStats& t : response.tiers()) {
      if (t.name() == "disk") return t;
    }
    return {};
  }
  double Cpu() { return ProcessCpuSeconds(daemon->pid()); }

  // One job over `rows` ↔ GPU blocks `blocks` (same length), waited for.
  void Job(Direction d, const std::vector<uint64_t>& blocks, const std::vector<uint64_t>& rows,
           uint64_t epoch = 0) {
    client::JobRequest job;
    job.job_id = this->job++;
    job.direction = d;
    job.gpu_blocks = blocks;
    job.rows = rows;
    job.region_epoch = epoch;
    Ok(worker->Submit(job), "Submit");
    auto done = Ok(worker->WaitFinished(job.job_id, absl::Seconds(120)), "WaitFinished");
    Ok(done.status, "job");
  }

  // Stores `keys` from GPU blocks first_block + i (mod the worker's blocks), 64 a batch.
  // Returns the time of the first CompleteStore (the first row READY).
  Clock::time_point Store(const std::vector<std::string>& keys, uint64_t first_block,
                          size_t batch = 64) {
    Clock::time_point first{};
    for (size_t i = 0; i < keys.size(); i += batch) {
      std::vector<std::string> part(keys.begin() + i,
                                    keys.begin() + std::min(keys.size(), i + batch));
      auto prepared = Ok(scheduler->PrepareStore(part), "PrepareStore");
      if (prepared.keys.empty()) continue;
      std::vector<uint64_t> blocks;
      for (const std::string& k : prepared.keys) {
        const size_t at = std::find(part.begin(), part.end(), k) - part.begin();
        blocks.push_back((first_block + i + at) % kv.blocks());
      }
      Job(Direction::kStore, blocks, prepared.rows, prepared.region_epoch);
      if (i == 0) first = Clock::now();
      Ok(scheduler->CompleteStore(prepared.keys, true), "CompleteStore");
    }
    return first;
  }

  // Spills that ended one way or another (written, gone, already held, failed, dropped).
  static uint64_t Settled(const v1::TierStats& t) {
    return t.spills_ok() + t.spills_gone() + t.spills_already_held() + t.spills_failed() +
           t.spill_queue_dropped();
  }

  // Polls Stats until Settled ≥ n.
  v1::TierStats WaitSpilled(uint64_t n, absl::Duration timeout = absl::Seconds(300)) {
    const absl::Time deadline = absl::Now() + timeout;
    for (;;) {
      v1::TierStats t = Tier();
      if (Settled(t) >= n) return t;
      if (absl::Now() > deadline) Die(absl::StrCat("spills did not reach ", n));
      std::this_thread::sleep_for(std::chrono::microseconds(absl::GetFlag(FLAGS_poll_us)));
    }
  }

  // Lookup every `poll` until all of `keys` are HIT; returns false on a MISS or the deadline.
  bool LookupUntilHit(const std::vector<std::string>& keys, std::chrono::microseconds poll,
                      int* lookups = nullptr) {
    const auto deadline = Clock::now() + std::chrono::seconds(120);
    for (int n = 1;; ++n) {
      auto states = Ok(scheduler->Lookup(keys), "Lookup");
      bool all = true, miss = false;
      for (KeyState s : states) all &= s == KeyState::kHit, miss |= s == KeyState::kMiss;
      if (lookups) *lookups = n;
      if (all) return true;
      if (miss || Clock::now() > deadline) return false;
      if (poll.count() > 0) std::this_thread::sleep_for(poll);
    }
  }
};

std::vector<std::string> DaemonArgs(const std::string& tier_dir, uint64_t row_bytes,
                                    uint64_t tier_bytes, uint64_t region_bytes,
                                    int64_t promote_timeout_ms) {
  std::vector<std::string> args = {
      absl::StrCat("--max_region_bytes=", region_bytes + (64 << 20)),
  };
  if (!tier_dir.empty()) {
    args.push_back("--disk_tier_path=" + tier_dir);
    args.push_back(absl::StrCat("--disk_tier_bytes=", tier_bytes));
    args.push_back(absl::StrCat("--disk_tier_row_bytes=", row_bytes));
    args.push_back(absl::StrCat("--disk_tier_queue_depth=", absl::GetFlag(FLAGS_queue_depth)));
    args.push_back(absl::StrCat("--disk_tier_write_depth=", absl::GetFlag(FLAGS_write_depth)));
    args.push_back(absl::StrCat("--tier_spills_in_flight=", absl::GetFlag(FLAGS_spills_in_flight)));
    args.push_back(absl::StrCat("--tier_promote_timeout_ms=", promote_timeout_ms));
  }
  return args;
}

void StartNode(Node* node, std::vector<std::string> args, uint64_t row_bytes, uint64_t rows,
               uint64_t worker_blocks) {
  node->daemon = Ok(DaemonProcess::Start(args), "start kvoffloadd");
  g_daemon = node->daemon.get();
  node->admin = node->daemon->AdminStub();
  node->row_bytes = row_bytes;
  node->spec.engine_id = "tierbench";
  node->spec.num_layers = 1;
  node->spec.page_bytes = row_bytes;
  node->spec.budget_bytes = rows * row_bytes;
  node->spec.rows_assigned_by_engine = false;
  node->spec.model_identity = "tier-e2e-bench";
  node->scheduler =
      Ok(SchedulerClient::Open(node->daemon->data_socket(), node->spec), "OpenEngine");
  Ok(node->scheduler->WaitUntilReady(absl::Seconds(120)), "WaitUntilReady");
  Ok(node->kv.Create("stacked_kv", 1, row_bytes, worker_blocks), "HostKvMemory");
  node->kv.Fill(7);
  client::WorkerOptions options;
  options.socket_path = node->daemon->data_socket();
  options.spec = node->spec;
  options.tensors = node->kv.Handles();
  node->worker = Ok(WorkerClient::Connect(options), "WorkerClient::Connect");
}

void StopNode(Node* node) {
  node->worker.reset();
  node->scheduler.reset();
  node->admin.reset();
  g_daemon = nullptr;
  if (node->daemon) node->daemon->Stop();
  node->daemon.reset();
}

std::vector<std::string> Keys(const std::string& prefix, uint64_t n) {
  std::vector<std::string> keys;
  for (uint64_t i = 0; i < n; ++i) keys.push_back(absl::StrCat(prefix, "-", i));
  return keys;
}

// ---- Bandwidth, latency, DRAM loads --------------------------------------------------------------

int RunBandwidth() {
  const std::string dir = absl::GetFlag(FLAGS_dir);
  const uint64_t R = absl::GetFlag(FLAGS_row_bytes);
  const uint64_t N = absl::GetFlag(FLAGS_rows);
  const uint64_t record = R + 4096;
  const int write_qd = std::min(absl::GetFlag(FLAGS_spills_in_flight),
                                absl::GetFlag(FLAGS_write_depth));
  const int read_qd = absl::GetFlag(FLAGS_queue_depth);
  const double gb = 1e9;
  Shell(absl::StrCat("mkdir -p ", dir, " && rm -rf ", dir, "/tier && mkdir -p ", dir,
                           "/tier"));

  const Ceiling c = MeasureCeiling(dir, record, write_qd, read_qd, N * record);
  Emit(absl::StrFormat(
      "{\"phase\": \"ceiling\", \"row_bytes\": %d, \"block_bytes\": %d, \"bytes\": %d, "
      "\"write_qd\": %d, \"read_qd\": %d, \"source\": \"%s\", \"write_gbps\": %.3f, "
      "\"read_gbps\": %.3f, \"fio_write_gbps\": %.3f, \"fio_read_gbps\": %.3f, "
      "\"builtin_write_gbps\": %.3f, \"builtin_read_gbps\": %.3f, \"machine\": %s, "
      "\"loadavg\": %s}",
      R, record, N * record, write_qd, read_qd, c.source, c.write / gb, c.read / gb,
      c.fio_write / gb, c.fio_read / gb, c.builtin_write / gb, c.builtin_read / gb, Machine(),
      LoadAvg()));

  Node node;
  // The tier holds both key sets and the dram phase's backlog; the region exactly N rows.
  StartNode(&node,
            DaemonArgs(dir + "/tier", R, (3 * N + 64) * record + 4096, N * R,
                       absl::GetFlag(FLAGS_promote_timeout_ms)),
            R, N, N);
  const std::chrono::microseconds poll(absl::GetFlag(FLAGS_poll_us));

  // Spill: N rows stored, timed from the first commit to spills_ok == N.
  const std::vector<std::string> prefix = Keys("prefix", N);
  const double cpu0 = node.Cpu();
  const Clock::time_point first = node.Store(prefix, 0);
  const double store_s = Since(first);
  const double cpu_stored = node.Cpu();
  const uint64_t spilled_at_stored = node.Tier().spills_ok();
  const v1::TierStats after_spill = node.WaitSpilled(N);
  const double spill_s = Since(first);
  const double cpu_spilled = node.Cpu();
  if (after_spill.spills_ok() != N) Die("not every row was spilled (spills_gone?)");
  const double drain_bytes = static_cast<double>(N - spilled_at_stored) * R;
  const double drain_s = spill_s - store_s;
  // Two figures: from the first commit (bounded by the stores too where the host's copies are no
  // faster than the disk), and the drain once the stores are over (the tier alone).
  const double spill_gbps = N * R / spill_s, drain_gbps = drain_s > 0 ? drain_bytes / drain_s : 0;
  Emit(absl::StrFormat(
      "{\"phase\": \"spill\", \"row_bytes\": %d, \"rows\": %d, \"bytes\": %d, "
      "\"seconds\": %.4f, \"gbps_from_first_commit\": %.3f, \"ratio_from_first_commit\": %.3f, "
      "\"stores_seconds\": %.4f, \"store_gbps\": %.3f, \"spilled_when_stores_done\": %d, "
      "\"drain_seconds\": %.4f, \"drain_gbps\": %.3f, \"drain_ratio_to_ceiling\": %.3f, "
      "\"drain_ratio_device_bytes\": %.3f, \"cpu_s_per_gb_drain\": %.4f, "
      "\"cpu_s_per_gb_phase_with_stores\": %.4f, \"loadavg\": %s}",
      R, N, N * R, spill_s, spill_gbps / gb, spill_gbps / c.write, store_s, N * R / store_s / gb,
      spilled_at_stored, drain_s, drain_gbps / gb, drain_gbps / c.write,
      drain_gbps * record / R / c.write,
      drain_bytes > 0 ? (cpu_spilled - cpu_stored) / (drain_bytes / gb) : -1.0,
      (cpu_spilled - cpu0) / (N * R / gb), LoadAvg()));

  // Evict the prefix: as many other rows, spilled too (a promotion needs rows not being spilled).
  // Then N/8 more (the region may round up to a few more rows than N), once the first N are on
  // disk: stores outrun the disk, and a row evicted before its spill is not in the tier.
  const std::vector<std::string> fill = Keys("fill", N + N / 8);
  node.Store(std::vector<std::string>(fill.begin(), fill.begin() + N), 0);
  node.WaitSpilled(2 * N);
  node.Store(std::vector<std::string>(fill.begin() + N, fill.end()), N);
  node.WaitSpilled(N + fill.size());
  // (No Lookup to check the eviction: a Lookup promotes. promotions_ok == N below proves it.)
  // Promote the prefix (all of it, one Lookup), then load it; byte-compare.
  for (uint64_t b = 0; b < N; ++b) node.kv.Clobber(b);
  std::vector<uint64_t> blocks(N);
  for (uint64_t b = 0; b < N; ++b) blocks[b] = b;
  const v1::TierStats before_promote = node.Tier();
  const double pcpu0 = node.Cpu();
  const auto p0 = Clock::now();
  int lookups = 0;
  if (!node.LookupUntilHit(prefix, poll, &lookups)) Die("the prefix was not promoted");
  const double promote_s = Since(p0);
  const double pcpu1 = node.Cpu();
  uint64_t epoch = 0;
  std::vector<uint64_t> rows = Ok(node.scheduler->PrepareLoad(prefix, &epoch), "PrepareLoad");
  node.Job(Direction::kLoad, blocks, rows, epoch);
  const double loaded_s = Since(p0);
  Ok(node.scheduler->CompleteLoad(prefix), "CompleteLoad");
  uint64_t wrong = 0;
  for (uint64_t b = 0; b < N; ++b) wrong += node.kv.Verify(b) ? 0 : 1;
  const v1::TierStats after_promote = node.Tier();
  const uint64_t promoted = after_promote.promotions_ok() - before_promote.promotions_ok();
  const double target_s = N * R / c.read * 1.1 + 0.005;
  const double pbytes = static_cast<double>(promoted) * R;  // == N * R when all were evicted
  // The load alone (rows resident now), for the split of promote+load.
  const auto l0 = Clock::now();
  rows = Ok(node.scheduler->PrepareLoad(prefix, &epoch), "PrepareLoad");
  node.Job(Direction::kLoad, blocks, rows, epoch);
  const double load_only_s = Since(l0);
  Ok(node.scheduler->CompleteLoad(prefix), "CompleteLoad");
  Emit(absl::StrFormat(
      "{\"phase\": \"promote\", \"row_bytes\": %d, \"rows\": %d, \"bytes\": %d, "
      "\"promotions_ok\": %d, \"lookups\": %d, \"promote_seconds\": %.4f, \"gbps\": %.3f, "
      "\"ratio_to_ceiling\": %.3f, \"ratio_device_bytes\": %.3f, "
      "\"promoted_and_loaded_ms\": %.2f, \"load_only_ms\": %.2f, \"target_ms\": %.2f, "
      "\"loaded_over_target\": %.3f, \"blocks_wrong\": %d, \"cpu_s_per_gb\": %.4f, "
      "\"daemon_promotion_seconds_max\": %.4f, \"timed_out\": %d}",
      R, N, N * R, promoted, lookups, promote_s, pbytes / promote_s / gb,
      pbytes / promote_s / c.read, pbytes * record / R / promote_s / c.read, loaded_s * 1e3,
      load_only_s * 1e3, target_s * 1e3, loaded_s / target_s, wrong,
      (pcpu1 - pcpu0) / (pbytes / gb), after_promote.promotion_seconds_max(),
      after_promote.promotions_timed_out() - before_promote.promotions_timed_out()));

  // One row at a time: the fill rows are on disk only now (the prefix took their rows).
  const int samples = std::max<int>(std::min<int>(absl::GetFlag(FLAGS_latency_samples), N / 2),
                                    std::min<uint64_t>(absl::GetFlag(FLAGS_load_rows), N / 8));
  {
    const v1::TierStats t0 = node.Tier();
    std::vector<double> us;
    for (int i = 0; i < samples; ++i) {
      const auto s0 = Clock::now();
      if (!node.LookupUntilHit({fill[i]}, std::chrono::microseconds(0))) {
        Die("a single row was not promoted");
      }
      us.push_back(Since(s0) * 1e6);
    }
    const v1::TierStats t1 = node.Tier();
    const uint64_t n = t1.promotions_ok() - t0.promotions_ok();
    Emit(absl::StrFormat(
        "{\"phase\": \"latency\", \"row_bytes\": %d, \"samples\": %d, \"p50_us\": %.1f, "
        "\"p99_us\": %.1f, \"max_us\": %.1f, \"daemon_mean_us\": %.1f, "
        "\"device_one_record_at_ceiling_us\": %.1f}",
        R, samples, Percentile(us, 0.5), Percentile(us, 0.99), Percentile(us, 1.0),
        n ? (t1.promotion_seconds_sum() - t0.promotion_seconds_sum()) / n * 1e6 : -1.0,
        record / c.read * 1e6));
  }

  // DRAM loads with the tier idle, then while it drains a backlog of spills.
  {
    const uint64_t L = std::min<uint64_t>(absl::GetFlag(FLAGS_load_rows), N / 8);
    // Hot rows: the last rows the single-row phase promoted (resident, the most recent).
    const std::vector<std::string> hot(fill.begin() + samples - L, fill.begin() + samples);
    std::vector<uint64_t> hot_blocks(blocks.begin(), blocks.begin() + L);
    auto load = [&] {
      const auto t = Clock::now();
      uint64_t e = 0;
      auto r = Ok(node.scheduler->PrepareLoad(hot, &e), "PrepareLoad hot");
      node.Job(Direction::kLoad, hot_blocks, r, e);
      Ok(node.scheduler->CompleteLoad(hot), "CompleteLoad hot");
      return Since(t);
    };
    node.WaitSpilled(node.Tier().spills_queued());
    std::vector<double> idle, busy;
    const auto i0 = Clock::now();
    while (Since(i0) < 3.0) idle.push_back(load());
    // The backlog: rows the tier does not hold yet (new keys), fewer than the region minus the
    // hot rows, so that none is evicted before its spill.
    const uint64_t backlog = N - L - N / 16;
    const v1::TierStats b0 = node.Tier();
    const uint64_t target = Node::Settled(b0) + backlog;
    const double cpu_b0 = node.Cpu();
    node.Store(Keys("backlog", backlog), L);
    const v1::TierStats s0 = node.Tier();
    const auto w0 = Clock::now();
    uint64_t spilled_end = s0.spills_ok();
    double window = 0;
    for (;;) {
      const double t = load();
      const v1::TierStats s = node.Tier();
      const bool still = Node::Settled(s) < target;
      if (!still) break;  // this load may have overlapped the drain's end: not counted
      busy.push_back(t);
      spilled_end = s.spills_ok();
      window = Since(w0);
    }
    const double cpu_b1 = node.Cpu();
    node.WaitSpilled(target);
    const double idle_p50 = Percentile(idle, 0.5), busy_p50 = Percentile(busy, 0.5);
    const double spill_during = window > 0 ? (spilled_end - s0.spills_ok()) * R / window : 0;
    Emit(absl::StrFormat(
        "{\"phase\": \"dram\", \"row_bytes\": %d, \"load_rows\": %d, \"idle_loads\": %d, "
        "\"busy_loads\": %d, \"idle_p50_ms\": %.3f, \"busy_p50_ms\": %.3f, "
        "\"idle_gbps\": %.3f, \"busy_gbps\": %.3f, \"slowdown_pct\": %.2f, "
        "\"busy_mean_ms\": %.3f, \"idle_mean_ms\": %.3f, \"spill_gbps_during\": %.3f, "
        "\"spill_ratio_to_ceiling_during\": %.3f, \"backlog_rows\": %d, \"window_s\": %.3f, "
        "\"spilled_when_stores_done\": %d, \"cpu_s\": %.3f, \"loadavg\": %s}",
        R, L, idle.size(), busy.size(), idle_p50 * 1e3, busy_p50 * 1e3,
        L * R / idle_p50 / gb, busy_p50 > 0 ? L * R / busy_p50 / gb : 0,
        busy_p50 > 0 ? (busy_p50 / idle_p50 - 1) * 100 : -1.0,
        Mean(busy) * 1e3, Mean(idle) * 1e3,
        spill_during / gb, spill_during / c.write, backlog, window,
        s0.spills_ok() - b0.spills_ok(), cpu_b1 - cpu_b0, LoadAvg()));
  }
  const v1::TierStats end = node.Tier();
  Emit(absl::StrFormat(
      "{\"phase\": \"counters\", \"row_bytes\": %d, \"spills_ok\": %d, \"spills_gone\": %d, "
      "\"spills_failed\": %d, \"promotions_ok\": %d, \"promotions_failed\": %d, "
      "\"promotions_timed_out\": %d, \"read_corrupt\": %d, \"write_errors\": %d}",
      R, end.spills_ok(), end.spills_gone(), end.spills_failed(), end.promotions_ok(),
      end.promotions_failed(), end.promotions_timed_out(), end.read_corrupt(),
      end.write_errors()));
  StopNode(&node);
  Shell(absl::StrCat("rm -rf ", dir, "/tier"));
  return 0;
}

// ---- The trace ----------------------------------------------------------------------------------
//
// Prefixes as a chat service sees them: S system prompts of `sys_blocks` blocks, picked by
// conversations with Zipf(1.1) popularity, and C conversations whose history grows by 2 blocks
// a turn up to `conv_blocks` (then the conversation starts over from its first turn: a returning
// user). A request = its system prompt + the conversation's history so far; the next
// conversation to speak is uniform. Keys are block ids ("sys3-7", "conv12-5"). The distinct
// blocks over the trace (the working set) = S × sys_blocks + C × conv_blocks =
// trace_ws_factor × the region's rows. Per request, as vLLM's scheduler with the plugin does:
// Lookup; while a key before the first MISS is HIT_PENDING, wait a step and look up again (at
// most trace_max_steps); the leading HITs are loaded (PrepareLoad, a load job, CompleteLoad);
// the rest is "recomputed" and stored (PrepareStore, a store job, CompleteStore). Token hit rate
// = blocks loaded / blocks requested (16 tokens each).
struct TraceResult {
  uint64_t requested = 0, loaded = 0, steps_waited = 0, pending_seen = 0, waits_exhausted = 0;
  double seconds = 0, cpu_s = 0;
  uint64_t second_half_requested = 0, second_half_loaded = 0;
  v1::TierStats tier;
};

TraceResult RunTraceOnce(bool with_tier) {
  const std::string dir = absl::GetFlag(FLAGS_dir);
  const uint64_t R = absl::GetFlag(FLAGS_trace_row_bytes);
  const uint64_t rows = absl::GetFlag(FLAGS_trace_rows);
  const uint64_t ws = rows * absl::GetFlag(FLAGS_trace_ws_factor);
  const int sys_prompts = absl::GetFlag(FLAGS_trace_sys_prompts);
  const int sys_blocks = sys_prompts > 0 ? absl::GetFlag(FLAGS_trace_sys_blocks) : 0;
  const int conv_blocks = absl::GetFlag(FLAGS_trace_conv_blocks);
  const int conversations = static_cast<int>((ws - sys_prompts * sys_blocks) / conv_blocks);
  Shell(absl::StrCat("mkdir -p ", dir, " && rm -rf ", dir, "/trace-tier && mkdir -p ",
                           dir, "/trace-tier"));
  Node node;
  StartNode(&node,
            DaemonArgs(with_tier ? dir + "/trace-tier" : "", R, (2 * ws + 64) * (R + 4096),
                       rows * R, absl::GetFlag(FLAGS_trace_promote_timeout_ms)),
            R, rows, sys_blocks + conv_blocks);
  std::mt19937_64 rng(absl::GetFlag(FLAGS_seed));
  std::vector<double> zipf;
  double z = 0;
  for (int i = 0; i < std::max(1, sys_prompts); ++i) {
    zipf.push_back(z += 1.0 / std::pow(i + 1, 1.1));
  }
  std::vector<int> sys_of(conversations), turn(conversations, 0);
  for (int c = 0; c < conversations; ++c) {
    const double u = std::uniform_real_distribution<double>(0, z)(rng);
    sys_of[c] = std::lower_bound(zipf.begin(), zipf.end(), u) - zipf.begin();
  }
  TraceResult r;
  const int requests = absl::GetFlag(FLAGS_trace_requests);
  const double cpu0 = node.Cpu();
  const auto t0 = Clock::now();
  for (int q = 0; q < requests; ++q) {
    const int c = std::uniform_int_distribution<int>(0, conversations - 1)(rng);
    turn[c] = turn[c] % (conv_blocks / 2) + 1;
    std::vector<std::string> keys;
    for (int b = 0; b < sys_blocks; ++b) keys.push_back(absl::StrCat("sys", sys_of[c], "-", b));
    for (int b = 0; b < 2 * turn[c]; ++b) keys.push_back(absl::StrCat("conv", c, "-", b));
    size_t hits = 0;
    for (int step = 0;; ++step) {
      auto states = Ok(node.scheduler->Lookup(keys), "Lookup");
      size_t h = 0;
      bool pending = false;
      for (; h < states.size() && states[h] != KeyState::kMiss; ++h) {
        pending |= states[h] == KeyState::kHitPending;
      }
      if (!pending) {
        hits = h;
        break;
      }
      ++r.pending_seen;
      if (step >= absl::GetFlag(FLAGS_trace_max_steps)) {
        // Give up waiting: load the HITs before the first pending key.
        hits = 0;
        while (hits < states.size() && states[hits] == KeyState::kHit) ++hits;
        ++r.waits_exhausted;
        break;
      }
      ++r.steps_waited;
      std::this_thread::sleep_for(std::chrono::milliseconds(absl::GetFlag(FLAGS_trace_step_ms)));
    }
    if (hits > 0) {
      const std::vector<std::string> hit(keys.begin(), keys.begin() + hits);
      uint64_t e = 0;
      auto load_rows = Ok(node.scheduler->PrepareLoad(hit, &e), "PrepareLoad");
      std::vector<uint64_t> b(hits);
      for (size_t i = 0; i < hits; ++i) b[i] = i;
      node.Job(Direction::kLoad, b, load_rows, e);
      Ok(node.scheduler->CompleteLoad(hit), "CompleteLoad");
    }
    if (hits < keys.size()) {
      node.Store(std::vector<std::string>(keys.begin() + hits, keys.end()), hits, keys.size());
    }
    r.requested += keys.size();
    r.loaded += hits;
    if (q >= requests / 2) r.second_half_requested += keys.size(), r.second_half_loaded += hits;
  }
  r.seconds = Since(t0);
  r.cpu_s = node.Cpu() - cpu0;
  if (with_tier) r.tier = node.Tier();
  StopNode(&node);
  Shell(absl::StrCat("rm -rf ", dir, "/trace-tier"));
  Emit(absl::StrFormat(
      "{\"phase\": \"trace\", \"trace\": \"%s\", \"tier\": %s, \"row_bytes\": %d, \"region_rows\": %d, "
      "\"working_set_rows\": %d, \"system_prompts\": %d, \"conversations\": %d, "
      "\"requests\": %d, \"blocks_requested\": %d, \"blocks_loaded\": %d, "
      "\"token_hit_rate\": %.4f, \"second_half_hit_rate\": %.4f, \"pending_lookups\": %d, "
      "\"steps_waited\": %d, \"waits_exhausted\": %d, \"seconds\": %.2f, \"daemon_cpu_s\": %.2f, "
      "\"spills_ok\": %d, \"spills_gone\": %d, \"promotions_ok\": %d, "
      "\"promotions_timed_out\": %d, \"promotions_failed\": %d}",
      absl::GetFlag(FLAGS_trace_name), with_tier ? "true" : "false", R, rows, ws, sys_prompts, conversations, requests,
      r.requested, r.loaded, static_cast<double>(r.loaded) / r.requested,
      static_cast<double>(r.second_half_loaded) / r.second_half_requested, r.pending_seen,
      r.steps_waited, r.waits_exhausted, r.seconds, r.cpu_s, r.tier.spills_ok(),
      r.tier.spills_gone(), r.tier.promotions_ok(), r.tier.promotions_timed_out(),
      r.tier.promotions_failed()));
  return r;
}

int RunTrace() {
  const TraceResult without = RunTraceOnce(false);
  const TraceResult with = RunTraceOnce(true);
  const double a = static_cast<double>(without.loaded) / without.requested;
  const double b = static_cast<double>(with.loaded) / with.requested;
  Emit(absl::StrFormat(
      "{\"phase\": \"trace_summary\", \"trace\": \"%s\", \"hit_rate_without\": %.4f, \"hit_rate_with\": %.4f, "
      "\"ratio\": %.3f}",
      absl::GetFlag(FLAGS_trace_name), a, b, a > 0 ? b / a : -1.0));
  return 0;
}

}  // namespace
}  // namespace kvoffload::bench

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  const std::string mode = absl::GetFlag(FLAGS_mode);
  if (mode == "bandwidth") return kvoffload::bench::RunBandwidth();
  if (mode == "trace") return kvoffload::bench::RunTrace();
  std::fprintf(stderr, "--mode: bandwidth or trace\n");
  return 2;
}
