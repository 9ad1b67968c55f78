// The gRPC services in-process (real EngineService, WorkerService and AdminService on an
// in-process channel) over a fault-injecting copy backend: sessions that store and load bytes,
// refusals with exact codes, a worker that disconnects while its copy runs, and a forced drop
// while copies are held.
#include <unistd.h>

#include <atomic>
#include <memory>
#include <thread>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/notification.h"
#include "common/error_info.h"
#include "common/refusals.h"
#include "daemon/copy/testing/fault_copy_backend.h"
#include "daemon/copy/testing/shm_memory.h"
#include "daemon/engine/registry.h"
#include "daemon/engine/testing/engine_test_env.h"
#include "daemon/service/admin_service.h"
#include "daemon/service/engine_service.h"
#include "daemon/service/peer_credentials.h"
#include "daemon/service/testing/in_process_callers.h"
#include "daemon/service/worker_service.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "kvoffload/v1/kvoffload.grpc.pb.h"
#include "proto/spec_convert.h"
#include "proto/status_convert.h"

namespace kvoffload::daemon {
namespace {

using testing::EngineTestEnv;
using testing::kBytesPerBlock;
using testing::kNumRows;
using testing::PerRankSpec;
using Fault = FaultCopyBackend::Fault;
using Stream = grpc::ClientReaderWriter<v1::WorkerMessage, v1::DaemonMessage>;

// One worker's session as a client sees it.
struct Session {
  std::unique_ptr<ShmWorkerMemory> memory;
  grpc::ClientContext context;
  std::unique_ptr<Stream> stream;
  v1::DaemonMessage first;

  void Submit(uint64_t job_id, v1::Direction direction, std::vector<uint64_t> blocks,
              std::vector<uint64_t> rows) {
    v1::WorkerMessage m;
    v1::Submit* s = m.mutable_submit();
    s->set_job_id(job_id);
    s->set_direction(direction);
    for (uint64_t b : blocks) s->add_gpu_blocks(b);
    for (uint64_t r : rows) s->add_rows(r);
    s->set_event_index(-1);
    ASSERT_TRUE(stream->Write(m));
  }
  // The next message; a default (empty) one when the stream ended.
  v1::DaemonMessage Next() {
    v1::DaemonMessage m;
    if (!stream->Read(&m)) m.Clear();
    return m;
  }
};

class ServiceTest : public ::testing::Test {
 protected:
  explicit ServiceTest(const WorkerServiceOptions& worker_options = {}) {
    registry_ = std::make_unique<EngineRegistry>(env_.deps(), RegistryOptions{});
    engine_service_ = std::make_unique<EngineService>(registry_.get(), &peers_);
    worker_service_ = std::make_unique<WorkerService>(registry_.get(), &peers_, worker_options);
    admin_service_ = std::make_unique<AdminService>(registry_.get(), &env_.backend(),
                                                    &env_.budget(), &peers_, AccessPolicy{});
    grpc::ServerBuilder builder;
    builder.RegisterService(engine_service_.get());
    builder.RegisterService(worker_service_.get());
    builder.RegisterService(admin_service_.get());
    server_ = builder.BuildAndStart();
    auto channel = server_->InProcessChannel(grpc::ChannelArguments());
    engine_stub_ = v1::Engine::NewStub(channel);
    worker_stub_ = v1::Worker::NewStub(channel);
    admin_stub_ = v1::Admin::NewStub(channel);
  }
  ~ServiceTest() override {
    registry_->Shutdown(absl::UnavailableError("test over"), absl::Seconds(5));
    env_.Settle();
    server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(5));
    server_->Wait();
  }

