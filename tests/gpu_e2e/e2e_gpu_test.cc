// GPU end to end: kvoffloadd with its CUDA backend and kvoffload_cuda_worker processes that
// register cudaMalloc KV tensors (non-zero offsets in their allocations) through CUDA IPC.
// Skips with a message where no GPU exists. Worker processes are exec'd, never forked from a
// process with CUDA state. WorkerDeathTest (below): a worker SIGKILLed at each point of a job's
// life while another engine keeps verifying its bytes.
#include <cuda_runtime_api.h>
#include <dirent.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <fstream>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "client/ctl/kvoffloadctl.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "tests/integration/engine_fixture.h"
#include "tests/integration/harness.h"

namespace kvoffload::testing {
namespace {

constexpr char kCudaWorker[] = "tests/gpu_e2e/kvoffload_cuda_worker";

bool HaveGpu() {
  int count = 0;
  return cudaGetDeviceCount(&count) == cudaSuccess && count > 0;
}

class GpuEndToEndTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!HaveGpu()) GTEST_SKIP() << "no GPU: CUDA end-to-end tests skipped";
    auto daemon =
        DaemonProcess::Start({"--backend=cuda", "--max_region_bytes=4GiB", "--populate_threads=8"});
    ASSERT_TRUE(daemon.ok()) << daemon.status();
    daemon_ = std::move(*daemon);
  }

  std::unique_ptr<WorkerProcess> StartWorker(const TestEngine& engine, uint32_t mp_rank,
                                             std::vector<std::string> extra = {}) {
    auto worker = WorkerProcess::Start(daemon_->data_socket(), engine.WorkerArgs(mp_rank, extra),
                                       kCudaWorker);
    EXPECT_TRUE(worker.ok()) << worker.status();
    if (!worker.ok()) return nullptr;
    EXPECT_TRUE(absl::StartsWith((*worker)->hello(), "registered")) << (*worker)->hello();
    return std::move(*worker);
  }

  std::unique_ptr<client::SchedulerClient> OpenScheduler(const TestEngine& engine) {
    auto scheduler = client::SchedulerClient::Open(daemon_->data_socket(), engine.Spec());
    EXPECT_TRUE(scheduler.ok()) << scheduler.status();
    return scheduler.ok() ? std::move(*scheduler) : nullptr;
  }

  std::unique_ptr<DaemonProcess> daemon_;
};

TEST_F(GpuEndToEndTest, RoundTripsAreByteExactForEveryLayout) {
  auto stats = daemon_->Stats();
  ASSERT_TRUE(stats.ok());
  EXPECT_EQ(stats->backend(), "cuda");
  uint64_t job = 100;
  for (const char* layout : {"separate_kv", "stacked_kv", "block_first"}) {
    for (uint32_t bpr : {1u, 2u}) {
      TestEngine engine;
      engine.engine_id = absl::StrCat("gpu-", layout, "-", bpr);
      engine.layout = layout;
      engine.blocks_per_row = bpr;
      engine.num_layers = 8;
      engine.page_bytes = 32 << 10;
      engine.budget_bytes = 64 << 20;
      engine.num_blocks = 256;
      auto scheduler = OpenScheduler(engine);
      ASSERT_NE(scheduler, nullptr);
      auto worker = StartWorker(engine, 0);
      ASSERT_NE(worker, nullptr);
      RoundTrip(*scheduler, {worker.get()}, engine, job, 20);
      job += 10;
      auto e = daemon_->EngineStats(engine.engine_id);
      ASSERT_TRUE(e.ok());
      EXPECT_EQ(e->store_bytes(), 20 * bpr * engine.worker_bytes_per_block());
    }
  }
  stats = daemon_->Stats();
  ASSERT_TRUE(stats.ok());
  EXPECT_GT(stats->gpu_memory_bytes().size(), 0u) << "the daemon reports its GPU memory";
}

TEST_F(GpuEndToEndTest, ReplicatedMlaTwoWorkersOnOneGpu) {
  TestEngine mla;
  mla.engine_id = "mla";
  mla.world_size = 2;
  mla.attention = "mla";
  mla.layout = "stacked_kv";
  mla.num_layers = 61;
  mla.page_bytes = 18 << 10;
  mla.budget_bytes = 256 << 20;
  mla.num_blocks = 128;
  auto scheduler = OpenScheduler(mla);
  ASSERT_NE(scheduler, nullptr);
  EXPECT_TRUE(scheduler->geometry().replicated);
  auto w0 = StartWorker(mla, 0, {"--rank_independent_data"});
  auto w1 = StartWorker(mla, 1, {"--rank_independent_data"});
  ASSERT_NE(w0, nullptr);
  ASSERT_NE(w1, nullptr);
  EXPECT_TRUE(absl::StartsWith(w1->hello(), "registered slot=0 writer=0")) << w1->hello();
  RoundTrip(*scheduler, {w0.get(), w1.get()}, mla, 1, 16);
  EXPECT_EQ(w0->Command("digest 3,5,7,9"), w1->Command("digest 3,5,7,9"));
  auto stats = daemon_->EngineStats("mla");
  ASSERT_TRUE(stats.ok());
  // Only rank 0's bytes crossed PCIe on store; both ranks loaded.
  EXPECT_EQ(stats->store_bytes(), 16 * mla.worker_bytes_per_block());
  EXPECT_EQ(stats->load_bytes(), 2 * 16 * mla.worker_bytes_per_block());
}

