#include "daemon/engine/retired_jobs.h"

#include "absl/status/status.h"
#include "gtest/gtest.h"

namespace kvoffload::daemon {
namespace {

TEST(RetiredJobsTest, RemembersTheLastOutcomesAndForgetsTheOldestFirst) {
  RetiredJobs retired(2);
  EXPECT_EQ(retired.Find(1), nullptr);
  retired.Remember(1, absl::OkStatus(), {0});
  retired.Remember(2, absl::DeadlineExceededError("late"), {0, 1});
  ASSERT_NE(retired.Find(2), nullptr);
  EXPECT_EQ(retired.Find(2)->status.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_EQ(retired.Find(2)->submitted, (std::set<uint32_t>{0, 1}));
  retired.Remember(3, absl::OkStatus(), {});
  EXPECT_EQ(retired.Find(1), nullptr);  // the oldest went
  EXPECT_NE(retired.Find(2), nullptr);
  EXPECT_NE(retired.Find(3), nullptr);
  EXPECT_EQ(retired.size(), 2u);
}

TEST(RetiredJobsTest, TheFirstOutcomeOfAnIdStays) {
  RetiredJobs retired(4);
  retired.Remember(7, absl::UnavailableError("worker left"), {1});
  retired.Remember(7, absl::OkStatus(), {0, 1});
  ASSERT_NE(retired.Find(7), nullptr);
  EXPECT_EQ(retired.Find(7)->status.code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(retired.size(), 1u);
}

TEST(RetiredJobsTest, CapacityZeroRemembersNothing) {
  RetiredJobs retired(0);
  retired.Remember(1, absl::OkStatus(), {});
  EXPECT_EQ(retired.Find(1), nullptr);
}

}  // namespace
}  // namespace kvoffload::daemon