  std::unique_ptr<Session> Register(const common::EngineSpec& spec, uint32_t mp_rank,
                                    uint64_t seed) {
    auto session = std::make_unique<Session>();
    auto memory = ShmWorkerMemory::Create(testing::kLayers, testing::kWorkerBlocks,
                                          testing::kPageBytes, seed);
    EXPECT_TRUE(memory.ok()) << memory.status();
    if (!memory.ok()) return nullptr;
    session->memory = *std::move(memory);
    session->context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
    session->stream = worker_stub_->Session(&session->context);
    v1::WorkerMessage m;
    v1::RegisterWorker* r = m.mutable_register_();
    SpecToProto(spec, r->mutable_spec());
    r->set_mp_rank(mp_rank);
    r->set_pid(getpid());
    for (const TensorRegistration& t : session->memory->Registration().tensors) {
      v1::TensorSpec* p = r->add_tensors();
      p->set_allocation_handle(t.allocation_handle);
      p->set_allocation_bytes(t.allocation_bytes);
      p->set_offset(t.offset);
      p->set_num_blocks(t.num_blocks);
      p->set_block_stride_bytes(t.block_stride_bytes);
      p->set_page_bytes(t.page_bytes);
    }
    EXPECT_TRUE(session->stream->Write(m));
    session->first = session->Next();
    return session;
  }

  v1::KeysRequest Keys(const std::vector<std::string>& keys, const std::string& engine_id = "engine") {
    v1::KeysRequest request;
    request.set_engine_id(engine_id);
    for (const std::string& k : keys) request.add_keys(k);
    return request;
  }

  std::vector<uint64_t> PrepareStore(const std::vector<std::string>& keys) {
    grpc::ClientContext context;
    v1::PrepareStoreResponse response;
    EXPECT_TRUE(engine_stub_->PrepareStore(&context, Keys(keys), &response).ok());
    return {response.rows().begin(), response.rows().end()};
  }

  grpc::Status CompleteStore(const std::vector<std::string>& keys, bool success) {
    grpc::ClientContext context;
    v1::CompleteStoreRequest request;
    request.set_engine_id("engine");
    for (const std::string& k : keys) request.add_keys(k);
    request.set_success(success);
    v1::Empty response;
    return engine_stub_->CompleteStore(&context, request, &response);
  }

  grpc::Status DropEngine(bool force) {
    grpc::ClientContext context;
    v1::DropEngineRequest drop;
    drop.set_engine_id("engine");
    drop.set_force(force);
    v1::Empty empty;
    return admin_stub_->DropEngine(&context, drop, &empty);
  }

  v1::EngineStats EngineStats() {
    grpc::ClientContext context;
    v1::StatsResponse response;
    EXPECT_TRUE(admin_stub_->Stats(&context, v1::StatsRequest(), &response).ok());
    EXPECT_EQ(response.engines_size(), 1);
    return response.engines_size() == 1 ? response.engines(0) : v1::EngineStats();
  }

