#include "daemon/copy/cuda/poll_pacing.h"

#include "gtest/gtest.h"

namespace kvoffload::daemon::cuda {
namespace {

const absl::Time kStart = absl::FromUnixSeconds(1000);
const absl::Duration kFloor = absl::Microseconds(10);

TEST(NextPollTest, ShortJobsPollAtTheFloor) {
  EXPECT_EQ(NextPoll(kStart, kStart, kFloor), kStart + kFloor);
  const absl::Time now = kStart + absl::Microseconds(500);
  EXPECT_EQ(NextPoll(kStart, now, kFloor), now + kFloor);
  // A clock that went backwards counts as no time at all.
  EXPECT_EQ(NextPoll(kStart, kStart - absl::Seconds(1), kFloor),
            kStart - absl::Seconds(1) + kFloor);
}

TEST(NextPollTest, TheStepGrowsWithTheJobsAgeUpToTheCap) {
  const absl::Time now = kStart + absl::Microseconds(10240);  // 10.24 ms: a 40 µs step
  EXPECT_EQ(NextPoll(kStart, now, kFloor), now + absl::Microseconds(40));
  const absl::Time late = kStart + absl::Seconds(1);  // 3.9 ms, capped at 1 ms
  EXPECT_EQ(NextPoll(kStart, late, kFloor), late + absl::Milliseconds(1));
  // A floor above the cap wins.
  EXPECT_EQ(NextPoll(kStart, late, absl::Milliseconds(5)), late + absl::Milliseconds(5));
}

// The queries of a 78 ms job (the 4 GiB job of the CPU-per-job table): about 1,100, not 7,800,
// and the last one at most 1/256 of the job late.
TEST(NextPollTest, ALongJobIsQueriedAboutAThousandTimes) {
  const absl::Duration job = absl::Milliseconds(78);
  int queries = 0;
  absl::Time t = kStart;
  while (t < kStart + job) {
    t = NextPoll(kStart, t, kFloor);
    ++queries;
  }
  EXPECT_GT(queries, 900);
  EXPECT_LT(queries, 1300);
  EXPECT_LE(t - (kStart + job), job / kElapsedFraction);
}

}  // namespace
}  // namespace kvoffload::daemon::cuda