TEST_F(GpuEndToEndTest, StoreWaitsForTheWorkersEvent) {
  TestEngine engine;
  engine.rows_assigned_by_engine = true;
  engine.num_layers = 4;
  engine.page_bytes = 64 << 10;
  engine.budget_bytes = 16 << 20;
  auto worker = StartWorker(engine, 0);
  ASSERT_NE(worker, nullptr);
  // A 20 ms kernel, then new bytes for block 5, recorded in event 0; the store is submitted at
  // once. Stored bytes must be the new ones.
  const std::string line = worker->Command("write_then_store 1 5 9 777");
  ASSERT_EQ(line, absl::StrCat("finished 1 0 ", engine.worker_bytes_per_block()));
  ASSERT_EQ(worker->Command("clobber 5"), "ok");
  ASSERT_EQ(worker->Command("load 2 5 9"),
            absl::StrCat("finished 2 0 ", engine.worker_bytes_per_block()));
  EXPECT_EQ(worker->Command("verify 5"), "verify ok");
}

TEST_F(GpuEndToEndTest, AMillionPageJobCompletesAndVerifies) {
  // The job names rows across the whole region itself (no index hands them out), so the region
  // must be pinned whole before the first job: a daemon that pins before OpenEngine returns.
  daemon_.reset();
  auto daemon = DaemonProcess::Start({"--backend=cuda", "--max_region_bytes=4GiB",
                                      "--populate_threads=8", "--region_chunk_bytes=0"});
  ASSERT_TRUE(daemon.ok()) << daemon.status();
  daemon_ = std::move(*daemon);
  TestEngine engine;
  engine.engine_id = "million";
  engine.rows_assigned_by_engine = true;
  engine.layout = "separate_kv";  // 64 tensors of 512-byte pages
  engine.num_layers = 32;
  engine.page_bytes = 1024;
  engine.num_blocks = 16384;  // 16384 × 64 = 1,048,576 pages per job
  engine.budget_bytes = uint64_t{16384} * 32 * 1024;
  auto worker = StartWorker(engine, 0);
  ASSERT_NE(worker, nullptr);
  std::string blocks = "0";
  for (int i = 1; i < 16384; ++i) absl::StrAppend(&blocks, ",", i);
  const std::string bytes = absl::StrCat(uint64_t{16384} * 32 * 1024);
  ASSERT_EQ(worker->Command(absl::StrCat("store 1 ", blocks, " ", blocks), 120),
            absl::StrCat("finished 1 0 ", bytes));
  const std::string sample = "0,1,97,4095,8191,12345,16382,16383";
  ASSERT_EQ(worker->Command(absl::StrCat("clobber ", sample)), "ok");
  ASSERT_EQ(worker->Command(absl::StrCat("load 2 ", blocks, " ", blocks), 120),
            absl::StrCat("finished 2 0 ", bytes));
  EXPECT_EQ(worker->Command(absl::StrCat("verify ", sample)), "verify ok");
}

TEST_F(GpuEndToEndTest, AWorkerKilledMidTransferLeavesTheDaemonServingOthers) {
  TestEngine victim;
  victim.engine_id = "victim";
  victim.rows_assigned_by_engine = true;
  victim.num_layers = 32;
  victim.page_bytes = 64 << 10;
  victim.num_blocks = 512;  // 1 GiB per job
  victim.budget_bytes = uint64_t{512} * 32 * (64 << 10);
  auto doomed = StartWorker(victim, 0);
  ASSERT_NE(doomed, nullptr);
  std::string blocks = "0";
  for (int i = 1; i < 512; ++i) absl::StrAppend(&blocks, ",", i);
  ASSERT_EQ(doomed->Command(absl::StrCat("submit store 1 ", blocks, " ", blocks)), "submitted 1");
  doomed->process().Signal(SIGKILL);
  doomed->process().Wait();

  TestEngine other;
  other.engine_id = "survivor";
  other.num_layers = 8;
  other.page_bytes = 16 << 10;
  other.budget_bytes = 32 << 20;
  auto scheduler = OpenScheduler(other);
  ASSERT_NE(scheduler, nullptr);
  auto worker = StartWorker(other, 0);
  ASSERT_NE(worker, nullptr);
  RoundTrip(*scheduler, {worker.get()}, other, 10, 8);
  // The victim's engine is intact and takes a new worker in the freed slot.
  auto again = StartWorker(victim, 0);
  ASSERT_NE(again, nullptr);
  EXPECT_EQ(again->Command("store 5 0,1 0,1"),
            absl::StrCat("finished 5 0 ", 2 * victim.worker_bytes_per_block()));
}

// ---------------------------------------------------------------------------------------------
// Several GPUs of one host (whole GPU node): one worker process per GPU, each seeing only its
// own GPU (CUDA_VISIBLE_DEVICES), so its CUDA ordinal is 0 while the daemon, which sees every GPU,
// finds it by uuid. Skipped with fewer than two GPUs.
class MultiGpuTest : public GpuEndToEndTest {
 protected:
  void SetUp() override {
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess || count < 2) {
      GTEST_SKIP() << "fewer than two GPUs (" << count << "): multi-GPU tests skipped";
    }
    gpus_ = count;
    GpuEndToEndTest::SetUp();
  }

  std::unique_ptr<WorkerProcess> StartOn(int gpu, const TestEngine& engine, uint32_t mp_rank,
                                         std::vector<std::string> extra = {}) {
    // The child reads the variable at exec; this process's CUDA state is unaffected.
    setenv("CUDA_VISIBLE_DEVICES", std::to_string(gpu).c_str(), 1);
    auto worker = StartWorker(engine, mp_rank, std::move(extra));
    unsetenv("CUDA_VISIBLE_DEVICES");
    return worker;
  }

  int gpus_ = 0;
};

