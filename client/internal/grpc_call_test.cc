#include "client/internal/grpc_call.h"

#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"

namespace kvoffload::client::internal {
namespace {

// Waits until the thread sleeps until `t` (it has seen the deadline armed last).
void WaitSleepingUntil(const Watchdog& w, absl::Time t) {
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (w.TEST_sleeping_until() != t && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(1));
  }
  ASSERT_EQ(w.TEST_sleeping_until(), t);
}

// Waits (at most 10 s: slow machines, sanitizers) until a deadline has fired.
bool WaitFired(const Watchdog& w) {
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (!w.TEST_fired() && absl::Now() < deadline) absl::SleepFor(absl::Milliseconds(1));
  return w.TEST_fired();
}

TEST(WatchdogTest, ArmingAndDisarmingInTheSteadyStateWakesNobody) {
  grpc::ClientContext context;
  Watchdog w(&context);
  const absl::Time first = absl::Now() + absl::Hours(1);
  w.Arm(first);  // the first deadline: the thread sleeps until it
  ASSERT_NO_FATAL_FAILURE(WaitSleepingUntil(w, first));
  const uint64_t before = w.TEST_wakeups();
  for (int i = 0; i < 1000; ++i) {
    w.Arm(absl::Now() + absl::Hours(1));  // later than the one the thread sleeps until
    EXPECT_FALSE(w.Disarm());
  }
  absl::SleepFor(absl::Milliseconds(50));
  // A condition variable may wake spuriously now and then; a wake-up per arm would be 1000.
  EXPECT_LE(w.TEST_wakeups() - before, 3u);
  EXPECT_EQ(w.TEST_sleeping_until(), first);
}

TEST(WatchdogTest, APassedDeadlineCancelsTheCall) {
  grpc::ClientContext context;
  Watchdog w(&context);
  w.Arm(absl::Now() + absl::Milliseconds(20));
  EXPECT_TRUE(WaitFired(w));
  EXPECT_TRUE(w.Disarm());
  EXPECT_TRUE(w.Disarm());  // ever, on this call
}

TEST(WatchdogTest, AnEarlierDeadlineWakesTheThreadSleepingUntilALaterOne) {
  grpc::ClientContext context;
  Watchdog w(&context);
  const absl::Time later = absl::Now() + absl::Hours(1);
  w.Arm(later);
  ASSERT_NO_FATAL_FAILURE(WaitSleepingUntil(w, later));
  w.Arm(absl::Now() + absl::Milliseconds(20));
  EXPECT_TRUE(WaitFired(w));
  EXPECT_TRUE(w.Disarm());
}

TEST(WatchdogTest, ADeadlineMovedLaterIsKeptNotFiredAtTheEarlierOne) {
  grpc::ClientContext context;
  Watchdog w(&context);
  // The first deadline leaves the test 2 s to arm the later one (slow machines, sanitizers).
  const absl::Time first = absl::Now() + absl::Seconds(2);
  w.Arm(first);
  ASSERT_NO_FATAL_FAILURE(WaitSleepingUntil(w, first));
  const absl::Time later = absl::Now() + absl::Hours(1);
  w.Arm(later);  // the thread still sleeps until the first deadline, then finds this one
  ASSERT_NO_FATAL_FAILURE(WaitSleepingUntil(w, later));
  EXPECT_FALSE(w.TEST_fired());
  EXPECT_FALSE(w.Disarm());
}

TEST(WatchdogTest, ADisarmedDeadlineNeverFires) {
  grpc::ClientContext context;
  Watchdog w(&context);
  w.Arm(absl::Now() + absl::Seconds(1));
  EXPECT_FALSE(w.Disarm());
  absl::SleepFor(absl::Milliseconds(1200));
  EXPECT_FALSE(w.Disarm());
}

}  // namespace
}  // namespace kvoffload::client::internal
