// The cluster tier without its cluster: created while no node listens on the seeds' ports (it
// is an empty tier answering UNAVAILABLE at once), then the cluster started on those ports (the
// tier finds it by itself and serves it, no new tier); and a whole cluster killed and started
// again empty on the same ports mid-run (old records read as misses, never other bytes; new
// records are stored and served). A real Redis Cluster (testing/local_cluster.h); skips when
// redis-server is not installed.
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "daemon/tier/cluster/cluster_tier.h"
#include "daemon/tier/cluster/testing/local_cluster.h"
#include "daemon/tier/cluster/testing/sync_calls.h"
#include "gtest/gtest.h"

namespace kvoffload::tier::cluster {
namespace {

using testing::LocalCluster;
using testing::ReadSync;
using testing::RowBytes;
using testing::WriteSync;

constexpr uint64_t kNs = 0x0123456789abcdefull;
constexpr size_t kRow = 300 << 10;
constexpr int kNodes = 6;  // LocalCluster's default: 3 masters + 3 replicas
// A call with no node to ask answers at once; this is scheduling slack on a loaded CI machine.
constexpr absl::Duration kPrompt = absl::Milliseconds(300);
// Longer than a load of the slot map after max_refresh_backoff (below), with slack.
constexpr absl::Duration kBoundedWait = absl::Seconds(10);

ClusterTierOptions Options(const std::vector<int>& ports) {
  ClusterTierOptions o;
  for (int p : ports) o.seeds.push_back({"127.0.0.1", p});
  o.key_prefix = "kvo-reconnect";
  o.threads = 2;
  o.connections_per_node = 2;
  o.lookup_timeout = absl::Milliseconds(100);
  o.command_timeout = absl::Seconds(1);
  o.refresh_interval = absl::Milliseconds(20);
  o.max_refresh_backoff = absl::Milliseconds(200);
  return o;
}

std::vector<int> Ports(const LocalCluster& c) {
  std::vector<int> out;
  for (const LocalCluster::Node& n : c.nodes()) out.push_back(n.port);
  return out;
}

// Writes until OK (each failure UNAVAILABLE: the cluster not reachable yet or not yet routed),
// within kBoundedWait.
void WriteWhenBack(ClusterTier& tier, const std::string& key, const std::string& row) {
  const absl::Time deadline = absl::Now() + kBoundedWait;
  absl::Status s;
  do {
    s = WriteSync(tier, kNs, key, row);
    if (s.ok()) return;
    ASSERT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;
    absl::SleepFor(absl::Milliseconds(20));
  } while (absl::Now() < deadline);
  FAIL() << "no write succeeded within " << kBoundedWait << ": " << s;
}

// The tier as an empty one: Write, Read UNAVAILABLE and ContainsAll false, each promptly.
void ExpectEmptyAndUnavailable(ClusterTier& tier, const std::vector<std::string>& keys) {
  for (const std::string& key : keys) {
    absl::Time start = absl::Now();
    EXPECT_EQ(WriteSync(tier, kNs, key, RowBytes(99, kRow)).code(),
              absl::StatusCode::kUnavailable);
    EXPECT_LE(absl::Now() - start, kPrompt) << "a write waited for a cluster that is not there";
    std::string got;
    start = absl::Now();
    EXPECT_EQ(ReadSync(tier, kNs, key, got, kRow).status().code(),
              absl::StatusCode::kUnavailable);
    EXPECT_LE(absl::Now() - start, kPrompt) << "a read waited for a cluster that is not there";
  }
  const absl::Time start = absl::Now();
  EXPECT_EQ(tier.ContainsAll(kNs, keys), std::vector<bool>(keys.size(), false));
  EXPECT_LE(absl::Now() - start, absl::Milliseconds(100) + kPrompt);
}

TEST(ClusterReconnectTest, CreatedWithTheClusterDownItServesTheClusterOnceItStarts) {
  absl::StatusOr<std::vector<int>> ports = LocalCluster::FreePorts(kNodes);
  ASSERT_TRUE(ports.ok()) << ports.status();
  absl::StatusOr<std::unique_ptr<ClusterTier>> tier = ClusterTier::Create(Options(*ports));
  ASSERT_TRUE(tier.ok()) << tier.status();  // no seed answers: still a tier
  EXPECT_FALSE((*tier)->backend_stats().connected);
  EXPECT_EQ((*tier)->record_stats().reachable, 0u);

  ExpectEmptyAndUnavailable(**tier, {"a", "b"});
  RecordStoreStats s = (*tier)->record_stats();
  EXPECT_EQ(s.write_errors, 2u);
  EXPECT_EQ(s.read_errors, 2u);
  EXPECT_EQ(s.writes_ok + s.reads_ok + s.read_misses + s.read_corrupt, 0u);
  // The seeds are asked again in the background, backing off (20 ms doubling to 200 ms): about
  // 11 tries in 1.5 s; without the backoff, 75.
  const uint64_t failures_before = (*tier)->backend_stats().refresh_failures;
  EXPECT_GE(failures_before, 1u);
  absl::SleepFor(absl::Milliseconds(1500));
  const uint64_t tries = (*tier)->backend_stats().refresh_failures - failures_before;
  EXPECT_GE(tries, 3u);
  EXPECT_LE(tries, 16u);
  EXPECT_FALSE((*tier)->backend_stats().connected);

  testing::LocalClusterOptions lo;
  lo.ports = *ports;
  absl::StatusOr<std::unique_ptr<LocalCluster>> cluster = LocalCluster::Start(lo);
  if (!cluster.ok() && absl::IsFailedPrecondition(cluster.status())) {
    GTEST_SKIP() << "no Redis to test against: " << cluster.status().message();
  }
  ASSERT_TRUE(cluster.ok()) << cluster.status();

  // Found by the background retries alone: no call comes until the map is loaded.
  const absl::Time deadline = absl::Now() + kBoundedWait;
  while (!(*tier)->backend_stats().connected && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(10));
  }
  ASSERT_TRUE((*tier)->backend_stats().connected);
  EXPECT_EQ((*tier)->record_stats().reachable, 1u);