// TP2, one worker per GPU: slots by rank, both ranks' bytes stored and loaded back exactly, and
// the daemon's context exists on both GPUs (reported per device).
TEST_F(MultiGpuTest, Tp2OneWorkerPerGpu) {
  TestEngine tp2;
  tp2.engine_id = "tp2";
  tp2.world_size = 2;
  tp2.num_layers = 8;
  tp2.page_bytes = 32 << 10;
  tp2.budget_bytes = 64 << 20;
  auto scheduler = OpenScheduler(tp2);
  ASSERT_NE(scheduler, nullptr);
  auto w0 = StartOn(0, tp2, 0);
  auto w1 = StartOn(1, tp2, 1);
  ASSERT_NE(w0, nullptr);
  ASSERT_NE(w1, nullptr);
  EXPECT_TRUE(absl::StartsWith(w1->hello(), "registered slot=1")) << w1->hello();
  RoundTrip(*scheduler, {w0.get(), w1.get()}, tp2, 1, 24);
  auto e = daemon_->EngineStats("tp2");
  ASSERT_TRUE(e.ok());
  EXPECT_EQ(e->store_bytes(), 2 * 24 * tp2.worker_bytes_per_block());
  EXPECT_EQ(e->load_bytes(), 2 * 24 * tp2.worker_bytes_per_block());
  auto stats = daemon_->Stats();
  ASSERT_TRUE(stats.ok());
  EXPECT_EQ(stats->gpu_memory_bytes().count(0), 1u);
  EXPECT_EQ(stats->gpu_memory_bytes().count(1), 1u);
  EXPECT_TRUE(stats->failed_devices().empty());
}

// Replicated MLA across GPUs: the writer on GPU 0 stores one copy, every GPU loads identical bytes.
TEST_F(MultiGpuTest, ReplicatedMlaAcrossGpus) {
  TestEngine mla;
  mla.engine_id = "mla2";
  mla.world_size = 2;
  mla.attention = "mla";
  mla.layout = "stacked_kv";
  mla.num_layers = 61;
  mla.page_bytes = 18 << 10;
  mla.budget_bytes = 256 << 20;
  mla.num_blocks = 128;
  auto scheduler = OpenScheduler(mla);
  ASSERT_NE(scheduler, nullptr);
  ASSERT_TRUE(scheduler->geometry().replicated);
  auto w0 = StartOn(0, mla, 0, {"--rank_independent_data"});
  auto w1 = StartOn(1, mla, 1, {"--rank_independent_data"});
  ASSERT_NE(w0, nullptr);
  ASSERT_NE(w1, nullptr);
  EXPECT_TRUE(absl::StartsWith(w1->hello(), "registered slot=0 writer=0")) << w1->hello();
  RoundTrip(*scheduler, {w0.get(), w1.get()}, mla, 1, 16);
  EXPECT_EQ(w0->Command("digest 3,5,7,9"), w1->Command("digest 3,5,7,9"));
  auto e = daemon_->EngineStats("mla2");
  ASSERT_TRUE(e.ok());
  EXPECT_EQ(e->store_bytes(), 16 * mla.worker_bytes_per_block());  // one copy crossed PCIe
  EXPECT_EQ(e->load_bytes(), 2 * 16 * mla.worker_bytes_per_block());
}

// A worker SIGKILLed on GPU 1 mid-transfer: another engine on the same GPU keeps round-tripping,
// and the killed rank's slot takes a new worker.
TEST_F(MultiGpuTest, WorkerKilledOnOneGpuLeavesTheOthersServing) {
  TestEngine victim;
  victim.engine_id = "victim2";
  victim.rows_assigned_by_engine = true;
  victim.num_layers = 32;
  victim.page_bytes = 64 << 10;
  victim.num_blocks = 256;
  victim.budget_bytes = uint64_t{256} * 32 * (64 << 10);
  auto doomed = StartOn(1, victim, 0);
  ASSERT_NE(doomed, nullptr);
  std::string blocks = "0";
  for (int i = 1; i < 256; ++i) absl::StrAppend(&blocks, ",", i);
  ASSERT_EQ(doomed->Command(absl::StrCat("submit store 1 ", blocks, " ", blocks)), "submitted 1");
  doomed->process().Signal(SIGKILL);
  doomed->process().Wait();
  TestEngine other;
  other.engine_id = "other2";
  other.num_layers = 8;
  other.page_bytes = 16 << 10;
  other.budget_bytes = 32 << 20;
  auto scheduler = OpenScheduler(other);
  ASSERT_NE(scheduler, nullptr);
  auto worker = StartOn(1, other, 0);
  ASSERT_NE(worker, nullptr);
  RoundTrip(*scheduler, {worker.get()}, other, 10, 8);
  auto again = StartOn(1, victim, 0);
  ASSERT_NE(again, nullptr);
  EXPECT_EQ(again->Command("store 5 0,1 0,1"),
            absl::StrCat("finished 5 0 ", 2 * victim.worker_bytes_per_block()));
}

// DP2 × TP2 over four GPUs: two engines, each with its own region, ranks on their own GPUs.
TEST_F(MultiGpuTest, Dp2Tp2OnFourGpus) {
  if (gpus_ < 4) GTEST_SKIP() << "needs four GPUs, this host has " << gpus_;
  std::vector<std::unique_ptr<WorkerProcess>> workers;
  for (uint32_t dp = 0; dp < 2; ++dp) {
    TestEngine e;
    e.engine_id = "dp";
    e.dp_rank = dp;
    e.world_size = 2;
    e.budget_bytes = 16 << 20;
    auto scheduler = OpenScheduler(e);
    ASSERT_NE(scheduler, nullptr);
    auto r0 = StartOn(2 * dp, e, 0);
    auto r1 = StartOn(2 * dp + 1, e, 1);
    ASSERT_NE(r0, nullptr);
    ASSERT_NE(r1, nullptr);
    RoundTrip(*scheduler, {r0.get(), r1.get()}, e, 1 + 10 * dp, 12);
  }
}