  EngineTestEnv env_;
  std::unique_ptr<EngineRegistry> registry_;
  InProcessCallers peers_;  // the in-process channel's calls are this process's
  std::unique_ptr<EngineService> engine_service_;
  std::unique_ptr<WorkerService> worker_service_;
  std::unique_ptr<AdminService> admin_service_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<v1::Engine::Stub> engine_stub_;
  std::unique_ptr<v1::Worker::Stub> worker_stub_;
  std::unique_ptr<v1::Admin::Stub> admin_stub_;
};

TEST_F(ServiceTest, SessionsStoreAndLoadBytes) {
  auto w0 = Register(PerRankSpec(2), 0, 1);
  auto w1 = Register(PerRankSpec(2), 1, 2);
  ASSERT_TRUE(w0->first.has_registered());
  ASSERT_TRUE(w1->first.has_registered());
  EXPECT_EQ(w1->first.registered().slot(), 1u);
  const std::vector<std::string> keys = {"a", "b"};
  const std::vector<uint64_t> rows = PrepareStore(keys);
  ASSERT_EQ(rows.size(), 2u);
  w0->Submit(1, v1::DIRECTION_STORE, {4, 5}, rows);
  w1->Submit(1, v1::DIRECTION_STORE, {6, 7}, rows);
  for (Session* w : {w0.get(), w1.get()}) {
    v1::DaemonMessage m = w->Next();
    ASSERT_TRUE(m.has_finished()) << m.DebugString();
    EXPECT_EQ(m.finished().job_id(), 1u);
    EXPECT_EQ(m.finished().code(), 0);
    EXPECT_EQ(m.finished().bytes(), 4 * kBytesPerBlock);
  }
  ASSERT_TRUE(CompleteStore(keys, true).ok());
  grpc::ClientContext context;
  v1::PrepareLoadResponse load;
  ASSERT_TRUE(engine_stub_->PrepareLoad(&context, Keys(keys), &load).ok());
  const std::vector<uint64_t> load_rows(load.rows().begin(), load.rows().end());
  w0->memory->Scramble(20, 9);
  w1->memory->Scramble(20, 9);
  w0->Submit(2, v1::DIRECTION_LOAD, {20, 21}, load_rows);
  w1->Submit(2, v1::DIRECTION_LOAD, {20, 21}, load_rows);
  for (Session* w : {w0.get(), w1.get()}) {
    v1::DaemonMessage m = w->Next();
    ASSERT_TRUE(m.has_finished()) << m.DebugString();
    EXPECT_EQ(m.finished().code(), 0);
  }
  EXPECT_EQ(w0->memory->Block(20), w0->memory->Block(4));
  EXPECT_EQ(w0->memory->Block(21), w0->memory->Block(5));
  EXPECT_EQ(w1->memory->Block(20), w1->memory->Block(6));
  EXPECT_EQ(w1->memory->Block(21), w1->memory->Block(7));
  v1::EngineStats stats = EngineStats();
  EXPECT_EQ(stats.store_bytes(), 4 * kBytesPerBlock);
  EXPECT_EQ(stats.load_bytes(), 4 * kBytesPerBlock);
  EXPECT_EQ(stats.jobs_done(), 2u);
  EXPECT_EQ(stats.workers(), 2u);
}

TEST_F(ServiceTest, RefusedRegistrationsEndTheSessionWithTheirCode) {
  auto session = std::make_unique<Session>();
  session->stream = worker_stub_->Session(&session->context);
  v1::WorkerMessage submit;
  submit.mutable_submit()->set_job_id(1);
  ASSERT_TRUE(session->stream->Write(submit));
  EXPECT_FALSE(session->Next().has_registered());
  EXPECT_EQ(session->stream->Finish().error_code(), grpc::StatusCode::INVALID_ARGUMENT);

  env_.backend().FailNextOpenWorker(absl::InvalidArgumentError("cannot open handle"));
  auto refused = Register(PerRankSpec(2), 0, 1);
  EXPECT_FALSE(refused->first.has_registered());
  grpc::Status status = refused->stream->Finish();
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(status.error_message(), "cannot open handle");

  auto bad_rank = Register(PerRankSpec(2), 2, 1);
  EXPECT_EQ(bad_rank->stream->Finish().error_code(), grpc::StatusCode::INVALID_ARGUMENT);
}

TEST_F(ServiceTest, RejectedSubmitIsAnsweredAndTheSessionStaysUsable) {
  auto w = Register(PerRankSpec(1), 0, 1);
  ASSERT_TRUE(w->first.has_registered());
  const std::vector<uint64_t> rows = PrepareStore({"x"});
  w->Submit(5, v1::DIRECTION_STORE, {0}, {kNumRows});  // row out of range
  v1::DaemonMessage m = w->Next();
  ASSERT_TRUE(m.has_finished());
  EXPECT_EQ(m.finished().job_id(), 5u);
  EXPECT_EQ(m.finished().code(), static_cast<int>(grpc::StatusCode::OUT_OF_RANGE));
  w->Submit(6, v1::DIRECTION_STORE, {testing::kWorkerBlocks}, rows);  // block out of range
  m = w->Next();
  EXPECT_EQ(m.finished().code(), static_cast<int>(grpc::StatusCode::OUT_OF_RANGE));
  w->Submit(7, v1::DIRECTION_STORE, {1}, rows);
  m = w->Next();
  ASSERT_TRUE(m.has_finished());
  EXPECT_EQ(m.finished().job_id(), 7u);
  EXPECT_EQ(m.finished().code(), 0);
  EXPECT_EQ(m.finished().bytes(), kBytesPerBlock);
  w->Submit(7, v1::DIRECTION_STORE, {1}, rows);  // the same id again
  m = w->Next();
  EXPECT_EQ(m.finished().code(), static_cast<int>(grpc::StatusCode::ALREADY_EXISTS));
}

// A session with 4 verdicts waiting to be written is not read from until its worker reads: the
// worker's writes stall (the in-process transport completes a write when the daemon reads it),
// and resume, with every verdict delivered in order, once it reads.
class FlowControlTest : public ServiceTest {
 protected:
  static WorkerServiceOptions SmallQueue() {
    WorkerServiceOptions o;
    o.max_queued_verdicts = 4;
    return o;
  }
  FlowControlTest() : ServiceTest(SmallQueue()) {}

