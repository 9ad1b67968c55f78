#include "daemon/index/commit_ledger.h"

#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace kvoffload::daemon {
namespace {

using ::testing::IsEmpty;
using ::testing::UnorderedElementsAre;

TEST(CommitLedgerTest, KeepsTheFirstCommitTimeOfARow) {
  const absl::Time t0 = absl::FromUnixSeconds(100);
  CommitLedger commits;
  commits.Record(1, t0);
  commits.Record(1, t0 + absl::Seconds(50));  // a second commit: no-op
  EXPECT_TRUE(commits.Contains(1));
  EXPECT_EQ(commits.pending(), 1u);
  EXPECT_THAT(commits.RecordedBefore(t0 + absl::Seconds(1)), UnorderedElementsAre(1));
}

TEST(CommitLedgerTest, RecordedBeforeIsStrictlyBeforeTheCutoff) {
  const absl::Time t0 = absl::FromUnixSeconds(100);
  CommitLedger commits;
  commits.Record(1, t0);
  commits.Record(2, t0 + absl::Seconds(10));
  commits.Record(3, t0 + absl::Seconds(20));
  EXPECT_THAT(commits.RecordedBefore(t0), IsEmpty());
  EXPECT_THAT(commits.RecordedBefore(t0 + absl::Seconds(10)), UnorderedElementsAre(1));
  EXPECT_THAT(commits.RecordedBefore(absl::InfiniteFuture()), UnorderedElementsAre(1, 2, 3));
}

TEST(CommitLedgerTest, ForgetsRowsAndCountsWhatWasDropped) {
  CommitLedger commits;
  commits.Record(4, absl::UnixEpoch());
  commits.Forget(4);
  commits.Forget(5);  // not recorded: ignored
  EXPECT_FALSE(commits.Contains(4));
  EXPECT_EQ(commits.pending(), 0u);
  EXPECT_EQ(commits.dropped(), 0u);
  commits.CountDropped(2);
  commits.CountDropped(1);
  EXPECT_EQ(commits.dropped(), 3u);
}

}  // namespace
}  // namespace kvoffload::daemon