// Worker death (copy path v2). A worker is SIGKILLed at each point of a job's life:
// before its event is recorded (the record queued behind seconds of GPU work, the store naming it
// already submitted), between record and submit, mid-copy, and with seconds of every-SM work
// queued on its stream. Throughout, another engine ("survivor") stores, loads and verifies fresh
// random bytes on its own thread. The victim is rank 1 of a two-rank engine whose rank 0 (the
// witness) lives, so every job the victim took part in has a verdict the test can read: its exact
// code and the bytes the daemon copied. After each kill: the survivor keeps completing byte-exact
// rounds, a new engine registers within 20 s and round-trips, the victim's rank is replaced in
// its slot and the engine round-trips again, Stats and the health check answer (SERVING), the
// engine's stats count every verdict, and SIGTERM ends the daemon with exit status 0 within 20 s.

constexpr int kJobTimeoutS = 3;  // --job_timeout_s: a job gated on a dead event fails at 3 s
constexpr absl::Duration kBound = absl::Seconds(20);
constexpr int kOk = 0;
constexpr int kDeadlineExceeded = static_cast<int>(absl::StatusCode::kDeadlineExceeded);
constexpr int kUnavailable = static_cast<int>(absl::StatusCode::kUnavailable);

struct Verdict {
  uint64_t job = 0;
  int code = -1;
  uint64_t bytes = 0;
  std::string line;
};

// "finished JOB CODE BYTES [message]"; nullopt for any other line.
std::optional<Verdict> ParseFinished(const std::string& line) {
  std::vector<std::string> w = absl::StrSplit(line, ' ', absl::SkipEmpty());
  Verdict v;
  v.line = line;
  if (w.size() < 4 || w[0] != "finished" || !absl::SimpleAtoi(w[1], &v.job) ||
      !absl::SimpleAtoi(w[2], &v.code) || !absl::SimpleAtoi(w[3], &v.bytes)) {
    return std::nullopt;
  }
  return v;
}

// "first,first+1,...": blocks or rows.
std::string Seq(uint64_t first, uint64_t n) {
  std::vector<uint64_t> v;
  for (uint64_t i = 0; i < n; ++i) v.push_back(first + i);
  return List(v);
}

// The pid of this process's child whose /proc/PID/stat name is `comm`, or -1.
pid_t ChildNamed(const std::string& comm) {
  DIR* dir = opendir("/proc");
  if (dir == nullptr) return -1;
  pid_t found = -1;
  while (dirent* e = readdir(dir)) {
    pid_t pid;
    if (!absl::SimpleAtoi(e->d_name, &pid)) continue;
    std::ifstream file(absl::StrCat("/proc/", pid, "/stat"));
    std::string stat;
    std::getline(file, stat);
    const size_t open = stat.find('('), close = stat.rfind(')');
    if (open == std::string::npos || close == std::string::npos || close < open ||
        close + 2 > stat.size()) {
      continue;
    }
    std::istringstream rest(stat.substr(close + 2));
    char state;
    pid_t ppid;
    if (stat.substr(open + 1, close - open - 1) == comm && (rest >> state >> ppid) &&
        ppid == getpid()) {
      found = pid;
      break;
    }
  }
  closedir(dir);
  return found;
}

// One engine's worker kept busy on its own thread, in rounds: fresh random bytes (refill), a
// 16-block store with no event, clobber (the bytes must now differ), load, verify; then one block
// written behind a delay kernel and stored through the worker's event (write_then_store),
// clobbered, loaded, verified. Every answer is checked exactly; the first wrong (or missing,
// 20 s) answer stops it and is kept.
class Traffic {
 public:
  Traffic(std::unique_ptr<WorkerProcess> worker, const TestEngine& engine)
      : worker_(std::move(worker)), engine_(engine), thread_([this] { Run(); }) {}
  ~Traffic() { Stop(); }

