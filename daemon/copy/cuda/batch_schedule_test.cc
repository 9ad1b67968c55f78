// The copy-engine path's batch sizes and the per-job timing line, without a GPU.
#include "daemon/copy/cuda/batch_schedule.h"

#include <vector>

#include "daemon/copy/cuda/job_times.h"
#include "gtest/gtest.h"

namespace kvoffload::daemon::cuda {
namespace {

std::vector<size_t> Take(BatchSchedule s, int n) {
  std::vector<size_t> out;
  for (int i = 0; i < n; ++i) out.push_back(s.Next());
  return out;
}

TEST(BatchScheduleTest, DoublesFromTheFirstBatchUpToTheMax) {
  EXPECT_EQ(Take(BatchSchedule(8, 4096), 12),
            (std::vector<size_t>{8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 4096, 4096}));
}

TEST(BatchScheduleTest, ClampsAtAMaxThatIsNoPowerOfTwoTimesTheFirst) {
  EXPECT_EQ(Take(BatchSchedule(3, 20), 5), (std::vector<size_t>{3, 6, 12, 20, 20}));
  EXPECT_EQ(Take(BatchSchedule(1, 1), 3), (std::vector<size_t>{1, 1, 1}));
}

TEST(BatchScheduleTest, ZeroOrAFirstAboveTheMaxMeansEveryBatchAtTheMax) {
  EXPECT_EQ(Take(BatchSchedule(0, 4096), 3), (std::vector<size_t>{4096, 4096, 4096}));
  EXPECT_EQ(Take(BatchSchedule(9000, 4096), 2), (std::vector<size_t>{4096, 4096}));
}

// A 512 MiB job of 256 copies of 2 MiB: six calls (8+16+32+64+128 = 248, then the last 8)
// instead of one, the first returning after 8 descriptors.
TEST(BatchScheduleTest, CallsOfAJobOf256Copies) {
  BatchSchedule s(8, 4096);
  size_t left = 256;
  std::vector<size_t> calls;
  while (left > 0) {
    const size_t n = std::min(left, s.Next());
    calls.push_back(n);
    left -= n;
  }
  EXPECT_EQ(calls, (std::vector<size_t>{8, 16, 32, 64, 128, 8}));
}

TEST(JobTimesTest, DescribesEachStepInMicroseconds) {
  JobTimes t;
  t.received = 1'000'000;
  t.planned = 1'003'000;
  t.enqueue = 1'003'500;
  t.first = 1'015'500;
  t.enqueued = 1'313'500;
  t.observed = 10'813'500;
  t.reported = 10'834'500;
  t.copies = 256;
  t.batches = 6;
  EXPECT_EQ(DescribeJobTimes(t, "store", 536870912, true),
            "job timing: store bytes=536870912 copies=256 batches=6 plan_us=3.0 wait_us=0.5 "
            "first_us=12.0 enqueue_us=310.0 copy_us=9500.0 verdict_us=21.0 total_us=9834.5 ok=1 "
            "received_ns=1000000 reported_ns=10834500");
}

TEST(JobTimesTest, AJobRefusedBeforeItsCopyHasOnlyItsPlanAndVerdict) {
  JobTimes t;
  t.received = 5'000;
  t.planned = 7'000;
  t.reported = 10'000;
  EXPECT_EQ(DescribeJobTimes(t, "load", 4096, false),
            "job timing: load bytes=4096 copies=0 batches=0 plan_us=2.0 wait_us=-1.0 "
            "first_us=-1.0 enqueue_us=-1.0 copy_us=-1.0 verdict_us=3.0 total_us=5.0 ok=0 "
            "received_ns=5000 reported_ns=10000");
}

TEST(JobTimesTest, TheClockNeverReadsZero) { EXPECT_NE(JobClockNanos(), 0); }

}  // namespace
}  // namespace kvoffload::daemon::cuda
