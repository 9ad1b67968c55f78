// End-to-end tests of kvoffloadd on the host backend: the real daemon binary, real worker
// processes (kvoffload_host_worker), the client library for the scheduler side, and the Admin
// service.
#include <signal.h>

#include <memory>
#include <thread>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "client/kvoffload_client.h"
#include "client/host/store_rows.h"
#include "common/error_info.h"
#include "common/refusals.h"
#include "gtest/gtest.h"
#include "tests/integration/engine_fixture.h"
#include "tests/integration/harness.h"

namespace kvoffload::testing {
namespace {

using client::SchedulerClient;

class DaemonTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto daemon = DaemonProcess::Start(ExtraDaemonArgs());
    ASSERT_TRUE(daemon.ok()) << daemon.status();
    daemon_ = std::move(*daemon);
  }
  virtual std::vector<std::string> ExtraDaemonArgs() { return {}; }

  std::unique_ptr<WorkerProcess> StartWorker(const TestEngine& engine, uint32_t mp_rank,
                                             std::vector<std::string> extra = {}) {
    auto worker = WorkerProcess::Start(daemon_->data_socket(), engine.WorkerArgs(mp_rank, extra));
    EXPECT_TRUE(worker.ok()) << worker.status();
    return worker.ok() ? std::move(*worker) : nullptr;
  }

  std::unique_ptr<SchedulerClient> OpenScheduler(const TestEngine& engine) {
    auto scheduler = SchedulerClient::Open(daemon_->data_socket(), engine.Spec());
    EXPECT_TRUE(scheduler.ok()) << scheduler.status();
    return scheduler.ok() ? std::move(*scheduler) : nullptr;
  }

  std::unique_ptr<DaemonProcess> daemon_;
};

TEST_F(DaemonTest, StoreClobberLoadIsByteExactForEveryLayout) {
  uint64_t job = 100;
  for (const char* layout : {"separate_kv", "stacked_kv", "block_first"}) {
    for (uint32_t bpr : {1u, 2u}) {
      TestEngine engine;
      engine.engine_id = absl::StrCat("layout-", layout, "-", bpr);
      engine.layout = layout;
      engine.blocks_per_row = bpr;
      auto scheduler = OpenScheduler(engine);
      ASSERT_NE(scheduler, nullptr);
      auto worker = StartWorker(engine, 0);
      ASSERT_NE(worker, nullptr);
      ASSERT_TRUE(absl::StartsWith(worker->hello(), "registered slot=0 writer=1"))
          << worker->hello();
      RoundTrip(*scheduler, {worker.get()}, engine, job, 5);
      job += 10;
      auto stats = daemon_->EngineStats(engine.engine_id);
      ASSERT_TRUE(stats.ok()) << stats.status();
      EXPECT_EQ(stats->store_bytes(), 5 * bpr * engine.worker_bytes_per_block());
      EXPECT_EQ(stats->load_bytes(), 5 * bpr * engine.worker_bytes_per_block());
      EXPECT_EQ(stats->jobs_done(), 2u);
      EXPECT_EQ(stats->rows_ready(), 5u);
    }
  }
}