  uint64_t rounds() const {
    absl::MutexLock lock(&mu_);
    return rounds_;
  }
  std::string error() const {
    absl::MutexLock lock(&mu_);
    return error_;
  }
  // True once `target` rounds are done; false at the first error or after `timeout`.
  bool WaitForRounds(uint64_t target, absl::Duration timeout) {
    absl::MutexLock lock(&mu_);
    auto done = [this, target]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return rounds_ >= target || !error_.empty();
    };
    mu_.AwaitWithTimeout(absl::Condition(&done), timeout);
    return rounds_ >= target;
  }
  // Stops after the current round; returns the error ("" when none). Idempotent.
  std::string Stop() {
    stop_ = true;
    if (thread_.joinable()) thread_.join();
    return error();
  }

 private:
  void Run() {
    for (uint64_t r = 0; !stop_.load(); ++r) {
      std::string error = Round(r);
      absl::MutexLock lock(&mu_);
      if (!error.empty()) {
        error_ = absl::StrCat("survivor round ", r, ": ", error);
        return;
      }
      ++rounds_;
    }
  }

  std::string Round(uint64_t r) {
    const uint64_t bpb = engine_.worker_bytes_per_block();
    const uint64_t job = 1000 + 4 * r;
    std::vector<uint64_t> blocks, rows;
    for (uint64_t i = 0; i < 16; ++i) {
      blocks.push_back(2 * i + 1);
      rows.push_back((r % 4) * 16 + i);
    }
    const std::string b = List(blocks), w = List(rows);
    const uint64_t one = blocks[r % 16], one_row = 64 + r % 16;
    const std::vector<std::pair<std::string, std::string>> steps = {
        {absl::StrCat("refill ", 7000 + r), "ok"},
        {absl::StrCat("store ", job, " ", b, " ", w), Finished(job, 16 * bpb)},
        {absl::StrCat("clobber ", b), "ok"},
        {absl::StrCat("verify ", b), absl::StrCat("verify mismatch block=", blocks[0])},
        {absl::StrCat("load ", job + 1, " ", b, " ", w), Finished(job + 1, 16 * bpb)},
        {absl::StrCat("verify ", b), "verify ok"},
        {absl::StrCat("write_then_store ", job + 2, " ", one, " ", one_row, " ", r),
         Finished(job + 2, bpb)},
        {absl::StrCat("clobber ", one), "ok"},
        {absl::StrCat("load ", job + 3, " ", one, " ", one_row), Finished(job + 3, bpb)},
        {absl::StrCat("verify ", one), "verify ok"},
    };
    for (const auto& [command, want] : steps) {
      const std::string got = worker_->Command(command, 20);
      if (got != want) {
        return absl::StrCat("'", command.substr(0, 48), "' answered '", got, "', want '", want,
                            "'");
      }
    }
    return "";
  }

  std::unique_ptr<WorkerProcess> worker_;  // used by the thread only
  const TestEngine engine_;
  std::atomic<bool> stop_{false};
  mutable absl::Mutex mu_;
  uint64_t rounds_ ABSL_GUARDED_BY(mu_) = 0;
  std::string error_ ABSL_GUARDED_BY(mu_);
  std::thread thread_;  // last: starts after the members above exist
};

class WorkerDeathTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!HaveGpu()) GTEST_SKIP() << "no GPU: CUDA worker-death tests skipped";
    auto daemon = DaemonProcess::Start(
        {"--backend=cuda", "--max_region_bytes=6GiB", "--populate_threads=8",
         absl::StrCat("--job_timeout_s=", kJobTimeoutS), "--shutdown_grace_s=5"});
    ASSERT_TRUE(daemon.ok()) << daemon.status();
    daemon_ = std::move(*daemon);
    ExpectDaemonAnswers("at start");
    TestEngine survivor;
    survivor.engine_id = "survivor";
    survivor.rows_assigned_by_engine = true;
    survivor.num_layers = 4;
    survivor.page_bytes = 64 << 10;
    survivor.num_blocks = 32;
    survivor.budget_bytes = 80 * survivor.worker_bytes_per_block();  // rows 0..79
    auto worker = StartWorker(survivor, 0);
    ASSERT_NE(worker, nullptr);
    traffic_ = std::make_unique<Traffic>(std::move(worker), survivor);
    ASSERT_TRUE(traffic_->WaitForRounds(1, kBound)) << traffic_->error();
  }

  void TearDown() override {
    if (traffic_ != nullptr) traffic_->Stop();
  }

  std::unique_ptr<WorkerProcess> StartWorker(const TestEngine& engine, uint32_t mp_rank) {
    auto worker =
        WorkerProcess::Start(daemon_->data_socket(), engine.WorkerArgs(mp_rank), kCudaWorker);
    EXPECT_TRUE(worker.ok()) << worker.status();
    if (!worker.ok()) return nullptr;
    EXPECT_TRUE(absl::StartsWith((*worker)->hello(), "registered")) << (*worker)->hello();
    return std::move(*worker);
  }

  // A two-rank engine, one slot per rank in every row, both ranks on this GPU: rank 0 is the
  // witness, rank 1 the victim.
  static TestEngine VictimEngine(uint32_t layers, uint64_t page_bytes, uint64_t blocks) {
    TestEngine e;
    e.engine_id = "victim";
    e.world_size = 2;
    e.rows_assigned_by_engine = true;
    e.num_layers = layers;
    e.page_bytes = page_bytes;
    e.num_blocks = blocks;
    e.budget_bytes = blocks * 2 * e.worker_bytes_per_block();  // rows 0..blocks-1
    return e;
  }

  void StartVictimEngine(const TestEngine& engine) {
    victim_engine_ = engine;
    witness_ = StartWorker(engine, 0);
    victim_ = StartWorker(engine, 1);
  }

  void KillVictim() {
    rounds_at_kill_ = traffic_->rounds();
    victim_->process().Signal(SIGKILL);
    victim_->process().Wait();
  }

  // The witness's verdict on `job` (its part was submitted before the kill).
  Verdict WitnessVerdict(uint64_t job) {
    const std::string line =
        witness_->Command(absl::StrCat("wait ", job, " ", absl::ToInt64Milliseconds(kBound)),
                          absl::ToInt64Seconds(kBound) + 5);
    std::cerr << "[worker death] job " << job << ": " << line << std::endl;
    std::optional<Verdict> v = ParseFinished(line);
    EXPECT_TRUE(v.has_value()) << "no verdict for job " << job << " within " << kBound << ": '"
                               << line << "'";
    return v.value_or(Verdict{});
  }

  // A job whose victim part waited on an event that never fired (or was never submitted): it
  // failed — the session ended (UNAVAILABLE) or, had the daemon not noticed that, its deadline
  // passed (DEADLINE_EXCEEDED) — and only the witness's part was copied.
  static void ExpectFailedWithoutVictimBytes(const Verdict& v, uint64_t part_bytes) {
    EXPECT_TRUE(v.code == kUnavailable || v.code == kDeadlineExceeded) << v.line;
    EXPECT_EQ(v.bytes, part_bytes) << "the victim's part copied bytes although its event never "
                                      "fired (or it was never submitted): "
                                   << v.line;
  }

  // A job whose victim part may have been copying when it died: done with both parts' bytes, or
  // failed (UNAVAILABLE, DEADLINE_EXCEEDED) with the witness's part and maybe the victim's.
  static void ExpectVerdictOfACopyCutShort(const Verdict& v, uint64_t part_bytes) {
    if (v.code == kOk) {
      EXPECT_EQ(v.bytes, 2 * part_bytes) << v.line;
    } else {
      EXPECT_TRUE(v.code == kUnavailable || v.code == kDeadlineExceeded) << v.line;
      EXPECT_TRUE(v.bytes == part_bytes || v.bytes == 2 * part_bytes) << v.line;
    }
  }

  absl::StatusOr<v1::StatsResponse> StatsWithin(absl::Duration bound) {
    grpc::ClientContext context;
    context.set_deadline(absl::ToChronoTime(absl::Now() + bound));
    v1::StatsRequest request;
    v1::StatsResponse response;
    grpc::Status status = daemon_->AdminStub()->Stats(&context, request, &response);
    if (!status.ok()) {
      return absl::Status(static_cast<absl::StatusCode>(status.error_code()),
                          status.error_message());
    }
    return response;
  }

  // Stats (5 s deadline) answers for the CUDA backend and the health check says SERVING.
  void ExpectDaemonAnswers(const std::string& step) {
    auto stats = StatsWithin(absl::Seconds(5));
    EXPECT_TRUE(stats.ok()) << step << ": Stats: " << stats.status();
    if (stats.ok()) {
      EXPECT_EQ(stats->backend(), "cuda") << step;
    }
    std::ostringstream out, err;
    const int rc = client::ctl::RunKvoffloadctl(
        {absl::StrCat("--socket=", daemon_->admin_socket()), "--timeout_s=5", "health"}, "", out,
        err);
    EXPECT_EQ(rc, 0) << step << ": health: " << out.str() << err.str();
    EXPECT_EQ(out.str(), "SERVING\n") << step;
  }

  // Every job of the victim's engine has retired (none in flight) within the bound, and exactly
  // `failed` of them failed.
  void ExpectVictimJobsRetired(uint64_t failed) {
    const absl::Time deadline = absl::Now() + kBound;
    std::string last;
    for (;;) {
      auto stats = StatsWithin(absl::Seconds(5));
      if (stats.ok()) {
        for (const v1::EngineStats& e : stats->engines()) {
          if (e.engine_id() != victim_engine_.engine_id) continue;
          last = absl::StrCat("jobs_in_flight=", e.jobs_in_flight(), " jobs_done=", e.jobs_done(),
                              " jobs_failed=", e.jobs_failed(), " workers=", e.workers());
          if (e.jobs_in_flight() == 0) {
            EXPECT_EQ(e.jobs_failed(), failed) << last;
            EXPECT_EQ(e.workers(), 1u) << "the victim's session is gone: " << last;
            return;
          }
        }
      } else {
        last = stats.status().ToString();
      }
      if (absl::Now() >= deadline) break;
      absl::SleepFor(absl::Milliseconds(50));
    }
    ADD_FAILURE() << "the victim's jobs are still in flight after " << kBound << ": " << last;
  }

  // Store, clobber (bytes must differ), load, verify `n` blocks of a one-rank engine.
  static void SoloRoundTrip(WorkerProcess& w, const TestEngine& e, uint64_t job, uint64_t n) {
    const std::string blocks = Seq(0, n), rows = Seq(0, n);
    const uint64_t bytes = n * e.worker_bytes_per_block();
    ASSERT_EQ(w.Command(absl::StrCat("store ", job, " ", blocks, " ", rows), 25),
              Finished(job, bytes));
    ASSERT_EQ(w.Command(absl::StrCat("clobber ", blocks)), "ok");
    ASSERT_EQ(w.Command(absl::StrCat("verify ", blocks)), "verify mismatch block=0");
    ASSERT_EQ(w.Command(absl::StrCat("load ", job + 1, " ", blocks, " ", rows), 25),
              Finished(job + 1, bytes));
    EXPECT_EQ(w.Command(absl::StrCat("verify ", blocks)), "verify ok");
  }

  // The same for the victim's engine, the witness and `other` (rank 1) each doing its part.
  void JointRoundTrip(WorkerProcess& other, uint64_t job, uint64_t n) {
    const std::string blocks = Seq(0, n), rows = Seq(0, n);
    const uint64_t bytes = 2 * n * victim_engine_.worker_bytes_per_block();
    for (WorkerProcess* w : {witness_.get(), &other}) {  // fresh bytes the earlier jobs never saw
      ASSERT_EQ(w->Command(absl::StrCat("refill ", job)), "ok");
    }
    ASSERT_EQ(witness_->Command(absl::StrCat("submit store ", job, " ", blocks, " ", rows)),
              absl::StrCat("submitted ", job));
    ASSERT_EQ(other.Command(absl::StrCat("store ", job, " ", blocks, " ", rows), 25),
              Finished(job, bytes));
    ASSERT_EQ(witness_->Command(absl::StrCat("wait ", job, " 20000"), 25), Finished(job, bytes));
    for (WorkerProcess* w : {witness_.get(), &other}) {
      ASSERT_EQ(w->Command(absl::StrCat("clobber ", blocks)), "ok");
    }
    ASSERT_EQ(witness_->Command(absl::StrCat("submit load ", job + 1, " ", blocks, " ", rows)),
              absl::StrCat("submitted ", job + 1));
    ASSERT_EQ(other.Command(absl::StrCat("load ", job + 1, " ", blocks, " ", rows), 25),
              Finished(job + 1, bytes));
    ASSERT_EQ(witness_->Command(absl::StrCat("wait ", job + 1, " 20000"), 25),
              Finished(job + 1, bytes));
    for (WorkerProcess* w : {witness_.get(), &other}) {
      EXPECT_EQ(w->Command(absl::StrCat("verify ", blocks)), "verify ok");
    }
  }

  // After the kill and the victim's verdicts: the survivor keeps going, a new engine registers
  // within the bound, the victim's rank is replaced, the daemon answers.
  void ExpectDaemonServesEveryoneElse() {
    ExpectDaemonAnswers("after the kill");
    EXPECT_TRUE(traffic_->WaitForRounds(traffic_->rounds() + 2, kBound))
        << "the survivor made no progress after the kill: " << traffic_->error();
    TestEngine fresh;
    fresh.engine_id = "newcomer";
    fresh.rows_assigned_by_engine = true;
    fresh.num_layers = 4;
    fresh.page_bytes = 32 << 10;
    fresh.num_blocks = 16;
    fresh.budget_bytes = 16 * fresh.worker_bytes_per_block();
    const absl::Time t0 = absl::Now();
    auto newcomer = StartWorker(fresh, 0);
    const absl::Duration took = absl::Now() - t0;
    ASSERT_NE(newcomer, nullptr);
    ASSERT_TRUE(absl::StartsWith(newcomer->hello(), "registered")) << newcomer->hello();
    EXPECT_LT(took, kBound) << "a new engine's registration took " << took;
    SoloRoundTrip(*newcomer, fresh, 1, 16);
    auto replacement = StartWorker(victim_engine_, 1);
    ASSERT_NE(replacement, nullptr);
    ASSERT_TRUE(absl::StartsWith(replacement->hello(), "registered slot=1"))
        << replacement->hello();
    JointRoundTrip(*replacement, 900, 8);
    ExpectDaemonAnswers("after the new registrations");
  }

  // SIGTERM; the exit status, or -1 when the daemon had not exited within `bound` (it is then
  // SIGKILLed so that the test ends).
  int StopDaemonWithin(absl::Duration bound) {
    const pid_t pid = ChildNamed("kvoffloadd");
    EXPECT_GT(pid, 0) << "cannot find the daemon's pid";
    absl::Notification stopped;
    int code = -1;
    std::thread stopper([&] {
      code = daemon_->Stop();
      stopped.Notify();
    });
    const bool in_time = stopped.WaitForNotificationWithTimeout(bound);
    if (!in_time && pid > 0) kill(pid, SIGKILL);
    stopper.join();
    return in_time ? code : -1;
  }

  // The survivor never failed and kept going after the kill; SIGTERM ends the daemon cleanly.
  void StopAll() {
    const std::string error = traffic_->Stop();
    EXPECT_EQ(error, "");
    EXPECT_GE(traffic_->rounds(), rounds_at_kill_ + 2);
    std::cerr << "[worker death] survivor rounds: " << traffic_->rounds() << std::endl;
    ExpectDaemonAnswers("before SIGTERM");
    const absl::Time t0 = absl::Now();
    EXPECT_EQ(StopDaemonWithin(kBound), 0)
        << "-1: kvoffloadd was still running " << kBound << " after SIGTERM";
    std::cerr << "[worker death] SIGTERM to exit: " << absl::Now() - t0 << std::endl;
  }

  std::unique_ptr<DaemonProcess> daemon_;  // first: destroyed after every worker
  std::unique_ptr<Traffic> traffic_;
  TestEngine victim_engine_;
  std::unique_ptr<WorkerProcess> witness_;
  std::unique_ptr<WorkerProcess> victim_;
  uint64_t rounds_at_kill_ = 0;
};

