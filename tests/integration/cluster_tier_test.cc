// The cluster tier end to end: a real Redis Cluster on loopback (3 masters + 3 replicas, Debian's
// redis-server, started and killed by pid) and two kvoffloadd processes with their own runtime
// directories — two nodes. Node A stores a prefix; node B, which never saw it, finds it in the
// cluster, promotes it and loads it byte-exact; B's restart keeps it usable; a value corrupted in
// Redis is a miss, never served; with a master killed, lookups stay within their bound and what
// is loaded is byte-exact, and after the failover the prefix is served again. A cluster down when
// the daemons start, or restarted empty under them, is found again without a daemon restart:
// rows spill and promote byte-exact once it is back, and rows lost with it are misses.
#include <hiredis/hiredis.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "client/kvoffload_client.h"
#include "daemon/tier/cluster/testing/local_cluster.h"
#include "gtest/gtest.h"
#include "tests/integration/engine_fixture.h"
#include "tests/integration/harness.h"

namespace kvoffload::testing {
namespace {

using client::KeyState;
using client::SchedulerClient;
using tier::cluster::testing::LocalCluster;

constexpr int kRows = 4;
const std::vector<uint64_t> kBlocks = {3, 5, 7, 9};

// One node: a daemon with the cluster tier, its scheduler and one worker.
struct Node {
  std::unique_ptr<DaemonProcess> daemon;
  std::unique_ptr<SchedulerClient> scheduler;
  std::unique_ptr<WorkerProcess> worker;
};

class ClusterTierTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto cluster = LocalCluster::Start({});
    if (!cluster.ok() && absl::IsFailedPrecondition(cluster.status())) {
      GTEST_SKIP() << cluster.status();
    }
    ASSERT_TRUE(cluster.ok()) << cluster.status();
    cluster_ = std::move(*cluster);
    engine_.budget_bytes = kRows * engine_.worker_bytes_per_block();
  }

  Node StartNode() {
    Node node;
    auto daemon = DaemonProcess::Start({"--cluster_tier=" + cluster_->url(),
                                        "--cluster_tier_lookup_timeout_ms=200",
                                        "--cluster_tier_command_timeout_ms=1000",
                                        "--tier_promote_timeout_ms=5000"});
    EXPECT_TRUE(daemon.ok()) << daemon.status();
    if (!daemon.ok()) return node;
    node.daemon = std::move(*daemon);
    auto scheduler = SchedulerClient::Open(node.daemon->data_socket(), engine_.Spec());
    EXPECT_TRUE(scheduler.ok()) << scheduler.status();
    if (scheduler.ok()) node.scheduler = std::move(*scheduler);
    auto worker = WorkerProcess::Start(node.daemon->data_socket(), engine_.WorkerArgs(0));
    EXPECT_TRUE(worker.ok()) << worker.status();
    if (worker.ok()) node.worker = std::move(*worker);
    return node;
  }

  v1::TierStats ClusterStats(Node& node) {
    auto stats = node.daemon->Stats();
    EXPECT_TRUE(stats.ok()) << stats.status();
    for (const v1::TierStats& t : stats->tiers()) {
      if (t.name() == "cluster") return t;
    }
    ADD_FAILURE() << "no cluster tier in Stats";
    return {};
  }

  static std::vector<uint64_t> Blocks(size_t n) {
    return std::vector<uint64_t>(kBlocks.begin(), kBlocks.begin() + n);
  }

  // Stores `keys` through the node's worker (the region's rows become READY and are queued for
  // the tiers).
  void StoreRows(Node& node, const std::vector<std::string>& keys, uint64_t job) {
    const std::vector<uint64_t> blocks = Blocks(keys.size());
    auto prepared = node.scheduler->PrepareStore(keys);
    ASSERT_TRUE(prepared.ok()) << prepared.status();
    ASSERT_EQ(node.worker->Command(absl::StrCat("submit store ", job, " ", List(blocks), " ",
                                                List(prepared->rows))),
              absl::StrCat("submitted ", job));
    const std::string line = node.worker->Command(absl::StrCat("wait ", job, " 30000"));
    ASSERT_TRUE(absl::StartsWith(line, absl::StrCat("finished ", job, " 0 "))) << line;
    ASSERT_TRUE(node.scheduler->CompleteStore(prepared->keys, true).ok());
  }