TEST_F(DaemonTest, Tp4WorkersUseNodeLocalSlotsAndAllVote) {
  TestEngine engine;
  engine.world_size = 4;
  auto scheduler = OpenScheduler(engine);
  ASSERT_NE(scheduler, nullptr);
  EXPECT_EQ(scheduler->geometry().num_copies, 4u);
  EXPECT_EQ(scheduler->geometry().row_bytes, 4 * engine.worker_bytes_per_block());
  std::vector<std::unique_ptr<WorkerProcess>> workers;
  for (uint32_t r = 0; r < 4; ++r) {
    workers.push_back(StartWorker(engine, r));
    ASSERT_TRUE(absl::StartsWith(workers.back()->hello(), absl::StrCat("registered slot=", r)))
        << workers.back()->hello();
  }
  // A job is not finished until every local worker voted.
  auto prepared = scheduler->PrepareStore({"vote"});
  ASSERT_TRUE(prepared.ok());
  for (int r = 0; r < 3; ++r) {
    ASSERT_EQ(workers[r]->Command(absl::StrCat("submit store 1 7 ", prepared->rows[0])),
              "submitted 1");
  }
  EXPECT_TRUE(absl::StartsWith(workers[0]->Command("wait 1 300"), "error 4 ")) << "finished early";
  ASSERT_EQ(workers[3]->Command(absl::StrCat("submit store 1 7 ", prepared->rows[0])),
            "submitted 1");
  for (auto& w : workers) {
    EXPECT_EQ(w->Command("wait 1 10000"), Finished(1, 4 * engine.worker_bytes_per_block()));
  }
  ASSERT_TRUE(scheduler->CompleteStore(prepared->keys, true).ok());
  // Every rank holds different bytes; each must get its own slot back.
  std::vector<WorkerProcess*> raw;
  for (auto& w : workers) raw.push_back(w.get());
  RoundTrip(*scheduler, raw, engine, 10, 6);
}

TEST_F(DaemonTest, ReplicatedMlaStoresOneCopyAndEveryRankLoadsIt) {
  TestEngine mla;
  mla.engine_id = "mla";
  mla.world_size = 2;
  mla.attention = "mla";
  TestEngine per_rank = mla;
  per_rank.engine_id = "mha";
  per_rank.attention = "mha";
  uint64_t job = 1;
  uint64_t store_bytes[2] = {0, 0};
  for (const TestEngine* engine : {&mla, &per_rank}) {
    auto scheduler = OpenScheduler(*engine);
    ASSERT_NE(scheduler, nullptr);
    const bool replicated = engine == &mla;
    EXPECT_EQ(scheduler->geometry().replicated, replicated);
    EXPECT_EQ(scheduler->geometry().num_copies, replicated ? 1u : 2u);
    auto w0 = StartWorker(*engine, 0, {"--rank_independent_data"});
    auto w1 = StartWorker(*engine, 1, {"--rank_independent_data"});
    EXPECT_EQ(w0->hello().substr(0, 27), "registered slot=0 writer=1 ");
    EXPECT_EQ(w1->hello().substr(0, 27),
              replicated ? "registered slot=0 writer=0 " : "registered slot=1 writer=1 ");
    RoundTrip(*scheduler, {w0.get(), w1.get()}, *engine, job, 8);
    job += 10;
    EXPECT_EQ(w0->Command("digest 3,5,7"), w1->Command("digest 3,5,7"));
    auto stats = daemon_->EngineStats(engine->engine_id);
    ASSERT_TRUE(stats.ok());
    store_bytes[replicated ? 0 : 1] = stats->store_bytes();
    // Every rank loads: load bytes are the same in both layouts.
    EXPECT_EQ(stats->load_bytes(), 2 * 8 * engine->worker_bytes_per_block());
  }
  EXPECT_EQ(store_bytes[0], 8 * mla.worker_bytes_per_block());
  EXPECT_EQ(store_bytes[0] * 2, store_bytes[1]);  // D2H traffic ÷ TP
}

TEST_F(DaemonTest, ReplicatedNonWriterVoteAloneNeverFinishesAStore) {
  TestEngine mla;
  mla.world_size = 2;
  mla.attention = "mla";
  auto scheduler = OpenScheduler(mla);
  auto w0 = StartWorker(mla, 0);
  auto w1 = StartWorker(mla, 1);
  auto prepared = scheduler->PrepareStore({"k"});
  ASSERT_TRUE(prepared.ok());
  ASSERT_EQ(w1->Command(absl::StrCat("submit store 5 1 ", prepared->rows[0])), "submitted 5");
  EXPECT_TRUE(absl::StartsWith(w1->Command("wait 5 500"), "error 4 "));
  auto stats = daemon_->EngineStats("it");
  EXPECT_EQ(stats->jobs_in_flight(), 1u);
  EXPECT_EQ(stats->store_bytes(), 0u);
  ASSERT_EQ(w0->Command(absl::StrCat("submit store 5 1 ", prepared->rows[0])), "submitted 5");
  EXPECT_EQ(w1->Command("wait 5 10000"), Finished(5, mla.worker_bytes_per_block()));
  EXPECT_EQ(w0->Command("wait 5 10000"), Finished(5, mla.worker_bytes_per_block()));
}