  // Parts 1..n whose row is out of range (each answered at once with OUT_OF_RANGE), written from
  // a thread of their own; `written` counts those the stream took.
  static std::thread WriteRefusedParts(Session& w, uint64_t n, std::atomic<uint64_t>* written) {
    return std::thread([&w, n, written] {
      for (uint64_t job = 1; job <= n; ++job) {
        v1::WorkerMessage m;
        v1::Submit* p = m.mutable_submit();
        p->set_job_id(job);
        p->set_direction(v1::DIRECTION_STORE);
        p->add_gpu_blocks(0);
        p->add_rows(kNumRows);
        p->set_event_index(-1);
        if (!w.stream->Write(m)) return;
        ++*written;
      }
    });
  }
};

TEST_F(FlowControlTest, AWorkerThatDoesNotReadStopsBeingReadAndLosesNoVerdict) {
  auto w = Register(PerRankSpec(1), 0, 1);
  ASSERT_TRUE(w->first.has_registered());
  constexpr uint64_t kParts = 40;
  std::atomic<uint64_t> written{0};
  std::thread writer = WriteRefusedParts(*w, kParts, &written);
  // Nothing is read: one verdict in flight, four queued, then the daemon stops reading.
  absl::SleepFor(absl::Milliseconds(500));
  const uint64_t stalled = written.load();
  EXPECT_LE(stalled, 4u + 4u) << "the daemon went on reading a worker that reads nothing";
  absl::SleepFor(absl::Milliseconds(200));
  EXPECT_EQ(written.load(), stalled);
  for (uint64_t job = 1; job <= kParts; ++job) {
    v1::DaemonMessage m = w->Next();
    ASSERT_TRUE(m.has_finished()) << "verdict of job " << job;
    EXPECT_EQ(m.finished().job_id(), job);
    EXPECT_EQ(m.finished().code(), static_cast<int>(grpc::StatusCode::OUT_OF_RANGE));
  }
  writer.join();
  EXPECT_EQ(written.load(), kParts);
}

// A session whose reads are paused (its worker reads nothing) still ends when its engine is
// dropped: the writer resumes the reads when the session closes, so the session's thread sees
// the end. The worker then finds its verdicts, SessionClosed and a cancelled call.
TEST_F(FlowControlTest, ADroppedEngineEndsASessionWhoseReadsArePaused) {
  auto w = Register(PerRankSpec(1), 0, 1);
  ASSERT_TRUE(w->first.has_registered());
  std::atomic<uint64_t> written{0};
  std::thread writer = WriteRefusedParts(*w, 40, &written);
  absl::SleepFor(absl::Milliseconds(300));
  const uint64_t stalled = written.load();
  ASSERT_LT(stalled, 40u);
  EXPECT_TRUE(DropEngine(/*force=*/true).ok());
  // The parts read before the drop are OUT_OF_RANGE; the reads resume as the session closes,
  // and every part read after it is ABORTED (the engine is gone); all in order.
  uint64_t verdicts = 0, out_of_range = 0;
  v1::DaemonMessage m;
  while (w->stream->Read(&m) && m.has_finished()) {
    ++verdicts;
    EXPECT_EQ(m.finished().job_id(), verdicts);
    if (m.finished().code() == static_cast<int>(grpc::StatusCode::OUT_OF_RANGE)) {
      EXPECT_EQ(out_of_range++, verdicts - 1) << "OUT_OF_RANGE after ABORTED";
    } else {
      EXPECT_EQ(m.finished().code(), static_cast<int>(grpc::StatusCode::ABORTED));
    }
  }
  EXPECT_GE(out_of_range, 1u);
  EXPECT_LE(out_of_range, stalled + 1);
  ASSERT_TRUE(m.has_closed()) << m.DebugString();
  EXPECT_EQ(m.closed().code(), static_cast<int>(grpc::StatusCode::ABORTED));
  EXPECT_FALSE(w->stream->Read(&m));
  EXPECT_EQ(w->stream->Finish().error_code(), grpc::StatusCode::CANCELLED);
  writer.join();
}

// A WorkerService alone with a short first-message deadline, on an in-process channel.
class FirstMessageTest : public ::testing::Test {
 protected:
  FirstMessageTest() {
    WorkerServiceOptions options;
    options.first_message_timeout = absl::Milliseconds(100);
    service_ = std::make_unique<WorkerService>(&registry_, &peers_, options);
    grpc::ServerBuilder builder;
    builder.RegisterService(service_.get());
    server_ = builder.BuildAndStart();
    stub_ = v1::Worker::NewStub(server_->InProcessChannel(grpc::ChannelArguments()));
  }
  ~FirstMessageTest() override {
    server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(5));
    server_->Wait();
  }

