// The cluster tier while a master fails: killed (SIGKILL), then another one hung (SIGSTOP).
// Meanwhile every call answers within its bound (a miss: NOT_FOUND or UNAVAILABLE, or the exact
// bytes), none serves a wrong byte, and once the replica has taken over the tier serves every
// record again without being restarted. Own 3+3 cluster (testing/local_cluster.h); skips when
// redis-server is not installed.
#include <hiredis/hiredis.h>

#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "daemon/tier/cluster/cluster_tier.h"
#include "daemon/tier/cluster/key_slot.h"
#include "daemon/tier/cluster/testing/local_cluster.h"
#include "daemon/tier/cluster/testing/sync_calls.h"
#include "gtest/gtest.h"

namespace kvoffload::tier::cluster {
namespace {

using testing::LocalCluster;
using testing::Outcome;
using testing::RowBytes;

constexpr uint64_t kNs = 0xFA11;
constexpr int kRows = 36;
constexpr size_t kRow = 128u << 10;
// What a call may take beyond its configured bound: thread wake-ups and the checksum on a
// loaded 2-core CI machine (TSan included).
constexpr absl::Duration kSlack = absl::Milliseconds(300);
// The longest the test waits for the cluster and the tier to recover from one failure.
constexpr absl::Duration kRecoveryLimit = absl::Seconds(20);

struct Round {
  int ok = 0;
  int misses = 0;  // NOT_FOUND or UNAVAILABLE
  int contained = 0;
};

class ClusterFailoverTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<std::unique_ptr<LocalCluster>> c = LocalCluster::Start({});
    if (absl::IsFailedPrecondition(c.status())) {
      GTEST_SKIP() << "no Redis to test against: " << c.status().message();
    }
    ASSERT_TRUE(c.ok()) << c.status();
    cluster_ = *std::move(c);
    options_.seeds = cluster_->seeds();
    options_.key_prefix = "kvo-failover";
    options_.connect_timeout = absl::Milliseconds(100);
    options_.command_timeout = absl::Milliseconds(400);
    options_.lookup_timeout = absl::Milliseconds(100);
    options_.down_backoff = absl::Milliseconds(100);
    options_.refresh_interval = absl::Milliseconds(50);
    options_.threads = 4;
    options_.connections_per_node = 2;
    absl::StatusOr<std::unique_ptr<ClusterTier>> t = ClusterTier::Create(options_);
    ASSERT_TRUE(t.ok()) << t.status();
    tier_ = *std::move(t);
    for (int i = 0; i < kRows; ++i) {
      keys_.push_back(absl::StrCat("row-", i));
      rows_.push_back(RowBytes(i, kRow));
    }
  }

  int MasterOfKey(int row) {
    absl::StatusOr<int> m = cluster_->MasterOf(KeySlot(tier_->ValueKey(kNs, keys_[row], 0)));
    EXPECT_TRUE(m.ok()) << m.status();
    return m.ok() ? *m : -1;
  }

  // One pass over every row: a ContainsAll, then Reads in waves of `threads` (so no Read waits
  // in the queue and each one's time is its own), checking bounds and bytes.
  Round Pass() {
    Round r;
    const absl::Time asked = absl::Now();
    std::vector<bool> found = tier_->ContainsAll(kNs, keys_);
    EXPECT_LE(absl::Now() - asked, options_.lookup_timeout + kSlack) << "ContainsAll too slow";
    for (bool f : found) r.contained += f;
    std::vector<std::string> dst(kRows, std::string(kRow, '\0'));
    for (int first = 0; first < kRows; first += options_.threads) {
      const int last = std::min(kRows, first + options_.threads);
      std::vector<std::shared_ptr<Outcome<absl::StatusOr<uint64_t>>>> outs;
      std::vector<absl::Time> started;
      std::vector<absl::Time> finished(last - first);
      absl::Mutex time_mu;
      for (int i = first; i < last; ++i) {
        auto out = std::make_shared<Outcome<absl::StatusOr<uint64_t>>>();
        outs.push_back(out);
        started.push_back(absl::Now());
        absl::Time* end = &finished[i - first];
        EXPECT_EQ(tier_->Read(kNs, keys_[i], dst[i].data(), kRow,
                              [out, end, &time_mu](absl::StatusOr<uint64_t> n) {
                                {
                                  absl::MutexLock lock(&time_mu);
                                  *end = absl::Now();
                                }
                                out->Set(std::move(n));
                              }),
                  absl::OkStatus());
      }
      for (int i = first; i < last; ++i) {
        absl::StatusOr<uint64_t> n = outs[i - first]->Await();
        absl::MutexLock lock(&time_mu);
        EXPECT_LE(finished[i - first] - started[i - first], options_.command_timeout + kSlack)
            << "Read of " << keys_[i] << " past its bound: " << n.status();
        if (n.ok()) {
          ++r.ok;
          EXPECT_EQ(*n, kRow);
          EXPECT_TRUE(dst[i] == rows_[i]) << "wrong bytes served for " << keys_[i];
        } else {
          EXPECT_TRUE(absl::IsNotFound(n.status()) || absl::IsUnavailable(n.status()))
              << n.status();
          ++r.misses;
        }
      }
    }
    return r;
  }