TEST_F(DaemonTest, DpReplicasGetSeparateRegionsWithTheFullBudget) {
  TestEngine dp0, dp1;
  dp0.world_size = dp1.world_size = 2;
  dp1.dp_rank = 1;
  auto s0 = OpenScheduler(dp0);
  auto s1 = OpenScheduler(dp1);
  ASSERT_NE(s0, nullptr);
  ASSERT_NE(s1, nullptr);
  EXPECT_EQ(s0->geometry().capacity_bytes, s1->geometry().capacity_bytes);
  EXPECT_EQ(s0->geometry().num_rows, dp0.budget_bytes / (2 * dp0.worker_bytes_per_block()));
  auto a0 = StartWorker(dp0, 0, {"--seed=11"});
  auto a1 = StartWorker(dp0, 1, {"--seed=11"});
  auto b0 = StartWorker(dp1, 0, {"--seed=22"});
  auto b1 = StartWorker(dp1, 1, {"--seed=22"});
  RoundTrip(*s0, {a0.get(), a1.get()}, dp0, 1, 4);
  RoundTrip(*s1, {b0.get(), b1.get()}, dp1, 1, 4);  // same job ids and rows: separate engines
  auto stats = daemon_->Stats();
  ASSERT_TRUE(stats.ok());
  ASSERT_EQ(stats->engines_size(), 2);
  EXPECT_EQ(stats->region_bytes(), 2 * s0->geometry().capacity_bytes);
}

TEST_F(DaemonTest, EvictionIsLeastRecentlyUsedAndPinnedRowsStay) {
  TestEngine engine;
  engine.budget_bytes = 4 * engine.worker_bytes_per_block();  // 4 rows
  auto scheduler = OpenScheduler(engine);
  ASSERT_EQ(scheduler->geometry().num_rows, 4u);
  auto prepared = scheduler->PrepareStore(Keys("k", 4));
  ASSERT_TRUE(prepared.ok());
  ASSERT_TRUE(client::StoreRows(daemon_->data_socket(), engine.Spec(), prepared->rows).ok());
  // One at a time, so k-0 is the oldest; within one call keys[0] would become the most recent.
  for (const std::string& key : prepared->keys)
    ASSERT_TRUE(scheduler->CompleteStore({key}, true).ok());
  ASSERT_TRUE(scheduler->Touch({"k-0"}).ok());  // k-1 is now the least recently used
  auto more = scheduler->PrepareStore({"new-0"});
  ASSERT_TRUE(more.ok()) << more.status();
  EXPECT_EQ(more->evicted_keys, std::vector<std::string>({"k-1"}));
  // Pin every remaining ready row: a store that needs an eviction is refused, nothing changes.
  ASSERT_TRUE(scheduler->PrepareLoad({"k-0", "k-2", "k-3"}).ok());
  auto refused = scheduler->PrepareStore({"new-1"});
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kResourceExhausted);
  auto states = scheduler->Lookup({"k-0", "k-2", "k-3", "new-0", "new-1"});
  ASSERT_TRUE(states.ok());
  EXPECT_EQ(*states, std::vector<client::KeyState>(
                         {client::KeyState::kHit, client::KeyState::kHit, client::KeyState::kHit,
                          client::KeyState::kHitPending, client::KeyState::kMiss}));
  auto stats = daemon_->EngineStats("it");
  EXPECT_EQ(stats->evictions(), 1u);
  EXPECT_EQ(stats->rows_reading(), 3u);
  EXPECT_EQ(stats->rows_writing(), 1u);
  EXPECT_EQ(stats->rows_free() + stats->rows_quarantined() + stats->rows_writing() +
                stats->rows_ready() + stats->rows_reading(),
            stats->num_rows());
}