  EngineTestEnv env_;
  EngineRegistry registry_{env_.deps(), RegistryOptions{}};
  InProcessCallers peers_;
  std::unique_ptr<WorkerService> service_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<v1::Worker::Stub> stub_;
};

// The proto and docs/api.md promise DEADLINE_EXCEEDED for a session that does
// not register in time (it was CANCELLED: the handler could only cancel its blocked Read).
TEST_F(FirstMessageTest, SilentSessionEndsWithDeadlineExceeded) {
  grpc::ClientContext context;
  auto stream = stub_->Session(&context);
  v1::DaemonMessage m;
  EXPECT_FALSE(stream->Read(&m));
  const grpc::Status status = stream->Finish();
  EXPECT_EQ(status.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED);
  EXPECT_EQ(status.error_message(),
            "no `register` within 100ms of opening the session (--first_message_timeout_s)");
}

TEST_F(FirstMessageTest, SessionClosedBeforeRegisteringEndsCancelled) {
  grpc::ClientContext context;
  auto stream = stub_->Session(&context);
  ASSERT_TRUE(stream->WritesDone());
  const grpc::Status status = stream->Finish();
  EXPECT_EQ(status.error_code(), grpc::StatusCode::CANCELLED);
  EXPECT_EQ(status.error_message(), "session ended before registering");
}

TEST_F(FirstMessageTest, FirstMessageOtherThanRegisterIsRefused) {
  grpc::ClientContext context;
  auto stream = stub_->Session(&context);
  v1::WorkerMessage submit;
  submit.mutable_submit()->set_job_id(1);
  ASSERT_TRUE(stream->Write(submit));
  const grpc::Status status = stream->Finish();
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(status.error_message(), "the first message of a worker session must be `register`");
}

TEST_F(ServiceTest, WorkerThatDisconnectsWhileCopyingFailsTheJobAfterTheCopy) {
  auto w0 = Register(PerRankSpec(2), 0, 1);
  auto w1 = Register(PerRankSpec(2), 1, 2);
  const std::vector<uint64_t> rows = PrepareStore({"a"});
  env_.backend().AddRule({.fault = Fault::kHold, .slot = 0});
  w0->Submit(1, v1::DIRECTION_STORE, {0}, rows);
  ASSERT_TRUE(env_.backend().WaitForHeld(1, absl::Seconds(10)));
  w1->Submit(1, v1::DIRECTION_STORE, {0}, rows);
  ASSERT_TRUE(env_.backend().WaitForCompleted(1, absl::Seconds(10)));
  w0->context.TryCancel();  // rank 0 dies with its copy in flight
  EXPECT_EQ(w0->stream->Finish().error_code(), grpc::StatusCode::CANCELLED);
  // Detach happens on the server's handler thread; wait until the engine saw it.
  for (int i = 0; i < 1000 && EngineStats().workers() != 1; ++i) absl::SleepFor(absl::Milliseconds(5));
  ASSERT_EQ(EngineStats().workers(), 1u);
  EXPECT_EQ(EngineStats().jobs_failed(), 0u);  // not reported while the copy may still run
  env_.backend().ReleaseAllHeld();
  v1::DaemonMessage m = w1->Next();
  ASSERT_TRUE(m.has_finished());
  EXPECT_EQ(m.finished().job_id(), 1u);
  EXPECT_EQ(m.finished().code(), static_cast<int>(grpc::StatusCode::UNAVAILABLE));
  EXPECT_TRUE(absl::StrContains(m.finished().message(), "mp_rank 0 of engine engine/0 disconnected"));
  EXPECT_EQ(EngineStats().jobs_failed(), 1u);
}

