// The restart path through the C ABI (durable regions), against the real kvoffloadd on its host
// backend: SIGKILL with a job in flight, a submit during the outage, the daemon back on the same
// socket, kvo_worker_session_state and kvo_scheduler_region_changes, a part planned in the old
// region, and a byte-exact round trip afterwards.
#include <chrono>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/time/clock.h"
#include "client/host/host_kv_memory.h"
#include "client/kvoffload_c.h"
#include "client/testing/restartable_daemon.h"
#include "gtest/gtest.h"

namespace kvoffload {
namespace {

constexpr uint32_t kLayers = 2;
constexpr uint64_t kLayerPage = 8192;
constexpr uint64_t kBlocks = 8;

kvo_engine_spec Spec() {
  kvo_engine_spec spec;
  kvo_engine_spec_init(&spec);
  spec.engine_id = "c-reconnect";
  spec.world_size = 2;
  spec.local_world_size = 2;
  spec.tp = 2;
  spec.num_layers = kLayers;
  spec.page_bytes = kLayerPage;
  spec.budget_bytes = 2 << 20;
  return spec;
}

struct HostWorker {
  client::HostKvMemory memory;
  std::vector<client::TensorHandle> handles;
  std::vector<kvo_host_tensor> tensors;
  kvo_worker* worker = nullptr;
  ~HostWorker() { kvo_worker_close(worker); }
};

std::unique_ptr<HostWorker> Connect(const std::string& socket, uint32_t mp_rank) {
  auto w = std::make_unique<HostWorker>();
  EXPECT_TRUE(w->memory.Create("separate_kv", kLayers, kLayerPage, kBlocks).ok());
  w->memory.Fill(7 + mp_rank);
  w->handles = w->memory.Handles();
  for (const client::TensorHandle& h : w->handles) {
    w->tensors.push_back({h.allocation_handle.c_str(), h.allocation_bytes, h.offset, h.num_blocks,
                          h.block_stride_bytes, h.page_bytes});
  }
  kvo_client_options options;
  kvo_client_options_init(&options);
  EXPECT_EQ(options.reconnect, 1);
  const kvo_engine_spec spec = Spec();
  char err[512];
  EXPECT_EQ(kvo_worker_connect_host_options(socket.c_str(), &spec, mp_rank, w->tensors.data(),
                                            w->tensors.size(), &options, &w->worker, err,
                                            sizeof(err)),
            KVO_OK)
      << err;
  return w;
}

kvo_session_state State(const kvo_worker* worker) {
  kvo_session_state state;
  std::memset(&state, 0xff, sizeof(state));
  char err[256];
  EXPECT_EQ(kvo_worker_session_state(worker, &state, err, sizeof(err)), KVO_OK) << err;
  return state;
}

bool WaitLive(const kvo_worker* worker, uint64_t generation) {
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (absl::Now() < deadline) {
    const kvo_session_state s = State(worker);
    if (s.phase == KVO_SESSION_LIVE && s.generation == generation) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return false;
}

int Submit(kvo_worker* worker, uint64_t id, int32_t direction, const std::vector<uint64_t>& rows,
           uint64_t epoch) {
  std::vector<uint64_t> blocks;
  for (size_t i = 0; i < rows.size(); ++i) blocks.push_back(i);
  char err[512];
  return kvo_worker_submit_epoch(worker, id, direction, blocks.data(), blocks.size(), rows.data(),
                                 rows.size(), -1, epoch, err, sizeof(err));
}

kvo_finished Wait(kvo_worker* worker, uint64_t id) {
  kvo_finished done;
  std::memset(&done, 0, sizeof(done));
  char err[512];
  EXPECT_EQ(kvo_worker_wait(worker, id, 10000, &done, err, sizeof(err)), KVO_OK) << err;
  return done;
}

TEST(ReconnectCTest, KilledDaemonRestartedOnTheSameSocket) {
  auto daemon = client::testing::RestartableDaemon::Start();
  ASSERT_TRUE(daemon.ok()) << daemon.status();
  const std::string socket = (*daemon)->data_socket();
  const kvo_engine_spec spec = Spec();
  kvo_scheduler* scheduler = nullptr;
  char err[512];
  ASSERT_EQ(kvo_scheduler_open(socket.c_str(), &spec, &scheduler, nullptr, err, sizeof(err)),
            KVO_OK)
      << err;
  uint64_t old_epoch = 0;
  ASSERT_EQ(kvo_scheduler_region_epoch(scheduler, &old_epoch, err, sizeof(err)), KVO_OK);
  auto w0 = Connect(socket, 0);
  auto w1 = Connect(socket, 1);
  ASSERT_NE(w0->worker, nullptr);
  ASSERT_NE(w1->worker, nullptr);
  EXPECT_EQ(State(w0->worker).phase, KVO_SESSION_LIVE);
  EXPECT_EQ(State(w0->worker).generation, 1u);

  const uint8_t* keys[] = {reinterpret_cast<const uint8_t*>("a"),
                           reinterpret_cast<const uint8_t*>("b")};
  const size_t lens[] = {1, 1};
  uint8_t mask[2];
  std::vector<uint64_t> rows(2);
  size_t evicted = 0;
  ASSERT_EQ(kvo_scheduler_prepare_store(scheduler, keys, lens, 2, mask, rows.data(), nullptr, 0,
                                        nullptr, &evicted, err, sizeof(err)),
            KVO_OK)
      << err;
  ASSERT_EQ(Submit(w0->worker, 1, KVO_STORE, rows, old_epoch), KVO_OK);  // w1 never votes
  (*daemon)->Kill();
  kvo_finished failed = Wait(w0->worker, 1);
  EXPECT_EQ(failed.code, KVO_UNAVAILABLE) << failed.message;

  const absl::Time before = absl::Now();
  EXPECT_EQ(Submit(w0->worker, 2, KVO_STORE, rows, old_epoch), KVO_UNAVAILABLE);
  EXPECT_EQ(kvo_worker_session_status(w0->worker, err, sizeof(err)), KVO_UNAVAILABLE);
  EXPECT_EQ(State(w0->worker).phase, KVO_SESSION_RECONNECTING);
  int32_t states[2];
  EXPECT_EQ(kvo_scheduler_lookup(scheduler, keys, lens, 2, states, err, sizeof(err)),
            KVO_UNAVAILABLE);
  EXPECT_LT(absl::Now() - before, absl::Seconds(1));

  ASSERT_TRUE((*daemon)->Restart().ok());
  ASSERT_TRUE(WaitLive(w0->worker, 2));
  ASSERT_TRUE(WaitLive(w1->worker, 2));
  const kvo_session_state s0 = State(w0->worker);
  EXPECT_NE(s0.region_epoch, old_epoch);
  EXPECT_EQ(s0.region_changes, 1u);
  EXPECT_EQ(s0.code, KVO_OK);
  uint64_t worker_epoch = 0;
  ASSERT_EQ(kvo_worker_region_epoch(w0->worker, &worker_epoch, err, sizeof(err)), KVO_OK);
  EXPECT_EQ(worker_epoch, s0.region_epoch);

  ASSERT_EQ(kvo_scheduler_lookup(scheduler, keys, lens, 2, states, err, sizeof(err)), KVO_OK)
      << err;
  EXPECT_EQ(states[0], KVO_KEY_MISS);
  uint64_t new_epoch = 0, changes = 0, reopens = 0;
  ASSERT_EQ(kvo_scheduler_region_epoch(scheduler, &new_epoch, err, sizeof(err)), KVO_OK);
  ASSERT_EQ(kvo_scheduler_region_changes(scheduler, &changes, &reopens, err, sizeof(err)), KVO_OK);
  EXPECT_EQ(new_epoch, s0.region_epoch);
  EXPECT_EQ(changes, 1u);
  EXPECT_EQ(reopens, 1u);

  // Planned in the old region: refused by the epoch check.
  ASSERT_EQ(Submit(w0->worker, 3, KVO_LOAD, rows, old_epoch), KVO_OK);
  const kvo_finished stale = Wait(w0->worker, 3);
  EXPECT_EQ(stale.code, KVO_FAILED_PRECONDITION) << stale.message;
  EXPECT_STREQ(stale.reason, "region_epoch_mismatch") << stale.message;

  // A new round trip, byte-exact.
  ASSERT_EQ(kvo_scheduler_prepare_store(scheduler, keys, lens, 2, mask, rows.data(), nullptr, 0,
                                        nullptr, &evicted, err, sizeof(err)),
            KVO_OK)
      << err;
  for (HostWorker* w : {w0.get(), w1.get()}) {
    ASSERT_EQ(Submit(w->worker, 4, KVO_STORE, rows, new_epoch), KVO_OK);
  }
  for (HostWorker* w : {w0.get(), w1.get()}) EXPECT_EQ(Wait(w->worker, 4).code, KVO_OK);
  ASSERT_EQ(kvo_scheduler_complete_store(scheduler, keys, lens, 2, 1, err, sizeof(err)), KVO_OK);
  ASSERT_EQ(kvo_scheduler_prepare_load(scheduler, keys, lens, 2, rows.data(), err, sizeof(err)),
            KVO_OK)
      << err;
  for (HostWorker* w : {w0.get(), w1.get()}) {
    w->memory.Clobber(0);
    w->memory.Clobber(1);
    ASSERT_EQ(Submit(w->worker, 5, KVO_LOAD, rows, new_epoch), KVO_OK);
  }
  for (HostWorker* w : {w0.get(), w1.get()}) {
    EXPECT_EQ(Wait(w->worker, 5).code, KVO_OK);
    EXPECT_TRUE(w->memory.Verify(0));
    EXPECT_TRUE(w->memory.Verify(1));
  }
  EXPECT_EQ(kvo_scheduler_complete_load(scheduler, keys, lens, 2, err, sizeof(err)), KVO_OK);
  kvo_scheduler_close(scheduler);
}

TEST(ReconnectCTest, ReconnectZeroEndsTheSession) {
  auto daemon = client::testing::RestartableDaemon::Start();
  ASSERT_TRUE(daemon.ok()) << daemon.status();
  const std::string socket = (*daemon)->data_socket();
  kvo_engine_spec spec = Spec();
  spec.world_size = spec.local_world_size = spec.tp = 1;
  client::HostKvMemory memory;
  ASSERT_TRUE(memory.Create("separate_kv", kLayers, kLayerPage, kBlocks).ok());
  std::vector<client::TensorHandle> handles = memory.Handles();
  std::vector<kvo_host_tensor> tensors;
  for (const client::TensorHandle& h : handles) {
    tensors.push_back({h.allocation_handle.c_str(), h.allocation_bytes, h.offset, h.num_blocks,
                       h.block_stride_bytes, h.page_bytes});
  }
  kvo_client_options options;
  kvo_client_options_init(&options);
  options.reconnect = 0;
  kvo_worker* worker = nullptr;
  char err[512];
  ASSERT_EQ(kvo_worker_connect_host_options(socket.c_str(), &spec, 0, tensors.data(),
                                            tensors.size(), &options, &worker, err, sizeof(err)),
            KVO_OK)
      << err;
  (*daemon)->Kill();
  ASSERT_TRUE((*daemon)->Restart().ok());
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (State(worker).phase == KVO_SESSION_LIVE && absl::Now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  const kvo_session_state state = State(worker);
  EXPECT_EQ(state.phase, KVO_SESSION_ENDED);
  EXPECT_EQ(state.code, KVO_UNAVAILABLE);
  EXPECT_EQ(state.generation, 1u);
  kvo_worker_close(worker);
}

}  // namespace
}  // namespace kvoffload