// The store names an event whose record sits behind 10 s of GPU work: the worker dies before its
// event is recorded. The daemon holds the part (a later probe job of the same worker finished),
// serves everyone meanwhile, and fails the job at its deadline having copied nothing.
TEST_F(WorkerDeathTest, KilledBeforeRecordingTheEventItsStoreWaitsOn) {
  StartVictimEngine(VictimEngine(4, 64 << 10, 64));
  ASSERT_NE(witness_, nullptr);
  ASSERT_NE(victim_, nullptr);
  const uint64_t bpb = victim_engine_.worker_bytes_per_block();
  const std::string blocks = Seq(8, 8), rows = Seq(8, 8);
  ASSERT_EQ(witness_->Command(absl::StrCat("submit store 1 ", blocks, " ", rows)), "submitted 1");
  ASSERT_EQ(witness_->Command("submit store 2 40 40"), "submitted 2");
  ASSERT_EQ(victim_->Command(
                absl::StrCat("submit_gated store 1 ", blocks, " ", rows, " 0 10000 2 40 40"), 30),
            absl::StrCat("submitted 1 probe=finished 2 0 ", 2 * bpb));
  // While the job waits on the unrecorded event, the others are served.
  EXPECT_TRUE(traffic_->WaitForRounds(traffic_->rounds() + 1, kBound)) << traffic_->error();
  ExpectDaemonAnswers("while the victim's store waits");
  KillVictim();
  ExpectFailedWithoutVictimBytes(WitnessVerdict(1), 8 * bpb);
  EXPECT_EQ(WitnessVerdict(2).line, Finished(2, 2 * bpb));
  ExpectVictimJobsRetired(1);
  ExpectDaemonServesEveryoneElse();
  StopAll();
}