TEST_F(ServiceTest, ForcedDropEndsSessionsWithAbortedAndFreesTheRegionAfterCopies) {
  auto w = Register(PerRankSpec(1), 0, 1);
  const std::vector<uint64_t> rows = PrepareStore({"a"});
  env_.backend().AddRule({.fault = Fault::kHold});
  w->Submit(1, v1::DIRECTION_STORE, {0}, rows);
  ASSERT_TRUE(env_.backend().WaitForHeld(1, absl::Seconds(10)));
  {
    grpc::ClientContext context;
    v1::DropEngineRequest drop;
    drop.set_engine_id("engine");
    v1::Empty empty;
    EXPECT_EQ(admin_stub_->DropEngine(&context, drop, &empty).error_code(),
              grpc::StatusCode::FAILED_PRECONDITION);
  }
  // A forced drop returns only once the held copy has ended: until then the copy holds the
  // region and the worker is not told its session is over.
  absl::Notification dropped;
  std::thread dropper([&] {
    EXPECT_TRUE(DropEngine(/*force=*/true).ok());
    dropped.Notify();
  });
  EXPECT_FALSE(dropped.WaitForNotificationWithTimeout(absl::Milliseconds(200)));
  EXPECT_EQ(env_.budget().reserved(), testing::ReservedFor(PerRankSpec(1)));
  env_.backend().ReleaseAllHeld();
  dropper.join();
  // The accepted job's verdict, then SessionClosed(ABORTED); the call itself is cancelled by the
  // daemon after writing it, so the RPC status is CANCELLED.
  v1::DaemonMessage m = w->Next();
  ASSERT_TRUE(m.has_finished()) << m.DebugString();
  EXPECT_EQ(m.finished().job_id(), 1u);
  EXPECT_EQ(m.finished().code(), static_cast<int>(grpc::StatusCode::ABORTED));
  m = w->Next();
  ASSERT_TRUE(m.has_closed()) << m.DebugString();
  EXPECT_EQ(m.closed().code(), static_cast<int>(grpc::StatusCode::ABORTED));
  EXPECT_EQ(m.closed().message(), "engine dropped by an operator");
  EXPECT_EQ(w->stream->Finish().error_code(), grpc::StatusCode::CANCELLED);
  // The session's handler thread drops its engine reference when it returns.
  for (int i = 0; i < 1000 && env_.budget().reserved() != 0; ++i) {
    absl::SleepFor(absl::Milliseconds(5));
    env_.release().Flush();
  }
  EXPECT_EQ(env_.budget().reserved(), 0u);
}