  // Waits for the cluster tier's spills to reach `before.spills_ok() + count` (true) or for one
  // more to fail (false).
  bool AwaitSpills(Node& node, const v1::TierStats& before, uint64_t count) {
    const absl::Time deadline = absl::Now() + absl::Seconds(20);
    while (absl::Now() < deadline) {
      const v1::TierStats now = ClusterStats(node);
      if (now.spills_failed() > before.spills_failed()) return false;
      if (now.spills_ok() >= before.spills_ok() + count) {
        EXPECT_EQ(now.spills_ok(), before.spills_ok() + count);
        return true;
      }
      absl::SleepFor(absl::Milliseconds(5));
    }
    ADD_FAILURE() << "spills did not end in 20 s";
    return false;
  }

  void Store(Node& node, const std::vector<std::string>& keys, uint64_t job) {
    const v1::TierStats before = ClusterStats(node);
    StoreRows(node, keys, job);
    ASSERT_TRUE(AwaitSpills(node, before, keys.size()));
  }

  // Stores one probe row after another (jobs from `job` on) until one is spilled to the cluster:
  // the node's tier has found the cluster again. Within 30 s.
  void AwaitClusterBack(Node& node, uint64_t& job) {
    const absl::Time deadline = absl::Now() + absl::Seconds(30);
    while (absl::Now() < deadline) {
      const v1::TierStats before = ClusterStats(node);
      StoreRows(node, {absl::StrCat("probe-", job)}, job);
      ++job;
      if (::testing::Test::HasFatalFailure()) return;
      if (AwaitSpills(node, before, 1)) return;
      absl::SleepFor(absl::Milliseconds(200));
    }
    FAIL() << "the node's cluster tier did not spill again within 30 s";
  }

  // Looks up until every key is a hit (true) or, unless `patient`, one is a miss after the
  // promotions ended (false); each lookup answered within `bound`.
  bool LookupUntilHit(Node& node, const std::vector<std::string>& keys, absl::Duration bound,
                      bool patient = false) {
    const absl::Time deadline = absl::Now() + absl::Seconds(20);
    while (absl::Now() < deadline) {
      const absl::Time start = absl::Now();
      auto states = node.scheduler->Lookup(keys);
      EXPECT_LE(absl::Now() - start, bound) << "a lookup waited past the tier's bound";
      EXPECT_TRUE(states.ok()) << states.status();
      if (!states.ok()) return false;
      bool all = true, miss = false;
      for (KeyState s : *states) {
        all = all && s == KeyState::kHit;
        miss = miss || s == KeyState::kMiss;
      }
      if (all) return true;
      if (miss && !patient && ClusterStats(node).promotions_in_flight() == 0) return false;
      absl::SleepFor(absl::Milliseconds(5));
    }
    if (!patient) ADD_FAILURE() << "promotions did not end in 20 s";
    return false;
  }

  void LoadAndVerify(Node& node, const std::vector<std::string>& keys, uint64_t job) {
    const std::vector<uint64_t> blocks = Blocks(keys.size());
    ASSERT_EQ(node.worker->Command(absl::StrCat("clobber ", List(blocks))), "ok");
    auto rows = node.scheduler->PrepareLoad(keys);
    ASSERT_TRUE(rows.ok()) << rows.status();
    ASSERT_EQ(node.worker->Command(absl::StrCat("submit load ", job, " ", List(blocks), " ",
                                                List(*rows))),
              absl::StrCat("submitted ", job));
    const std::string line = node.worker->Command(absl::StrCat("wait ", job, " 30000"));
    ASSERT_TRUE(absl::StartsWith(line, absl::StrCat("finished ", job, " 0 "))) << line;
    EXPECT_EQ(node.worker->Command(absl::StrCat("verify ", List(blocks))), "verify ok");
    ASSERT_TRUE(node.scheduler->CompleteLoad(keys).ok());
  }

