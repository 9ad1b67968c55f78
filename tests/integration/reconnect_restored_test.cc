// The clients come back to a region that survived (durable regions, the daemon and clients together): kvoffloadd
// under kvoffload-supervise keeps its regions across a crash (SIGKILL) and a clean restart
// (SIGHUP), with the same epoch. The self-reconnecting worker fails its job in flight, registers
// again and finds the same epoch (region_changes 0); the scheduler re-opens, keeps its epoch,
// and every committed row hits and loads byte-exact; a part planned before the restart is
// accepted, since its region is still there.
#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/time/clock.h"
#include "client/host/host_kv_memory.h"
#include "client/kvoffload_client.h"
#include "gtest/gtest.h"
#include "tests/integration/restart_fixture.h"

namespace kvoffload::client {
namespace {

using Phase = WorkerSessionState::Phase;
using kvoffload::testing::SupervisedDaemon;

constexpr uint32_t kLayers = 2;
constexpr uint64_t kLayerPage = 8192;
constexpr uint64_t kBlocks = 8;

JobRequest Job(uint64_t id, Direction direction, const std::vector<uint64_t>& rows,
               uint64_t epoch) {
  JobRequest job;
  job.job_id = id;
  job.direction = direction;
  job.rows = rows;
  for (size_t i = 0; i < rows.size(); ++i) job.gpu_blocks.push_back(i);
  job.region_epoch = epoch;
  return job;
}

bool WaitLive(const WorkerClient& client, uint64_t generation) {
  const absl::Time deadline = absl::Now() + absl::Seconds(20);
  while (absl::Now() < deadline) {
    const WorkerSessionState state = client.session_state();
    if (state.phase == Phase::kLive && state.generation == generation) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return false;
}

// A call after the daemon came back: the first may find the dead connection (UNAVAILABLE).
absl::StatusOr<std::vector<KeyState>> LookupAfterRestart(SchedulerClient& index,
                                                         const std::vector<std::string>& keys) {
  auto states = index.Lookup(keys);
  if (states.ok() || states.status().code() != absl::StatusCode::kUnavailable) return states;
  return index.Lookup(keys);
}

class ReconnectRestoredTest : public ::testing::TestWithParam<bool> {};

TEST_P(ReconnectRestoredTest, SameEpochAfterTheDaemonCameBack) {
  const bool crash = GetParam();
  auto daemon = SupervisedDaemon::Start({"--max_region_bytes=64MiB"});
  ASSERT_TRUE(daemon.ok()) << daemon.status();
  const std::string socket = (*daemon)->data_socket();
  EngineSpec spec;
  spec.engine_id = crash ? "restored-crash" : "restored-clean";
  spec.num_layers = kLayers;
  spec.page_bytes = kLayerPage;
  spec.budget_bytes = 1 << 20;
  auto scheduler = SchedulerClient::Open(socket, spec);
  ASSERT_TRUE(scheduler.ok()) << scheduler.status();
  SchedulerClient& index = **scheduler;
  const uint64_t epoch = index.region_epoch();

  HostKvMemory memory;
  ASSERT_TRUE(memory.Create("separate_kv", kLayers, kLayerPage, kBlocks).ok());
  memory.Fill(41);
  WorkerOptions options;
  options.socket_path = socket;
  options.spec = spec;
  options.tensors = memory.Handles();
  options.reconnect_initial_backoff = absl::Milliseconds(20);
  options.reconnect_max_backoff = absl::Milliseconds(200);
  auto worker = WorkerClient::Connect(options);
  ASSERT_TRUE(worker.ok()) << worker.status();
  WorkerClient& w = **worker;

  const std::vector<std::string> keys = {"r0", "r1", "r2"};
  auto stored = index.PrepareStore(keys);
  ASSERT_TRUE(stored.ok()) << stored.status();
  ASSERT_TRUE(w.Submit(Job(1, Direction::kStore, stored->rows, epoch)).ok());
  auto done = w.WaitFinished(1, absl::Seconds(10));
  ASSERT_TRUE(done.ok() && done->status.ok()) << done.status() << " " << done->status;
  ASSERT_TRUE(index.CompleteStore(stored->keys, true).ok());
  auto pinned = index.PrepareLoad(keys);  // planned before the restart, loaded after it
  ASSERT_TRUE(pinned.ok()) << pinned.status();
  ASSERT_TRUE(index.CompleteLoad(keys).ok());

  if (crash) {
    ASSERT_TRUE((*daemon)->Kill9().ok());
    ASSERT_TRUE((*daemon)->WaitReady().ok());
  } else {
    ASSERT_TRUE((*daemon)->Restart().ok());
  }
  ASSERT_TRUE(WaitLive(w, 2)) << w.session_status();
  const WorkerSessionState state = w.session_state();
  EXPECT_EQ(state.registration.region_epoch, epoch);  // the region survived
  EXPECT_EQ(state.region_changes, 0u);

  auto states = LookupAfterRestart(index, keys);
  ASSERT_TRUE(states.ok()) << states.status();
  for (KeyState s : *states) EXPECT_EQ(s, KeyState::kHit);
  EXPECT_EQ(index.region_epoch(), epoch);
  EXPECT_EQ(index.region_changes(), 0u);
  EXPECT_EQ(index.reopens(), 1u);

  // The rows planned before the restart, with their epoch: still the region's, loaded exact.
  auto rows = index.PrepareLoad(keys);
  ASSERT_TRUE(rows.ok()) << rows.status();
  EXPECT_EQ(*rows, *pinned);
  for (uint64_t b = 0; b < keys.size(); ++b) memory.Clobber(b);
  ASSERT_TRUE(w.Submit(Job(2, Direction::kLoad, *pinned, epoch)).ok());
  auto loaded = w.WaitFinished(2, absl::Seconds(10));
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_TRUE(loaded->status.ok()) << loaded->status;
  for (uint64_t b = 0; b < keys.size(); ++b) EXPECT_TRUE(memory.Verify(b)) << "block " << b;
  EXPECT_TRUE(index.CompleteLoad(keys).ok());
}

INSTANTIATE_TEST_SUITE_P(CrashAndCleanRestart, ReconnectRestoredTest, ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool>& info) {
                           return info.param ? std::string("Sigkill") : std::string("Sighup");
                         });

}  // namespace
}  // namespace kvoffload::client