TEST_F(ServiceTest, ForcedDropReportsEveryJobBeforeSessionClosed) {
  auto w = Register(PerRankSpec(1), 0, 1);
  std::vector<std::string> keys;
  for (int i = 0; i < 8; ++i) keys.push_back("k" + std::to_string(i));
  const std::vector<uint64_t> rows = PrepareStore(keys);
  for (int i = 0; i < 8; ++i) env_.backend().AddRule({.fault = Fault::kHold});
  for (uint64_t job = 0; job < 8; ++job) w->Submit(job, v1::DIRECTION_STORE, {job}, {rows[job]});
  ASSERT_TRUE(env_.backend().WaitForHeld(8, absl::Seconds(10)));
  std::thread dropper([&] {
    grpc::ClientContext context;
    v1::DropEngineRequest drop;
    drop.set_engine_id("engine");
    drop.set_force(true);
    v1::Empty empty;
    EXPECT_TRUE(admin_stub_->DropEngine(&context, drop, &empty).ok());
  });
  absl::SleepFor(absl::Milliseconds(50));
  env_.backend().ReleaseAllHeld();
  dropper.join();
  int verdicts = 0;
  v1::DaemonMessage m;
  for (m = w->Next(); m.has_finished(); m = w->Next()) ++verdicts;
  EXPECT_EQ(verdicts, 8);
  EXPECT_TRUE(m.has_closed());
}

