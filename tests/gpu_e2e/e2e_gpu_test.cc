// GPU end to end: kvoffloadd with its CUDA backend and kvoffload_cuda_worker processes that
// register cudaMalloc KV tensors (non-zero offsets in their allocations) through CUDA IPC.
// Skips with a message where no GPU exists. Worker processes are exec'd, never forked from a
// process with CUDA state.
#include <cuda_runtime_api.h>
#include <signal.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
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

}  // namespace
}  // namespace kvoffload::testing
