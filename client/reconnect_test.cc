// The clients come back by themselves (durable regions), against the real kvoffloadd on its host
// backend: SIGKILL the daemon with a job in flight and start another on the same socket. The
// job's verdict is a failure, Submit during the outage fails fast, the workers register again
// in the background, the scheduler re-opens the engine and sees the new region, a part planned
// in the old region fails FAILED_PRECONDITION, and a new store → load round trip is byte-exact.
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "client/host/host_kv_memory.h"
#include "client/kvoffload_client.h"
#include "client/testing/restartable_daemon.h"
#include "common/error_info.h"
#include "common/refusals.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "kvoffload/v1/kvoffload.grpc.pb.h"

namespace kvoffload::client {
namespace {

using testing::RestartableDaemon;
using Phase = WorkerSessionState::Phase;

constexpr uint32_t kLayers = 4;
constexpr uint64_t kLayerPage = 8192;
constexpr uint64_t kBlocks = 16;

// Two local workers: a job stays in flight while only one of them has voted.
EngineSpec TwoWorkerSpec() {
  EngineSpec spec;
  spec.engine_id = "reconnect";
  spec.world_size = 2;
  spec.local_world_size = 2;
  spec.tp = 2;
  spec.num_layers = kLayers;
  spec.page_bytes = kLayerPage;
  spec.budget_bytes = 4 << 20;
  return spec;
}

struct Worker {
  HostKvMemory memory;
  std::unique_ptr<WorkerClient> client;
};

std::unique_ptr<Worker> ConnectWorker(const std::string& socket, const EngineSpec& spec,
                                      uint32_t mp_rank, bool reconnect = true) {
  auto w = std::make_unique<Worker>();
  EXPECT_TRUE(w->memory.Create("separate_kv", kLayers, kLayerPage, kBlocks).ok());
  w->memory.Fill(100 + mp_rank);
  WorkerOptions options;
  options.socket_path = socket;
  options.spec = spec;
  options.mp_rank = mp_rank;
  options.tensors = w->memory.Handles();
  options.reconnect = reconnect;
  options.reconnect_initial_backoff = absl::Milliseconds(20);
  options.reconnect_max_backoff = absl::Milliseconds(200);
  auto client = WorkerClient::Connect(options);
  EXPECT_TRUE(client.ok()) << client.status();
  if (client.ok()) w->client = std::move(*client);
  return w;
}

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

// Waits until the worker's session is live again in generation `generation`.
bool WaitLive(const WorkerClient& client, uint64_t generation) {
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (absl::Now() < deadline) {
    const WorkerSessionState state = client.session_state();
    if (state.phase == Phase::kLive && state.generation == generation) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return false;
}

TEST(ReconnectTest, DaemonKilledMidJobClientsComeBackInANewRegion) {
  auto daemon = RestartableDaemon::Start();
  ASSERT_TRUE(daemon.ok()) << daemon.status();
  const std::string socket = (*daemon)->data_socket();
  const EngineSpec spec = TwoWorkerSpec();
  auto scheduler = SchedulerClient::Open(socket, spec);
  ASSERT_TRUE(scheduler.ok()) << scheduler.status();
  SchedulerClient& index = **scheduler;
  const uint64_t old_epoch = index.region_epoch();
  auto w0 = ConnectWorker(socket, spec, 0);
  auto w1 = ConnectWorker(socket, spec, 1);
  ASSERT_NE(w0->client, nullptr);
  ASSERT_NE(w1->client, nullptr);
  EXPECT_EQ(w0->client->session_state().generation, 1u);
  EXPECT_EQ(w0->client->registration().region_epoch, old_epoch);

  // A store only worker 0 voted for: in flight until the daemon dies.
  auto planned = index.PrepareStore({"k0", "k1"});
  ASSERT_TRUE(planned.ok()) << planned.status();
  ASSERT_TRUE(w0->client->Submit(Job(1, Direction::kStore, planned->rows, old_epoch)).ok());
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_TRUE(w0->client->PollFinished().empty());
  (*daemon)->Kill();

  auto verdict = w0->client->WaitFinished(1, absl::Seconds(10));
  ASSERT_TRUE(verdict.ok()) << verdict.status();
  EXPECT_EQ(verdict->status.code(), absl::StatusCode::kUnavailable) << verdict->status;
  EXPECT_TRUE(absl::StrContains(verdict->status.message(), "went away")) << verdict->status;

  // During the outage: every call fails UNAVAILABLE at once.
  const absl::Time before = absl::Now();
  absl::Status submit = w0->client->Submit(Job(2, Direction::kStore, planned->rows, old_epoch));
  EXPECT_EQ(submit.code(), absl::StatusCode::kUnavailable) << submit;
  EXPECT_EQ(w0->client->session_status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(w0->client->session_state().phase, Phase::kReconnecting);
  auto lookup = index.Lookup({"k0"});
  EXPECT_EQ(lookup.status().code(), absl::StatusCode::kUnavailable) << lookup.status();
  auto again = index.Lookup({"k0"});  // the re-open finds no daemon: at once as well
  EXPECT_EQ(again.status().code(), absl::StatusCode::kUnavailable) << again.status();
  EXPECT_LT(absl::Now() - before, absl::Seconds(1));
  EXPECT_TRUE(w0->client->PollFinished().empty());  // job 2 was refused, not reported

  // The daemon returns without the region: the workers register again by themselves.
  ASSERT_TRUE((*daemon)->Restart().ok());
  ASSERT_TRUE(WaitLive(*w0->client, 2)) << w0->client->session_status();
  ASSERT_TRUE(WaitLive(*w1->client, 2)) << w1->client->session_status();
  const uint64_t new_epoch = w0->client->registration().region_epoch;
  EXPECT_NE(new_epoch, old_epoch);
  EXPECT_EQ(w1->client->registration().region_epoch, new_epoch);
  EXPECT_EQ(w0->client->session_state().region_changes, 1u);
  EXPECT_GE(w0->client->session_state().reconnect_attempts, 1u);

  // The scheduler re-opens on its next call and adopts the new region (nothing survived).
  auto states = index.Lookup({"k0", "k1"});
  ASSERT_TRUE(states.ok()) << states.status();
  EXPECT_EQ((*states)[0], KeyState::kMiss);
  EXPECT_EQ((*states)[1], KeyState::kMiss);
  EXPECT_EQ(index.region_epoch(), new_epoch);
  EXPECT_EQ(index.region_changes(), 1u);
  EXPECT_EQ(index.reopens(), 1u);

  // A part planned in the old region is refused by the epoch check.
  ASSERT_TRUE(w0->client->Submit(Job(3, Direction::kLoad, planned->rows, old_epoch)).ok());
  auto stale = w0->client->WaitFinished(3, absl::Seconds(10));
  ASSERT_TRUE(stale.ok()) << stale.status();
  EXPECT_EQ(stale->status.code(), absl::StatusCode::kFailedPrecondition) << stale->status;
  EXPECT_EQ(common::ErrorReason(stale->status), common::reason::kRegionEpochMismatch)
      << stale->status;
  EXPECT_EQ(common::ErrorInfoOf(stale->status).metadata.at("region_epoch"),
            absl::StrFormat("%x", new_epoch));

  // A new round trip: store, clobber, load, byte-exact.
  auto stored = index.PrepareStore({"n0", "n1", "n2"});
  ASSERT_TRUE(stored.ok()) << stored.status();
  for (Worker* w : {w0.get(), w1.get()}) {
    ASSERT_TRUE(w->client->Submit(Job(4, Direction::kStore, stored->rows, new_epoch)).ok());
  }
  for (Worker* w : {w0.get(), w1.get()}) {
    auto done = w->client->WaitFinished(4, absl::Seconds(10));
    ASSERT_TRUE(done.ok()) << done.status();
    EXPECT_TRUE(done->status.ok()) << done->status;
    EXPECT_EQ(done->bytes, 2 * 3 * kLayers * kLayerPage);  // both workers' copies
  }
  ASSERT_TRUE(index.CompleteStore(stored->keys, true).ok());
  auto rows = index.PrepareLoad({"n0", "n1", "n2"});
  ASSERT_TRUE(rows.ok()) << rows.status();
  for (Worker* w : {w0.get(), w1.get()}) {
    for (uint64_t b = 0; b < 3; ++b) w->memory.Clobber(b);
    ASSERT_TRUE(w->client->Submit(Job(5, Direction::kLoad, *rows, new_epoch)).ok());
  }
  for (Worker* w : {w0.get(), w1.get()}) {
    auto done = w->client->WaitFinished(5, absl::Seconds(10));
    ASSERT_TRUE(done.ok()) << done.status();
    EXPECT_TRUE(done->status.ok()) << done->status;
    for (uint64_t b = 0; b < 3; ++b) EXPECT_TRUE(w->memory.Verify(b)) << "block " << b;
  }
  EXPECT_TRUE(index.CompleteLoad({"n0", "n1", "n2"}).ok());
}

TEST(ReconnectTest, WithoutReconnectTheSessionEndsAndItsJobFails) {
  auto daemon = RestartableDaemon::Start();
  ASSERT_TRUE(daemon.ok()) << daemon.status();
  const std::string socket = (*daemon)->data_socket();
  const EngineSpec spec = TwoWorkerSpec();
  auto scheduler = SchedulerClient::Open(socket, spec);
  ASSERT_TRUE(scheduler.ok()) << scheduler.status();
  auto w0 = ConnectWorker(socket, spec, 0, /*reconnect=*/false);
  ASSERT_NE(w0->client, nullptr);
  auto planned = (*scheduler)->PrepareStore({"k0"});
  ASSERT_TRUE(planned.ok()) << planned.status();
  ASSERT_TRUE(w0->client->Submit(Job(1, Direction::kStore, planned->rows, 0)).ok());
  (*daemon)->Kill();
  auto verdict = w0->client->WaitFinished(1, absl::Seconds(10));
  ASSERT_TRUE(verdict.ok()) << verdict.status();
  EXPECT_EQ(verdict->status.code(), absl::StatusCode::kUnavailable) << verdict->status;
  ASSERT_TRUE((*daemon)->Restart().ok());
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  const WorkerSessionState state = w0->client->session_state();
  EXPECT_EQ(state.phase, Phase::kEnded);
  EXPECT_EQ(state.status.code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(state.generation, 1u);
  EXPECT_EQ(w0->client->Submit(Job(2, Direction::kStore, planned->rows, 0)).code(),
            absl::StatusCode::kUnavailable);
  auto wait = w0->client->WaitFinished(2, absl::Seconds(5));
  EXPECT_EQ(wait.status().code(), absl::StatusCode::kUnavailable);  // ended: at once
}

TEST(ReconnectTest, RestartBetweenCallsIsNoticed) {
  // No call during the outage: the next call finds the dead connection (UNAVAILABLE), the
  // channel's lost connection (it re-opens first), the new daemon without the engine (NOT_FOUND
  // "no engine": gRPC retries a call that never reached the wire on a new connection by itself,
  // so a call started as the old connection broke can reach the new daemon; the likely cause of
  // CI's one failure of this test, not reproduced in 750 runs here) or the new region (the daemon
  // refuses the old epoch, FAILED_PRECONDITION); never an answer from the new region unknowingly.
  // The call after works in the new region.
  auto daemon = RestartableDaemon::Start();
  ASSERT_TRUE(daemon.ok()) << daemon.status();
  EngineSpec spec = TwoWorkerSpec();
  spec.world_size = spec.local_world_size = spec.tp = 1;
  auto scheduler = SchedulerClient::Open((*daemon)->data_socket(), spec);
  ASSERT_TRUE(scheduler.ok()) << scheduler.status();
  const uint64_t old_epoch = (*scheduler)->region_epoch();
  ASSERT_TRUE((*scheduler)->PrepareStore({"old"}).ok());
  ASSERT_TRUE((*daemon)->Restart().ok());
  auto first = (*scheduler)->Lookup({"old"});
  if (first.ok()) {
    EXPECT_EQ((*first)[0], KeyState::kMiss);
    EXPECT_NE((*scheduler)->region_epoch(), old_epoch);  // re-opened before it was sent
  } else {
    const absl::StatusCode code = first.status().code();
    const std::string reason = common::ErrorReason(first.status());
    EXPECT_TRUE(code == absl::StatusCode::kUnavailable ||
                (code == absl::StatusCode::kFailedPrecondition &&
                 reason == common::reason::kRegionEpochMismatch) ||
                (code == absl::StatusCode::kNotFound && reason == common::reason::kEngineNotFound))
        << first.status();
    EXPECT_EQ((*scheduler)->region_epoch(), old_epoch);
  }
  auto prepared = (*scheduler)->PrepareStore({"k"});
  ASSERT_TRUE(prepared.ok()) << prepared.status();
  EXPECT_NE((*scheduler)->region_epoch(), old_epoch);
  EXPECT_EQ(prepared->region_epoch, (*scheduler)->region_epoch());
  EXPECT_EQ((*scheduler)->region_changes(), 1u);
  EXPECT_EQ((*scheduler)->reopens(), 1u);
}

TEST(ReconnectTest, DestroyingAReconnectingWorkerIsPrompt) {
  auto daemon = RestartableDaemon::Start();
  ASSERT_TRUE(daemon.ok()) << daemon.status();
  EngineSpec spec = TwoWorkerSpec();
  spec.world_size = spec.local_world_size = spec.tp = 1;
  auto w0 = ConnectWorker((*daemon)->data_socket(), spec, 0);
  ASSERT_NE(w0->client, nullptr);
  (*daemon)->Kill();
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  const absl::Time before = absl::Now();
  w0->client.reset();
  EXPECT_LT(absl::Now() - before, absl::Seconds(1));
}

TEST(ReconnectTest, DroppedEngineEndsTheSessionAndTheSchedulerFindsTheNewRegion) {
  // An operator drops the engine (the worker is told why: ABORTED, no reconnect) and another
  // client re-creates it; the scheduler's connection never broke, yet its next request names the
  // old region, is refused, and the call after re-opens.
  auto daemon = RestartableDaemon::Start();
  ASSERT_TRUE(daemon.ok()) << daemon.status();
  const std::string socket = (*daemon)->data_socket();
  EngineSpec spec = TwoWorkerSpec();
  spec.world_size = spec.local_world_size = spec.tp = 1;
  auto scheduler = SchedulerClient::Open(socket, spec);
  ASSERT_TRUE(scheduler.ok()) << scheduler.status();
  const uint64_t old_epoch = (*scheduler)->region_epoch();
  auto w0 = ConnectWorker(socket, spec, 0);
  ASSERT_NE(w0->client, nullptr);
  {
    auto admin = v1::Admin::NewStub(grpc::CreateChannel(
        absl::StrCat("unix:", (*daemon)->admin_socket()), grpc::InsecureChannelCredentials()));
    grpc::ClientContext context;
    v1::DropEngineRequest request;
    request.set_engine_id(spec.engine_id);
    request.set_force(true);
    v1::Empty response;
    ASSERT_TRUE(admin->DropEngine(&context, request, &response).ok());
  }
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (w0->client->session_state().phase == Phase::kLive && absl::Now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  const WorkerSessionState state = w0->client->session_state();
  EXPECT_EQ(state.phase, Phase::kEnded);
  EXPECT_EQ(state.status.code(), absl::StatusCode::kAborted) << state.status;
  EXPECT_EQ(state.status.message(), "engine dropped by an operator");
  EXPECT_EQ(state.generation, 1u);
  EXPECT_EQ(state.reconnect_attempts, 0u);
  absl::Status submit = w0->client->Submit(Job(9, Direction::kStore, {0}, 0));
  EXPECT_EQ(submit.code(), absl::StatusCode::kAborted);
  EXPECT_EQ(submit.message(), "engine dropped by an operator");  // the daemon's words, intact

  auto other = SchedulerClient::Open(socket, spec);
  ASSERT_TRUE(other.ok()) << other.status();
  ASSERT_NE((*other)->region_epoch(), old_epoch);
  auto refused = (*scheduler)->Lookup({"k"});
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition) << refused.status();
  EXPECT_EQ((*scheduler)->region_epoch(), old_epoch);
  auto states = (*scheduler)->Lookup({"k"});
  ASSERT_TRUE(states.ok()) << states.status();
  EXPECT_EQ((*scheduler)->region_epoch(), (*other)->region_epoch());
  EXPECT_EQ((*scheduler)->region_changes(), 1u);
  EXPECT_EQ((*scheduler)->reopens(), 1u);
}

TEST(ReconnectTest, DestroyedWhileARegistrationAttemptHangs) {
  // The daemon is gone and something that never answers holds its socket: each registration
  // attempt connects and then waits. Destroying the worker cancels the attempt in flight (it is
  // the attempt's owner that clears what the destructor cancels: no use after free) and is
  // prompt.
  auto daemon = RestartableDaemon::Start();
  ASSERT_TRUE(daemon.ok()) << daemon.status();
  const std::string socket = (*daemon)->data_socket();
  EngineSpec spec = TwoWorkerSpec();
  spec.world_size = spec.local_world_size = spec.tp = 1;
  auto w0 = std::make_unique<Worker>();
  ASSERT_TRUE(w0->memory.Create("separate_kv", kLayers, kLayerPage, kBlocks).ok());
  WorkerOptions options;
  options.socket_path = socket;
  options.spec = spec;
  options.tensors = w0->memory.Handles();
  options.connect_timeout = absl::Seconds(30);
  options.reconnect_initial_backoff = absl::Milliseconds(5);
  options.reconnect_max_backoff = absl::Milliseconds(5);
  auto client = WorkerClient::Connect(options);
  ASSERT_TRUE(client.ok()) << client.status();
  (*daemon)->Kill();
  ::unlink(socket.c_str());
  const int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::snprintf(addr.sun_path, sizeof(addr.sun_path), "%s", socket.c_str());
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  ASSERT_EQ(::listen(fd, 64), 0);  // accepted by the kernel, never answered
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while ((*client)->session_state().reconnect_attempts < 1 && absl::Now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(100));  // inside OpenSession by now
  EXPECT_EQ((*client)->session_state().phase, Phase::kReconnecting);
  const absl::Time before = absl::Now();
  client->reset();
  EXPECT_LT(absl::Now() - before, absl::Seconds(2));
  ::close(fd);
}

}  // namespace
}  // namespace kvoffload::client