// CompleteStore(success=true) for the keys of a store job that failed is FAILED_PRECONDITION
// and Lookup never says HIT: the keys stay HIT_PENDING (WRITING) until the scheduler ends the
// store with success=false, which frees them.
TEST_F(ServiceTest, CompleteStoreTrueAfterAFailedStoreIsFailedPrecondition) {
  auto w = Register(PerRankSpec(1), 0, 1);
  const std::vector<uint64_t> rows = PrepareStore({"a"});
  env_.backend().AddRule({.fault = Fault::kFail});
  w->Submit(1, v1::DIRECTION_STORE, {0}, rows);
  v1::DaemonMessage m = w->Next();
  ASSERT_EQ(m.finished().code(), static_cast<int>(grpc::StatusCode::DATA_LOSS));
  EXPECT_EQ(CompleteStore({"a"}, true).error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  {
    grpc::ClientContext context;
    v1::LookupResponse lookup;
    ASSERT_TRUE(engine_stub_->Lookup(&context, Keys({"a"}), &lookup).ok());
    EXPECT_EQ(lookup.states(0), v1::KEY_STATE_HIT_PENDING);
  }
  EXPECT_TRUE(CompleteStore({"a"}, false).ok());
  grpc::ClientContext context;
  v1::LookupResponse lookup;
  ASSERT_TRUE(engine_stub_->Lookup(&context, Keys({"a"}), &lookup).ok());
  EXPECT_EQ(lookup.states(0), v1::KEY_STATE_MISS);
}

// Index calls that name the region they were planned against are refused, changing nothing,
// once the engine's region is another one (re-created after a drop, or a restart that could not
// keep it): a scheduler whose channel reconnected silently cannot be answered from a new region.
TEST_F(ServiceTest, IndexCallsPlannedAgainstAnotherRegionAreFailedPrecondition) {
  auto open = [&]() {
    grpc::ClientContext context;
    v1::OpenEngineRequest request;
    SpecToProto(PerRankSpec(1), request.mutable_spec());
    v1::OpenEngineResponse response;
    EXPECT_TRUE(engine_stub_->OpenEngine(&context, request, &response).ok());
    return response.region_epoch();
  };
  const uint64_t epoch = open();
  ASSERT_NE(epoch, 0u);
  v1::KeysRequest request = Keys({"a", "b"});
  request.set_region_epoch(epoch);
  {
    grpc::ClientContext context;
    v1::PrepareStoreResponse response;
    ASSERT_TRUE(engine_stub_->PrepareStore(&context, request, &response).ok());
    EXPECT_EQ(response.rows_size(), 2);
  }
  v1::KeysRequest stale = Keys({"c"});
  stale.set_region_epoch(epoch ^ 1);
  {
    grpc::ClientContext context;
    v1::PrepareStoreResponse response;
    grpc::Status status = engine_stub_->PrepareStore(&context, stale, &response);
    EXPECT_EQ(status.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
    // Both epochs, in the reason's metadata (the gRPC status details) and for people.
    const common::ErrorInfo info = common::ErrorInfoOf(FromGrpcStatus(status));
    EXPECT_EQ(info.reason, common::reason::kRegionEpochMismatch) << status.error_message();
    EXPECT_EQ(info.metadata.at("planned_epoch"), absl::StrFormat("%x", epoch ^ 1));
    EXPECT_EQ(info.metadata.at("region_epoch"), absl::StrFormat("%x", epoch));
    EXPECT_NE(status.error_message().find(absl::StrFormat("epoch %x", epoch ^ 1)),
              std::string::npos)
        << status.error_message();
  }
  {
    grpc::ClientContext context;
    v1::CompleteStoreRequest complete;
    complete.set_engine_id("engine");
    complete.add_keys("a");
    complete.set_success(true);
    complete.set_region_epoch(epoch ^ 1);
    v1::Empty empty;
    EXPECT_EQ(engine_stub_->CompleteStore(&context, complete, &empty).error_code(),
              grpc::StatusCode::FAILED_PRECONDITION);
  }
  // Nothing changed: "c" was not stored, "a" and "b" are still WRITING (uncommitted).
  {
    grpc::ClientContext context;
    v1::LookupResponse lookup;
    v1::KeysRequest all = Keys({"a", "b", "c"});  // epoch 0: not checked
    ASSERT_TRUE(engine_stub_->Lookup(&context, all, &lookup).ok());
    ASSERT_EQ(lookup.states_size(), 3);
    EXPECT_EQ(lookup.states(0), v1::KEY_STATE_HIT_PENDING);
    EXPECT_EQ(lookup.states(1), v1::KEY_STATE_HIT_PENDING);
    EXPECT_EQ(lookup.states(2), v1::KEY_STATE_MISS);
  }
}

TEST_F(ServiceTest, IndexAndAdminCallsRefuseBadRequestsWithExactCodes) {
  auto call = [&](auto method, const auto& request, auto* response) {
    grpc::ClientContext context;
    return (engine_stub_.get()->*method)(&context, request, response).error_code();
  };
  v1::LookupResponse lookup;
  EXPECT_EQ(call(&v1::Engine::Stub::Lookup, Keys({"a"}), &lookup), grpc::StatusCode::NOT_FOUND);
  v1::OpenEngineRequest open;
  SpecToProto(PerRankSpec(1), open.mutable_spec());
  v1::OpenEngineResponse opened;
  ASSERT_EQ(call(&v1::Engine::Stub::OpenEngine, open, &opened), grpc::StatusCode::OK);
  EXPECT_TRUE(opened.created());
  EXPECT_EQ(opened.geometry().num_rows(), kNumRows);
  EXPECT_EQ(call(&v1::Engine::Stub::Lookup, Keys({}), &lookup),
            grpc::StatusCode::INVALID_ARGUMENT);
  v1::PrepareStoreResponse store;
  EXPECT_EQ(call(&v1::Engine::Stub::PrepareStore, Keys({std::string(257, 'k')}), &store),
            grpc::StatusCode::INVALID_ARGUMENT);
  v1::Empty empty;
  EXPECT_EQ(call(&v1::Engine::Stub::CompleteLoad, Keys({"never-stored"}), &empty),
            grpc::StatusCode::NOT_FOUND);
  v1::PrepareLoadResponse load;
  EXPECT_EQ(call(&v1::Engine::Stub::PrepareLoad, Keys({"absent"}), &load),
            grpc::StatusCode::NOT_FOUND);
  std::vector<std::string> too_many;
  for (uint64_t i = 0; i <= kNumRows; ++i) too_many.push_back("k" + std::to_string(i));
  EXPECT_EQ(call(&v1::Engine::Stub::PrepareStore, Keys(too_many), &store),
            grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_EQ(EngineStats().rows_writing(), 0u);  // nothing half-applied

  grpc::ClientContext c1, c2, c3;
  v1::DropEngineRequest drop;
  EXPECT_EQ(admin_stub_->DropEngine(&c1, drop, &empty).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
  drop.set_engine_id("absent");
  EXPECT_EQ(admin_stub_->DropEngine(&c2, drop, &empty).error_code(), grpc::StatusCode::NOT_FOUND);
  v1::CleanupResponse cleanup;
  EXPECT_EQ(admin_stub_->Cleanup(&c3, v1::CleanupRequest(), &cleanup).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
}

}  // namespace
}  // namespace kvoffload::daemon
