// The disk tier end to end, on the host backend: the real daemon binary with --disk_tier_path, a
// real worker process for the bytes, the C++ client for the scheduler. A prefix evicted from the
// region is found on disk, promoted and loaded byte-exact; it survives a daemon restart (a new
// daemon, an empty region, the same disk); `cleanup reset` and `drop` forget it on disk too.
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "client/kvoffload_client.h"
#include "gtest/gtest.h"
#include "tests/integration/engine_fixture.h"
#include "tests/integration/harness.h"

namespace kvoffload::testing {
namespace {

using client::KeyState;
using client::SchedulerClient;

constexpr int kRows = 4;

class DiskTierTest : public ::testing::Test {
 protected:
  void SetUp() override {
    tier_dir_ = ::testing::TempDir() + "/disk_tier_e2e";
    ASSERT_EQ(std::system(("rm -rf " + tier_dir_ + " && mkdir -p " + tier_dir_).c_str()), 0);
    engine_.budget_bytes = kRows * engine_.worker_bytes_per_block();  // 4 rows of 32 KiB
    StartDaemon();
  }

  void StartDaemon() {
    auto daemon = DaemonProcess::Start(
        {"--disk_tier_path=" + tier_dir_, "--disk_tier_bytes=4MiB",
         absl::StrCat("--disk_tier_row_bytes=", engine_.worker_bytes_per_block()),
         "--tier_promote_timeout_ms=5000"});
    ASSERT_TRUE(daemon.ok()) << daemon.status();
    daemon_ = std::move(*daemon);
    auto scheduler = SchedulerClient::Open(daemon_->data_socket(), engine_.Spec());
    ASSERT_TRUE(scheduler.ok()) << scheduler.status();
    scheduler_ = std::move(*scheduler);
    auto worker = WorkerProcess::Start(daemon_->data_socket(), engine_.WorkerArgs(0));
    ASSERT_TRUE(worker.ok()) << worker.status();
    worker_ = std::move(*worker);
  }

  void StopDaemon() {
    worker_.reset();
    scheduler_.reset();
    ASSERT_EQ(daemon_->Stop(), 0);
    daemon_.reset();
  }

  // Stores `keys` from GPU blocks `blocks` (the worker's pattern is per block) with job `job`.
  void Store(const std::vector<std::string>& keys, const std::vector<uint64_t>& blocks,
             uint64_t job) {
    auto prepared = scheduler_->PrepareStore(keys);
    ASSERT_TRUE(prepared.ok()) << prepared.status();
    ASSERT_EQ(prepared->rows.size(), keys.size());
    ASSERT_EQ(worker_->Command(absl::StrCat("submit store ", job, " ", List(blocks), " ",
                                            List(prepared->rows))),
              absl::StrCat("submitted ", job));
    const std::string line = worker_->Command(absl::StrCat("wait ", job, " 30000"));
    ASSERT_TRUE(absl::StartsWith(line, absl::StrCat("finished ", job, " 0 "))) << line;
    ASSERT_TRUE(scheduler_->CompleteStore(prepared->keys, true).ok());
    spilled_ += prepared->keys.size();
  }

  // Looks `keys` up as vLLM's scheduler does, step after step, until every one is a hit;
  // returns the states of the first lookup.
  std::vector<KeyState> LookupUntilHit(const std::vector<std::string>& keys) {
    auto first = scheduler_->Lookup(keys);
    EXPECT_TRUE(first.ok()) << first.status();
    if (!first.ok()) return {};
    const absl::Time deadline = absl::Now() + absl::Seconds(20);
    for (;;) {
      auto states = scheduler_->Lookup(keys);
      EXPECT_TRUE(states.ok()) << states.status();
      if (!states.ok()) return *first;
      bool all = true;
      for (KeyState s : *states) all = all && s == KeyState::kHit;
      if (all) break;
      for (KeyState s : *states) EXPECT_NE(s, KeyState::kMiss) << "a promotion was lost";
      if (absl::Now() > deadline) {
        ADD_FAILURE() << "promotion did not finish in 20 s";
        break;
      }
      absl::SleepFor(absl::Milliseconds(5));  // one engine step
    }
    return *first;
  }

  // Loads `keys` into `blocks` (clobbered first) and checks the worker's pattern.
  void LoadAndVerify(const std::vector<std::string>& keys, const std::vector<uint64_t>& blocks,
                     uint64_t job) {
    ASSERT_EQ(worker_->Command(absl::StrCat("clobber ", List(blocks))), "ok");
    auto rows = scheduler_->PrepareLoad(keys);
    ASSERT_TRUE(rows.ok()) << rows.status();
    ASSERT_EQ(worker_->Command(absl::StrCat("submit load ", job, " ", List(blocks), " ",
                                            List(*rows))),
              absl::StrCat("submitted ", job));
    const std::string line = worker_->Command(absl::StrCat("wait ", job, " 30000"));
    ASSERT_TRUE(absl::StartsWith(line, absl::StrCat("finished ", job, " 0 "))) << line;
    EXPECT_EQ(worker_->Command(absl::StrCat("verify ", List(blocks))), "verify ok");
    ASSERT_TRUE(scheduler_->CompleteLoad(keys).ok());
  }

  // Waits until `n` spills have been written: a row is not evictable while the tier reads it
  // (at most --tier_spills_in_flight rows of the node), and this region has only four.
  void WaitSpilled(uint64_t n) {
    const absl::Time deadline = absl::Now() + absl::Seconds(20);
    while (DiskStats().spills_ok() < n && absl::Now() < deadline) {
      absl::SleepFor(absl::Milliseconds(2));
    }
    ASSERT_EQ(DiskStats().spills_ok(), n);
  }