  const std::string row = RowBytes(1, kRow);
  WriteWhenBack(**tier, "a", row);
  std::string got;
  absl::StatusOr<uint64_t> n = ReadSync(**tier, kNs, "a", got, kRow);
  ASSERT_TRUE(n.ok()) << n.status();
  EXPECT_EQ(*n, kRow);
  EXPECT_TRUE(got == row);
  EXPECT_EQ((*tier)->ContainsAll(kNs, {"a", "b"}), (std::vector<bool>{true, false}));
  EXPECT_EQ(ReadSync(**tier, kNs, "b", got, kRow).status().code(), absl::StatusCode::kNotFound);
  // A second client on the same cluster sees the record: it is in Redis, not in the tier.
  absl::StatusOr<std::unique_ptr<ClusterTier>> other = ClusterTier::Create(Options(*ports));
  ASSERT_TRUE(other.ok()) << other.status();
  n = ReadSync(**other, kNs, "a", got, kRow);
  ASSERT_TRUE(n.ok()) << n.status();
  EXPECT_TRUE(got == row);
}

TEST(ClusterReconnectTest, AfterTheWholeClusterRestartsOldRecordsMissAndNewOnesAreServed) {
  absl::StatusOr<std::unique_ptr<LocalCluster>> cluster = LocalCluster::Start({});
  if (!cluster.ok() && absl::IsFailedPrecondition(cluster.status())) {
    GTEST_SKIP() << "no Redis to test against: " << cluster.status().message();
  }
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  absl::StatusOr<std::unique_ptr<ClusterTier>> tier =
      ClusterTier::Create(Options(Ports(**cluster)));
  ASSERT_TRUE(tier.ok()) << tier.status();
  ASSERT_TRUE((*tier)->backend_stats().connected);

  constexpr int kOld = 6;
  std::vector<std::string> old_keys;
  for (int i = 0; i < kOld; ++i) {
    old_keys.push_back(absl::StrCat("old-", i));
    ASSERT_EQ(WriteSync(**tier, kNs, old_keys.back(), RowBytes(i, kRow)), absl::OkStatus());
  }

  // Every node gone: the tier is empty and refuses writes, promptly once the nodes' connects
  // are refused (the first calls may meet the dead connections).
  ASSERT_TRUE((*cluster)->Stop().ok());
  for (int i = 0; i < 3; ++i) {
    std::string got;
    absl::StatusOr<uint64_t> n = ReadSync(**tier, kNs, old_keys[i], got, kRow);
    EXPECT_EQ(n.status().code(), absl::StatusCode::kUnavailable) << n.status();
  }
  ExpectEmptyAndUnavailable(**tier, old_keys);

  // Started again on the same ports, empty.
  ASSERT_TRUE((*cluster)->Restart().ok());
  const std::string row = RowBytes(100, kRow);
  WriteWhenBack(**tier, "new", row);
  std::string got;
  absl::StatusOr<uint64_t> n = ReadSync(**tier, kNs, "new", got, kRow);
  ASSERT_TRUE(n.ok()) << n.status();
  EXPECT_TRUE(got == row);
  // The old records went with the old cluster: misses, never bytes.
  for (const std::string& key : old_keys) {
    n = ReadSync(**tier, kNs, key, got, kRow);
    EXPECT_EQ(n.status().code(), absl::StatusCode::kNotFound) << key << ": " << n.status();
  }
  std::vector<std::string> all = old_keys;
  all.push_back("new");
  std::vector<bool> expected(kOld, false);
  expected.push_back(true);
  EXPECT_EQ((*tier)->ContainsAll(kNs, all), expected);
  EXPECT_TRUE((*tier)->backend_stats().connected);
  EXPECT_EQ((*tier)->record_stats().read_corrupt, 0u);
}

}  // namespace
}  // namespace kvoffload::tier::cluster