  // Every value of the tier, on every master, overwritten with bytes that are not a record.
  void CorruptEveryValue() {
    for (int i = 0; i < static_cast<int>(cluster_->nodes().size()); ++i) {
      auto reply = cluster_->Command(i, {"KEYS", "kvo/*"});
      ASSERT_TRUE(reply.ok()) << reply.status();
      const redisReply* keys = reply->get();
      ASSERT_EQ(keys->type, REDIS_REPLY_ARRAY);
      for (size_t k = 0; k < keys->elements; ++k) {
        const std::string key(keys->element[k]->str, keys->element[k]->len);
        ASSERT_TRUE(cluster_->Command(i, {"SET", key, "not a record"}).ok());
      }
    }
  }

  TestEngine engine_;
  std::unique_ptr<LocalCluster> cluster_;
};

TEST_F(ClusterTierTest, APrefixStoredOnOneNodeIsAHitOnAnotherAndSurvivesItsRestart) {
  const std::vector<std::string> prefix = Keys("shared", kRows);
  Node a = StartNode();
  Store(a, prefix, 1);
  Node b = StartNode();
  auto first = b.scheduler->Lookup(prefix);
  ASSERT_TRUE(first.ok());
  for (KeyState s : *first) EXPECT_NE(s, KeyState::kMiss);  // found in the cluster
  ASSERT_TRUE(LookupUntilHit(b, prefix, absl::Seconds(1)));
  LoadAndVerify(b, prefix, 2);
  EXPECT_EQ(ClusterStats(b).promotions_ok(), static_cast<uint64_t>(kRows));
  EXPECT_EQ(ClusterStats(b).read_corrupt(), 0u);
  // B restarts (an empty region): the cluster still serves it.
  b.worker.reset();
  b.scheduler.reset();
  ASSERT_EQ(b.daemon->Stop(), 0);
  b = StartNode();
  ASSERT_TRUE(LookupUntilHit(b, prefix, absl::Seconds(1)));
  LoadAndVerify(b, prefix, 3);
}

TEST_F(ClusterTierTest, ACorruptedValueIsAMissNeverServed) {
  const std::vector<std::string> prefix = Keys("corrupt", 2);
  Node a = StartNode();
  Store(a, prefix, 1);
  CorruptEveryValue();
  Node b = StartNode();
  EXPECT_FALSE(LookupUntilHit(b, prefix, absl::Seconds(1)));
  auto states = b.scheduler->Lookup(prefix);
  ASSERT_TRUE(states.ok());
  EXPECT_EQ((*states)[0], KeyState::kMiss);
  const v1::TierStats stats = ClusterStats(b);
  EXPECT_EQ(stats.promotions_ok(), 0u);
  EXPECT_GE(stats.promotions_failed() + stats.read_corrupt(), 1u);
}

TEST_F(ClusterTierTest, WithAMasterDownLookupsStayBoundedAndTheFailoverServesAgain) {
  const std::vector<std::string> prefix = Keys("failover", kRows);
  Node a = StartNode();
  Store(a, prefix, 1);
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(cluster_->AwaitReplicated(i, absl::Seconds(10)).ok());
  ASSERT_TRUE(cluster_->Kill(0).ok());
  Node b = StartNode();
  // Meanwhile: misses or hits, each lookup within its bound; whatever loads is byte-exact.
  if (LookupUntilHit(b, prefix, absl::Seconds(1))) LoadAndVerify(b, prefix, 2);
  ASSERT_TRUE(cluster_->AwaitHealthy(absl::Seconds(30)).ok());
  ASSERT_EQ(b.scheduler->PrepareStore({"evict-0", "evict-1", "evict-2", "evict-3"}).status().code(),
            absl::StatusCode::kOk);  // the prefix leaves the region (the stores are abandoned)
  ASSERT_TRUE(b.scheduler->CompleteStore({"evict-0", "evict-1", "evict-2", "evict-3"}, false).ok());
  // The client finds the new master (MOVED, a slot-map refresh) within a few lookups.
  ASSERT_TRUE(LookupUntilHit(b, prefix, absl::Seconds(1), /*patient=*/true));
  LoadAndVerify(b, prefix, 3);
}