  // After a failure: passes until one is complete again. Returns whether one saw misses first
  // and one then served everything.
  void AwaitRecovery(const char* what) {
    const absl::Time failed = absl::Now();
    bool saw_miss = false;
    bool recovered = false;
    int passes = 0;
    while (absl::Now() - failed < kRecoveryLimit) {
      const Round r = Pass();
      ++passes;
      if (r.misses > 0) saw_miss = true;
      if (saw_miss && r.ok == kRows && r.contained == kRows) {
        recovered = true;
        break;
      }
    }
    EXPECT_TRUE(saw_miss) << what << ": no pass saw the failed master's rows missing";
    EXPECT_TRUE(recovered) << what << ": the tier did not serve every row again within "
                           << kRecoveryLimit << " (" << passes << " passes)";
    std::cerr << what << ": recovered after " << (absl::Now() - failed) << ", " << passes
              << " passes\n";
  }

  void WriteAll() {
    for (int i = 0; i < kRows; ++i) {
      ASSERT_EQ(testing::WriteSync(*tier_, kNs, keys_[i], rows_[i]), absl::OkStatus());
    }
    for (int n = 0; n < static_cast<int>(cluster_->nodes().size()); ++n) {
      if (cluster_->nodes()[n].pid < 0) continue;
      absl::StatusOr<Reply> role = cluster_->Command(n, {"ROLE"});
      ASSERT_TRUE(role.ok()) << role.status();
      if (std::string((*role)->element[0]->str) != "master") continue;
      // Every record is on the replicas before a master fails (else it may be lost: a miss).
      ASSERT_EQ(cluster_->AwaitReplicated(n, absl::Seconds(10)), absl::OkStatus());
    }
  }

  ClusterTierOptions options_;
  std::unique_ptr<LocalCluster> cluster_;
  std::unique_ptr<ClusterTier> tier_;
  std::vector<std::string> keys_;
  std::vector<std::string> rows_;
};

TEST_F(ClusterFailoverTest, KilledThenHungMasterMissesWithinBoundsAndRecovers) {
  WriteAll();
  const Round before = Pass();
  ASSERT_EQ(before.ok, kRows);
  ASSERT_EQ(before.contained, kRows);

  // 1. A master killed mid-run: its replica takes over after cluster-node-timeout.
  const int killed = MasterOfKey(0);
  ASSERT_GE(killed, 0);
  ASSERT_EQ(cluster_->Kill(killed), absl::OkStatus());
  AwaitRecovery("master killed");
  const int promoted = MasterOfKey(0);
  EXPECT_NE(promoted, killed);

  // Writes work again too (to every master, the promoted one included).
  for (int i = 0; i < kRows; ++i) rows_[i] = RowBytes(1000 + i, kRow);
  WriteAll();

  // 2. Another master hung (it accepts connections, answers nothing): every call to it runs
  //    into its timeout, then its replica takes over.
  int hung_row = -1;
  for (int i = 0; i < kRows && hung_row < 0; ++i) {
    if (MasterOfKey(i) != promoted) hung_row = i;
  }
  ASSERT_GE(hung_row, 0);
  const int hung = MasterOfKey(hung_row);
  ASSERT_EQ(cluster_->Freeze(hung), absl::OkStatus());
  AwaitRecovery("master hung");
  EXPECT_NE(MasterOfKey(hung_row), hung);

  const RecordStoreStats s = tier_->record_stats();
  EXPECT_GT(s.read_errors + s.read_misses, 0u);
  EXPECT_EQ(s.read_corrupt, 0u);
  const KvBackendStats b = tier_->backend_stats();
  EXPECT_GT(b.refreshes, 1u);
  std::cerr << "connects " << b.connects << ", connect failures " << b.connect_failures
            << ", broken " << b.broken << ", redirects " << b.redirects << ", slot maps "
            << b.refreshes << "\n";
}

}  // namespace
}  // namespace kvoffload::tier::cluster