  // Fills the region with other keys from other blocks, evicting everything before (once it
  // was written to disk), and waits for their spills too, so that promotions find rows.
  void EvictAll(uint64_t job) {
    WaitSpilled(spilled_);
    Store(Keys("other", kRows, static_cast<int>(job)), {40, 41, 42, 43}, job);
    WaitSpilled(spilled_);
  }

  v1::TierStats DiskStats() {
    auto stats = daemon_->Stats();
    EXPECT_TRUE(stats.ok()) << stats.status();
    for (const v1::TierStats& t : stats->tiers()) {
      if (t.name() == "disk") return t;
    }
    ADD_FAILURE() << "no disk tier in Stats";
    return {};
  }

  TestEngine engine_;
  uint64_t spilled_ = 0;  // rows stored since the daemon started: each is spilled once
  std::string tier_dir_;
  std::unique_ptr<DaemonProcess> daemon_;
  std::unique_ptr<SchedulerClient> scheduler_;
  std::unique_ptr<WorkerProcess> worker_;
};

const std::vector<uint64_t> kBlocks = {3, 5, 7, 9};

TEST_F(DiskTierTest, AnEvictedPrefixIsPromotedFromDiskAndLoadsByteExact) {
  const std::vector<std::string> prefix = Keys("prefix", kRows);
  Store(prefix, kBlocks, 1);
  EvictAll(2);
  auto states = scheduler_->Lookup(prefix);
  ASSERT_TRUE(states.ok());
  // Found on disk: pending while promoted (or already READY on a fast disk), never a miss.
  for (KeyState s : *states) EXPECT_NE(s, KeyState::kMiss);
  LookupUntilHit(prefix);
  LoadAndVerify(prefix, kBlocks, 3);
  const v1::TierStats disk = DiskStats();
  EXPECT_EQ(disk.promotions_ok(), static_cast<uint64_t>(kRows));
  EXPECT_EQ(disk.promotions_failed(), 0u);
  EXPECT_GE(disk.spills_ok(), static_cast<uint64_t>(2 * kRows));
  EXPECT_EQ(disk.lookup_tier_hits(), static_cast<uint64_t>(kRows));
  EXPECT_EQ(disk.read_corrupt(), 0u);
}

TEST_F(DiskTierTest, OnlyThePrefixBeforeTheFirstKeyHeldNowhereIsPromoted) {
  Store(Keys("p", 2), {3, 5}, 1);
  EvictAll(2);
  auto states = scheduler_->Lookup({"p-0", "never-stored", "p-1"});
  ASSERT_TRUE(states.ok());
  EXPECT_NE((*states)[0], KeyState::kMiss);
  EXPECT_EQ((*states)[1], KeyState::kMiss);
  EXPECT_EQ((*states)[2], KeyState::kMiss);
  LookupUntilHit({"p-0"});
  EXPECT_EQ(DiskStats().promotions_started(), 1u);  // p-1 was not read: it follows a miss
  // Asked for on its own, p-1 is a prefix of one, and is promoted.
  LookupUntilHit({"p-1"});
  EXPECT_EQ(DiskStats().promotions_started(), 2u);
}

TEST_F(DiskTierTest, RowsOnDiskOutliveTheDaemon) {
  const std::vector<std::string> prefix = Keys("kept", kRows);
  Store(prefix, kBlocks, 1);
  WaitSpilled(kRows);
  StopDaemon();
  StartDaemon();  // a new daemon: an empty region, the same disk
  auto states = scheduler_->Lookup(prefix);
  ASSERT_TRUE(states.ok());
  for (KeyState s : *states) EXPECT_NE(s, KeyState::kMiss);
  LookupUntilHit(prefix);
  LoadAndVerify(prefix, kBlocks, 2);
}

TEST_F(DiskTierTest, CleanupResetAndDropForgetTheRowsOnDiskToo) {
  const std::vector<std::string> prefix = Keys("gone", 2);
  Store(prefix, {3, 5}, 1);
  auto stub = daemon_->AdminStub();
  WaitSpilled(2);
  {
    grpc::ClientContext context;
    v1::CleanupRequest request;
    request.set_reset_engine_id("it");
    v1::CleanupResponse response;
    ASSERT_TRUE(stub->Cleanup(&context, request, &response).ok());
    EXPECT_EQ(response.rows_reset(), 2u);
  }
  spilled_ = 2;
  auto states = scheduler_->Lookup(prefix);
  ASSERT_TRUE(states.ok());
  EXPECT_EQ(*states, std::vector<KeyState>({KeyState::kMiss, KeyState::kMiss}));
  EXPECT_EQ(DiskStats().promotions_started(), 0u);
  // Stored again, then the engine dropped: a new engine of the same id finds nothing on disk.
  Store(prefix, {3, 5}, 2);
  WaitSpilled(4);
  worker_.reset();
  scheduler_.reset();
  {
    grpc::ClientContext context;
    v1::DropEngineRequest request;
    request.set_engine_id("it");
    request.set_force(true);
    v1::Empty response;
    ASSERT_TRUE(stub->DropEngine(&context, request, &response).ok());
  }
  auto scheduler = SchedulerClient::Open(daemon_->data_socket(), engine_.Spec());
  ASSERT_TRUE(scheduler.ok()) << scheduler.status();
  auto again = (*scheduler)->Lookup(prefix);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(*again, std::vector<KeyState>({KeyState::kMiss, KeyState::kMiss}));
}

}  // namespace
}  // namespace kvoffload::testing