// The worker's last store went through its event; then it records the event again behind 10 s of
// GPU work and dies before submitting anything: the witness's pending job fails, the daemon tears
// down a session whose interprocess event has a record pending in a dead process.
TEST_F(WorkerDeathTest, KilledBetweenRecordAndSubmit) {
  StartVictimEngine(VictimEngine(4, 64 << 10, 64));
  ASSERT_NE(witness_, nullptr);
  ASSERT_NE(victim_, nullptr);
  const uint64_t bpb = victim_engine_.worker_bytes_per_block();
  ASSERT_EQ(witness_->Command("submit store 1 5 5"), "submitted 1");
  ASSERT_EQ(victim_->Command("write_then_store 1 5 5 77", 30), Finished(1, 2 * bpb));
  ASSERT_EQ(witness_->Command("wait 1 20000", 25), Finished(1, 2 * bpb));
  const std::string blocks = Seq(8, 8), rows = Seq(8, 8);
  ASSERT_EQ(witness_->Command(absl::StrCat("submit store 2 ", blocks, " ", rows)), "submitted 2");
  ASSERT_EQ(victim_->Command("record_behind 0 10000"), "recorded 0");
  KillVictim();
  ExpectFailedWithoutVictimBytes(WitnessVerdict(2), 8 * bpb);
  ExpectVictimJobsRetired(1);
  ExpectDaemonServesEveryoneElse();
  StopAll();
}

// Six 1 GiB jobs per rank (store, load, store, ...), every block of each rank; the victim dies
// right after submitting its parts, with its copies queued or running (stores read, loads write
// the dead process's memory through the daemon's mapping).
TEST_F(WorkerDeathTest, KilledMidCopy) {
  StartVictimEngine(VictimEngine(32, 64 << 10, 512));  // 2 MiB blocks, 1 GiB per rank
  ASSERT_NE(witness_, nullptr);
  ASSERT_NE(victim_, nullptr);
  const uint64_t part = 512 * victim_engine_.worker_bytes_per_block();
  const std::string all = Seq(0, 512);
  const std::vector<uint64_t> jobs = {10, 11, 12, 13, 14, 15};
  for (WorkerProcess* w : {witness_.get(), victim_.get()}) {
    for (uint64_t job : jobs) {
      ASSERT_EQ(w->Command(absl::StrCat("submit ", job % 2 == 0 ? "store " : "load ", job, " ", all,
                                        " ", all)),
                absl::StrCat("submitted ", job));
    }
  }
  KillVictim();
  uint64_t failed = 0;
  for (uint64_t job : jobs) {
    const Verdict v = WitnessVerdict(job);
    ExpectVerdictOfACopyCutShort(v, part);
    if (v.code != kOk) ++failed;
  }
  ExpectVictimJobsRetired(failed);
  ExpectDaemonServesEveryoneElse();
  StopAll();
}

// The victim queues 8 s of every-SM spin kernels on its compute stream, then submits a store and
// a load (no event: the daemon starts them while the victim's kernels hold the SMs) and a load
// gated on an event recorded behind that work, proves the daemon holds them (probe) and dies with
// seconds of work queued.
TEST_F(WorkerDeathTest, KilledWithSecondsOfGpuWorkQueued) {
  StartVictimEngine(VictimEngine(8, 64 << 10, 256));  // 512 KiB blocks, 128 MiB per rank
  ASSERT_NE(witness_, nullptr);
  ASSERT_NE(victim_, nullptr);
  const uint64_t bpb = victim_engine_.worker_bytes_per_block();
  const std::string all = Seq(0, 256), some = Seq(16, 8);
  ASSERT_EQ(witness_->Command(absl::StrCat("submit store 20 ", all, " ", all)), "submitted 20");
  ASSERT_EQ(witness_->Command(absl::StrCat("submit load 21 ", all, " ", all)), "submitted 21");
  ASSERT_EQ(witness_->Command(absl::StrCat("submit load 22 ", some, " ", some)), "submitted 22");
  ASSERT_EQ(witness_->Command("submit store 23 100 100"), "submitted 23");
  ASSERT_EQ(victim_->Command("busy 8000"), "busy 8000");
  ASSERT_EQ(victim_->Command(absl::StrCat("submit store 20 ", all, " ", all)), "submitted 20");
  ASSERT_EQ(victim_->Command(absl::StrCat("submit load 21 ", all, " ", all)), "submitted 21");
  ASSERT_EQ(victim_->Command(
                absl::StrCat("submit_gated load 22 ", some, " ", some, " 1 0 23 100 100"), 30),
            absl::StrCat("submitted 22 probe=finished 23 0 ", 2 * bpb));
  KillVictim();
  uint64_t failed = 0;
  for (uint64_t job : {20, 21}) {
    const Verdict v = WitnessVerdict(job);
    ExpectVerdictOfACopyCutShort(v, 256 * bpb);
    if (v.code != kOk) ++failed;
  }
  const Verdict gated = WitnessVerdict(22);
  ExpectFailedWithoutVictimBytes(gated, 8 * bpb);
  if (gated.code != kOk) ++failed;
  EXPECT_EQ(WitnessVerdict(23).line, Finished(23, 2 * bpb));
  ExpectVictimJobsRetired(failed);
  ExpectDaemonServesEveryoneElse();
  StopAll();
}

}  // namespace
}  // namespace kvoffload::testing