TEST_F(DaemonTest, NodeCapIsEnforcedAndNothingIsAllocated) {
  TestEngine big;
  big.budget_bytes = uint64_t{512} << 20;  // above the 256 MiB node cap
  auto refused = SchedulerClient::Open(daemon_->data_socket(), big.Spec());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kResourceExhausted);
  TestEngine fits;
  fits.engine_id = "fits";
  fits.budget_bytes = uint64_t{200} << 20;
  ASSERT_NE(OpenScheduler(fits), nullptr);
  TestEngine second = fits;
  second.engine_id = "second";  // 200 + 200 > 256
  EXPECT_EQ(SchedulerClient::Open(daemon_->data_socket(), second.Spec()).status().code(),
            absl::StatusCode::kResourceExhausted);
  auto stats = daemon_->Stats();
  ASSERT_EQ(stats->engines_size(), 1);
  EXPECT_EQ(stats->region_bytes(), uint64_t{200} << 20);
}

TEST_F(DaemonTest, BadRequestsGetExactCodesAndChangeNothing) {
  TestEngine engine;
  auto scheduler = OpenScheduler(engine);
  auto worker = StartWorker(engine, 0);
  auto prepared = scheduler->PrepareStore({"a", "b"});
  ASSERT_TRUE(prepared.ok());
  const std::string rows = List(prepared->rows);
  auto code = [](const std::string& line) {
    std::vector<std::string> w = absl::StrSplit(line, ' ');
    return w.size() > 2 ? w[2] : line;
  };
  // block id >= registered blocks; row >= num_rows: OUT_OF_RANGE (11).
  EXPECT_EQ(code(worker->Command(absl::StrCat("store 1 1,64 ", rows))), "11");
  EXPECT_EQ(code(worker->Command("store 2 1,2 1,99999")), "11");
  // blocks do not match rows: INVALID_ARGUMENT (3).
  EXPECT_EQ(code(worker->Command(absl::StrCat("store 3 1 ", rows))), "3");
  // a row that is not WRITING (never prepared): FAILED_PRECONDITION (9).
  EXPECT_EQ(code(worker->Command("store 4 1 3")), "9");
  // load from rows that are not pinned for reading: FAILED_PRECONDITION.
  EXPECT_EQ(code(worker->Command(absl::StrCat("load 5 1,2 ", rows))), "9");
  // a good store, then the same job id again: ALREADY_EXISTS (6).
  EXPECT_EQ(worker->Command(absl::StrCat("store 6 1,2 ", rows)),
            Finished(6, 2 * engine.worker_bytes_per_block()));
  EXPECT_EQ(code(worker->Command(absl::StrCat("store 6 1,2 ", rows))), "6");
  auto stats = daemon_->EngineStats("it");
  EXPECT_EQ(stats->jobs_done(), 1u);
  EXPECT_EQ(stats->store_bytes(), 2 * engine.worker_bytes_per_block());

  // Scheduler side.
  EXPECT_EQ(scheduler->PrepareStore({}).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(scheduler->PrepareStore({std::string(257, 'k')}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(scheduler->PrepareStore({"dup", "dup"}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(scheduler->CompleteStore({"missing"}, true).code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(scheduler->PrepareLoad({"c"}).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(scheduler->CompleteLoad({"a"}).code(), absl::StatusCode::kFailedPrecondition);

  // A spec that differs from the engine's: FAILED_PRECONDITION with both in the message.
  TestEngine other = engine;
  other.blocks_per_row = 2;
  auto mismatch = SchedulerClient::Open(daemon_->data_socket(), other.Spec());
  EXPECT_EQ(mismatch.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(mismatch.status().message().find("existing"), std::string::npos);
  EXPECT_NE(mismatch.status().message().find("requested"), std::string::npos);
  auto mismatched_worker = StartWorker(other, 1);
  EXPECT_TRUE(absl::StartsWith(mismatched_worker->hello(), "refused 9 "))
      << mismatched_worker->hello();

  // A rejected topology never creates anything.
  TestEngine bad = engine;
  bad.engine_id = "bad";
  bad.world_size = 8;
  bad.local_world_size = 3;
  auto rejected = SchedulerClient::Open(daemon_->data_socket(), bad.Spec());
  EXPECT_EQ(rejected.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(common::ErrorReason(rejected.status()), common::reason::kSpecRule);
  EXPECT_EQ(common::ErrorInfoOf(rejected.status()).metadata.at("rule"),
            "local_world_size_divides_world_size");
  EXPECT_TRUE(absl::StartsWith(rejected.status().message(),
                               "rule local_world_size_divides_world_size: "))  // for operators
      << rejected.status();

  // The same mp_rank twice: ALREADY_EXISTS (6). Tensors with the wrong bytes per block:
  // INVALID_ARGUMENT.
  auto twin = StartWorker(engine, 0);
  EXPECT_TRUE(absl::StartsWith(twin->hello(), "refused 6 ")) << twin->hello();
  auto wrong_bytes = StartWorker(engine, 0, {"--layout=block_first", "--num_layers=2"});
  EXPECT_TRUE(absl::StartsWith(wrong_bytes->hello(), "refused ")) << wrong_bytes->hello();

  auto stats_after = daemon_->Stats();
  EXPECT_EQ(stats_after->engines_size(), 1);
}

TEST_F(DaemonTest, WorkerKilledMidJobFailsItsJobsAndOthersCarryOn) {
  TestEngine engine;
  engine.world_size = 2;
  engine.num_blocks = 4096;
  engine.budget_bytes = 64 << 20;
  auto scheduler = OpenScheduler(engine);
  auto w0 = StartWorker(engine, 0);
  auto w1 = StartWorker(engine, 1);
  auto prepared = scheduler->PrepareStore(Keys("big", 200));
  ASSERT_TRUE(prepared.ok()) << prepared.status();
  std::vector<uint64_t> blocks;
  for (uint64_t i = 0; i < 200; ++i) blocks.push_back(i);
  ASSERT_EQ(w0->Command(absl::StrCat("submit store 1 ", List(blocks), " ", List(prepared->rows))),
            "submitted 1");
  w1->process().Signal(SIGKILL);
  w1->process().Wait();
  std::string line = w0->Command("wait 1 20000");
  EXPECT_TRUE(absl::StartsWith(line, "finished 1 14 ")) << line;  // UNAVAILABLE
  EXPECT_NE(line.find("mp_rank 1"), std::string::npos) << line;
  ASSERT_TRUE(scheduler->CompleteStore(prepared->keys, false).ok());

  // The daemon keeps serving: a new worker takes the freed slot and the engine works again.
  auto w1b = StartWorker(engine, 1);
  ASSERT_TRUE(absl::StartsWith(w1b->hello(), "registered slot=1")) << w1b->hello();
  RoundTrip(*scheduler, {w0.get(), w1b.get()}, engine, 10, 4);
  auto stats = daemon_->EngineStats("it");
  EXPECT_EQ(stats->jobs_failed(), 1u);
  EXPECT_EQ(stats->workers(), 2u);
}

// Index calls larger than one request (here 3 keys) are split by the client with the semantics
// of one request: PrepareStore and PrepareLoad all or nothing, Touch keeps keys[0] most recent.
TEST_F(DaemonTest, IndexCallsLargerThanOneRequestAreSplit) {
  TestEngine engine;
  engine.engine_id = "split";
  engine.budget_bytes = 6 * engine.worker_bytes_per_block();  // 6 rows
  client::ClientOptions options;
  options.max_keys_per_request = 0;
  EXPECT_EQ(SchedulerClient::Open(daemon_->data_socket(), engine.Spec(), 0, options)
                .status()
                .code(),
            absl::StatusCode::kInvalidArgument);
  options.max_keys_per_request = 3;
  auto opened = SchedulerClient::Open(daemon_->data_socket(), engine.Spec(), 0, options);
  ASSERT_TRUE(opened.ok()) << opened.status();
  SchedulerClient& scheduler = **opened;
  auto rows_reading = [&] { return daemon_->EngineStats("split")->rows_reading(); };
  auto rows_free = [&] { return daemon_->EngineStats("split")->rows_free(); };

  // 8 new keys for 6 rows: the third request fails and the first two are undone.
  auto refused = scheduler.PrepareStore(Keys("k", 8));
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kResourceExhausted) << refused.status();
  EXPECT_EQ(rows_free(), 6u);
  // A key twice, in different requests: refused before anything is sent.
  std::vector<std::string> twice = Keys("k", 5);
  twice.push_back("k-0");
  EXPECT_EQ(scheduler.PrepareStore(twice).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(rows_free(), 6u);

  const std::vector<std::string> keys = Keys("k", 6);
  auto prepared = scheduler.PrepareStore(keys);
  ASSERT_TRUE(prepared.ok()) << prepared.status();
  EXPECT_EQ(prepared->keys, keys);
  ASSERT_EQ(prepared->rows.size(), 6u);
  ASSERT_TRUE(client::StoreRows(daemon_->data_socket(), engine.Spec(), prepared->rows).ok());
  ASSERT_TRUE(scheduler.CompleteStore(keys, true).ok());
  auto states = scheduler.Lookup(keys);
  ASSERT_TRUE(states.ok());
  EXPECT_EQ(*states, std::vector<client::KeyState>(6, client::KeyState::kHit));

  // A load whose last request fails unpins what the first one pinned.
  std::vector<std::string> load = keys;
  load.push_back("unknown");
  EXPECT_EQ(scheduler.PrepareLoad(load).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(rows_reading(), 0u);
  auto load_rows = scheduler.PrepareLoad(keys);
  ASSERT_TRUE(load_rows.ok());
  EXPECT_EQ(*load_rows, prepared->rows);
  EXPECT_EQ(rows_reading(), 6u);
  ASSERT_TRUE(scheduler.CompleteLoad(keys).ok());
  EXPECT_EQ(rows_reading(), 0u);

  // Touch over two requests: k-0 the most recent, k-5 the least.
  ASSERT_TRUE(scheduler.Touch(keys).ok());
  auto evicting = scheduler.PrepareStore({"x", "y"});
  ASSERT_TRUE(evicting.ok());
  EXPECT_EQ(evicting->evicted_keys, std::vector<std::string>({"k-5", "k-4"}));
}

TEST_F(DaemonTest, AdminDropAndCleanup) {
  TestEngine engine;
  auto scheduler = OpenScheduler(engine);
  auto prepared = scheduler->PrepareStore(Keys("k", 3));
  ASSERT_TRUE(prepared.ok());
  ASSERT_TRUE(client::StoreRows(daemon_->data_socket(), engine.Spec(), prepared->rows).ok());
  ASSERT_TRUE(scheduler->CompleteStore(prepared->keys, true).ok());
  auto stub = daemon_->AdminStub();
  {
    grpc::ClientContext context;
    v1::CleanupRequest request;
    request.set_reset_engine_id("it");
    v1::CleanupResponse response;
    ASSERT_TRUE(stub->Cleanup(&context, request, &response).ok());
    EXPECT_EQ(response.rows_reset(), 3u);
  }
  auto worker = StartWorker(engine, 0);
  {
    grpc::ClientContext context;
    v1::DropEngineRequest request;
    request.set_engine_id("it");
    v1::Empty response;
    EXPECT_EQ(stub->DropEngine(&context, request, &response).error_code(),
              grpc::StatusCode::FAILED_PRECONDITION);
  }
  {
    grpc::ClientContext context;
    v1::DropEngineRequest request;
    request.set_engine_id("it");
    request.set_force(true);
    v1::Empty response;
    EXPECT_TRUE(stub->DropEngine(&context, request, &response).ok());
  }
  // The worker's session was ended by the drop, and the worker hears why (SessionClosed), not
  // just that the call was cancelled: either the store is refused with the session's reason
  // ("error ABORTED: ..."), or — when the client had not yet read the SessionClosed when the
  // store was sent — the job's verdict carries it ("finished 1 10 0 ...", 10 = ABORTED).
  const std::string after_drop = worker->Command("store 1 1 1");
  EXPECT_NE(after_drop.find("engine dropped by an operator"), std::string::npos) << after_drop;
  EXPECT_TRUE(after_drop.find("error ABORTED: ") == 0 || after_drop.find("finished 1 10 ") == 0)
      << after_drop;
  EXPECT_EQ(scheduler->Lookup({"k-0"}).status().code(), absl::StatusCode::kNotFound);
  {
    grpc::ClientContext context;
    v1::DropEngineRequest request;
    request.set_engine_id("it");
    v1::Empty response;
    EXPECT_EQ(stub->DropEngine(&context, request, &response).error_code(),
              grpc::StatusCode::NOT_FOUND);
  }
  // The region is released once the dropped engine's sessions have ended (asynchronously).
  for (int i = 0; i < 100 && daemon_->Stats()->region_bytes() != 0; ++i) {
    absl::SleepFor(absl::Milliseconds(20));
  }
  EXPECT_EQ(daemon_->Stats()->region_bytes(), 0u);
  EXPECT_EQ(daemon_->Stop(), 0);
}

TEST_F(DaemonTest, VotesCountSlotsSoARankThatLeftIsNotCountedTwice) {
  // TP4 over two nodes, this node holds slots 0 and 1. Rank 1 votes and leaves; rank 3 (also
  // slot 1 here) joins and votes for the same job: slot 0 has still not voted.
  TestEngine engine;
  engine.world_size = 4;
  engine.local_world_size = 2;
  engine.rows_assigned_by_engine = true;
  auto w0 = StartWorker(engine, 0);
  auto w1 = StartWorker(engine, 1);
  ASSERT_EQ(w1->Command("submit store 1 4 9"), "submitted 1");
  // Leave only once rank 1's copy is done (its vote counted): leaving earlier fails the job.
  for (int i = 0; i < 500 && daemon_->EngineStats("it")->store_bytes() == 0; ++i) {
    absl::SleepFor(absl::Milliseconds(10));
  }
  ASSERT_EQ(daemon_->EngineStats("it")->store_bytes(), engine.worker_bytes_per_block());
  w1->Command("quit", 5);
  w1->process().Wait();
  auto w3 = StartWorker(engine, 3);
  ASSERT_TRUE(absl::StartsWith(w3->hello(), "registered slot=1")) << w3->hello();
  ASSERT_EQ(w3->Command("submit store 1 4 9"), "submitted 1");
  const std::string early = w3->Command("wait 1 300");
  EXPECT_TRUE(absl::StartsWith(early, "error 4 ")) << "finished without slot 0: " << early;
  ASSERT_EQ(w0->Command("submit store 1 4 9"), "submitted 1");
  EXPECT_TRUE(absl::StartsWith(w3->Command("wait 1 10000"), "finished 1 0 "));
}

class IdleTtlTest : public DaemonTest {
  std::vector<std::string> ExtraDaemonArgs() override { return {"--idle_engine_ttl_s=1"}; }
};

TEST_F(IdleTtlTest, EngineWithoutWorkersIsFreedAfterTtl) {
  TestEngine engine;
  auto scheduler = OpenScheduler(engine);
  {
    auto worker = StartWorker(engine, 0);
    ASSERT_EQ(daemon_->Stats()->engines_size(), 1);
  }
  for (int i = 0; i < 50 && daemon_->Stats()->engines_size() > 0; ++i) {
    absl::SleepFor(absl::Milliseconds(100));
  }
  EXPECT_EQ(daemon_->Stats()->engines_size(), 0);
  EXPECT_EQ(daemon_->Stats()->region_bytes(), 0u);
}

class JobTimeoutTest : public DaemonTest {
  std::vector<std::string> ExtraDaemonArgs() override { return {"--job_timeout_s=1"}; }
};

TEST_F(JobTimeoutTest, MissingVotesFailTheJobWithDeadlineExceeded) {
  TestEngine engine;
  engine.world_size = 2;
  auto scheduler = OpenScheduler(engine);
  auto w0 = StartWorker(engine, 0);
  auto w1 = StartWorker(engine, 1);
  auto prepared = scheduler->PrepareStore({"t"});
  ASSERT_EQ(w0->Command(absl::StrCat("submit store 1 2 ", prepared->rows[0])), "submitted 1");
  std::string line = w0->Command("wait 1 5000");
  EXPECT_TRUE(absl::StartsWith(line, "finished 1 4 ")) << line;  // DEADLINE_EXCEEDED
  // The late part gets the job's verdict, not a copy.
  line = w1->Command(absl::StrCat("store 1 2 ", prepared->rows[0]));
  EXPECT_TRUE(absl::StartsWith(line, "finished 1 4 ")) << line;
  // The failed store's row goes back to the pool.
  ASSERT_TRUE(scheduler->CompleteStore(prepared->keys, false).ok());
  EXPECT_EQ(daemon_->EngineStats("it")->rows_free(), scheduler->geometry().num_rows);
}

}  // namespace
}  // namespace kvoffload::testing

namespace kvoffload::testing {
namespace {

// A grace period long enough for a 512 MiB host copy under TSan on a loaded 2-core machine
// (the default 10 s was not, once): the test is about what happens within the grace period.
class ShutdownTest : public DaemonTest {
  std::vector<std::string> ExtraDaemonArgs() override {
    return {"--max_region_bytes=1GiB", "--shutdown_grace_s=60"};
  }
};

TEST_F(ShutdownTest, SigtermLetsRunningCopiesFinishAndFailsWaitingJobs) {
  TestEngine engine;
  engine.rows_assigned_by_engine = true;
  engine.num_layers = 16;
  engine.page_bytes = 32 << 10;  // 512 KiB blocks
  engine.num_blocks = 1024;      // a 512 MiB store: a copy that is surely running at SIGTERM
  engine.budget_bytes = uint64_t{1024} * 16 * (32 << 10);
  engine.layout = "stacked_kv";
  auto worker = StartWorker(engine, 0);
  ASSERT_NE(worker, nullptr);
  std::vector<uint64_t> blocks;
  for (uint64_t i = 0; i < 1024; ++i) blocks.push_back(i);
  ASSERT_EQ(worker->Command(absl::StrCat("submit store 1 ", List(blocks), " ", List(blocks))),
            "submitted 1");
  // Stopped only once the daemon holds the job (its one worker's part starts the copy): a
  // SIGTERM before the part is read ends the session with the part unread, and no verdict.
  for (int i = 0; i < 2000; ++i) {
    auto stats = daemon_->EngineStats(engine.engine_id);
    if (stats.ok() && stats->jobs_in_flight() == 1) break;
    absl::SleepFor(absl::Milliseconds(5));
  }
  std::thread stopper([&] { EXPECT_EQ(daemon_->Stop(), 0); });
  // The running copy finishes within the grace period and is reported as done.
  EXPECT_EQ(worker->Command("wait 1 90000", /*timeout_s=*/100),
            absl::StrCat("finished 1 0 ", 1024 * engine.worker_bytes_per_block()));
  stopper.join();
  // A job submitted now finds the session gone.
  EXPECT_TRUE(absl::StartsWith(worker->Command("store 2 0 0"), "error ")) << "daemon still up";
}

}  // namespace
}  // namespace kvoffload::testing