TEST_F(ClusterTierTest, DaemonsStartedWithTheClusterDownUseItOnceItIsUp) {
  ASSERT_TRUE(cluster_->Stop().ok());
  Node a = StartNode();  // starts all the same, with the cluster tier (empty)
  Node b = StartNode();
  ASSERT_NE(a.worker, nullptr);
  ASSERT_NE(b.worker, nullptr);
  ASSERT_EQ(ClusterStats(a).name(), "cluster");
  ASSERT_EQ(ClusterStats(b).name(), "cluster");
  const std::vector<std::string> prefix = Keys("late", kRows);
  // While the cluster is down: lookups miss within their bound, spills fail (counted).
  const absl::Time start = absl::Now();
  auto states = b.scheduler->Lookup(prefix);
  EXPECT_LE(absl::Now() - start, absl::Seconds(1));
  ASSERT_TRUE(states.ok()) << states.status();
  for (KeyState s : *states) EXPECT_EQ(s, KeyState::kMiss);
  const v1::TierStats before = ClusterStats(a);
  StoreRows(a, {"while-down"}, 1);
  EXPECT_FALSE(AwaitSpills(a, before, 1));
  EXPECT_EQ(ClusterStats(a).spills_ok(), 0u);
  EXPECT_GE(ClusterStats(a).spills_failed(), 1u);

  // The cluster comes up (on the seeds' ports): A spills, B promotes, byte-exact, no restart.
  ASSERT_TRUE(cluster_->Restart().ok());
  uint64_t job = 2;
  AwaitClusterBack(a, job);
  Store(a, prefix, job++);
  ASSERT_TRUE(LookupUntilHit(b, prefix, absl::Seconds(1), /*patient=*/true));
  LoadAndVerify(b, prefix, 1);
  EXPECT_EQ(ClusterStats(b).promotions_ok(), static_cast<uint64_t>(kRows));
  EXPECT_EQ(ClusterStats(b).read_corrupt(), 0u);
}

TEST_F(ClusterTierTest, AfterTheClusterRestartsEmptyOldRowsMissAndNewRowsSpillAgain) {
  const std::vector<std::string> old_prefix = Keys("before", kRows);
  Node a = StartNode();
  Node b = StartNode();
  ASSERT_NE(a.worker, nullptr);
  ASSERT_NE(b.worker, nullptr);
  Store(a, old_prefix, 1);
  // Every node killed and started again, empty, on the same ports, while both daemons run.
  ASSERT_TRUE(cluster_->Restart().ok());
  // B never held the old rows: they were only in the cluster, and went with it.
  EXPECT_FALSE(LookupUntilHit(b, old_prefix, absl::Seconds(1)));
  auto states = b.scheduler->Lookup(old_prefix);
  ASSERT_TRUE(states.ok()) << states.status();
  EXPECT_EQ((*states)[0], KeyState::kMiss);
  EXPECT_EQ(ClusterStats(b).promotions_ok(), 0u);

  uint64_t job = 2;
  AwaitClusterBack(a, job);
  const std::vector<std::string> new_prefix = Keys("after", kRows);
  Store(a, new_prefix, job++);
  ASSERT_TRUE(LookupUntilHit(b, new_prefix, absl::Seconds(1), /*patient=*/true));
  LoadAndVerify(b, new_prefix, 1);
  EXPECT_EQ(ClusterStats(b).promotions_ok(), static_cast<uint64_t>(kRows));
  EXPECT_EQ(ClusterStats(b).read_corrupt(), 0u);
  states = b.scheduler->Lookup({old_prefix[0]});
  ASSERT_TRUE(states.ok()) << states.status();
  EXPECT_EQ((*states)[0], KeyState::kMiss);
}

}  // namespace
}  // namespace kvoffload::testing
