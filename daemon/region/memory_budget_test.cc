#include "daemon/region/memory_budget.h"

#include <cstdint>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "gtest/gtest.h"

namespace kvoffload::daemon {
namespace {

TEST(MemoryBudgetTest, ReservesUpToTheCap) {
  MemoryBudget budget(1000);
  EXPECT_EQ(budget.cap(), 1000u);
  EXPECT_TRUE(budget.Reserve(600, "a").ok());
  EXPECT_TRUE(budget.Reserve(400, "b").ok());
  EXPECT_EQ(budget.reserved(), 1000u);
  EXPECT_EQ(budget.remaining(), 0u);
  EXPECT_TRUE(budget.Reserve(0, "empty").ok());
}

TEST(MemoryBudgetTest, RefusesWhatDoesNotFitAndReservesNothing) {
  MemoryBudget budget(1000);
  ASSERT_TRUE(budget.Reserve(700, "a").ok());
  absl::Status status = budget.Reserve(301, "engine-b/dp0");
  EXPECT_EQ(status.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(status.message(),
            "engine-b/dp0 needs 301 bytes but only 300 of the node cap 1000 remain");
  EXPECT_EQ(budget.reserved(), 700u);
  EXPECT_TRUE(budget.Reserve(300, "c").ok());
}

TEST(MemoryBudgetTest, HugeRequestsDoNotOverflow) {
  MemoryBudget budget(UINT64_MAX);
  ASSERT_TRUE(budget.Reserve(UINT64_MAX - 5, "a").ok());
  EXPECT_EQ(budget.Reserve(10, "b").code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(budget.reserved(), UINT64_MAX - 5);
}

TEST(MemoryBudgetTest, ReleaseGivesBytesBack) {
  MemoryBudget budget(100);
  ASSERT_TRUE(budget.Reserve(100, "a").ok());
  budget.Release(40);
  EXPECT_EQ(budget.reserved(), 60u);
  EXPECT_TRUE(budget.Reserve(40, "b").ok());
}

TEST(MemoryBudgetDeathTest, ReleasingMoreThanReservedAborts) {
  MemoryBudget budget(100);
  ASSERT_TRUE(budget.Reserve(10, "a").ok());
  EXPECT_DEATH(budget.Release(11), "");
}

TEST(MemoryBudgetTest, ConcurrentReservationsNeverExceedTheCap) {
  constexpr int kThreads = 8;
  constexpr int kAttempts = 1000;
  MemoryBudget budget(kThreads * kAttempts / 2);
  std::vector<std::thread> threads;
  std::vector<int> granted(kThreads, 0);
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kAttempts; ++i) {
        if (budget.Reserve(1, "x").ok()) ++granted[t];
      }
    });
  }
  for (std::thread& t : threads) t.join();
  int total = 0;
  for (int g : granted) total += g;
  EXPECT_EQ(total, kThreads * kAttempts / 2);
  EXPECT_EQ(budget.reserved(), budget.cap());
}

TEST(MemoryReservationTest, ReleasesOnDestruction) {
  MemoryBudget budget(100);
  {
    auto reservation = MemoryReservation::Reserve(&budget, 70, "a");
    ASSERT_TRUE(reservation.ok()) << reservation.status();
    EXPECT_EQ(reservation->bytes(), 70u);
    EXPECT_EQ(budget.reserved(), 70u);
  }
  EXPECT_EQ(budget.reserved(), 0u);
}

TEST(MemoryReservationTest, FailedReservationHoldsNothing) {
  MemoryBudget budget(100);
  auto reservation = MemoryReservation::Reserve(&budget, 101, "a");
  EXPECT_EQ(reservation.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(budget.reserved(), 0u);
}

TEST(MemoryReservationTest, MoveTransfersTheBytes) {
  MemoryBudget budget(100);
  auto first = MemoryReservation::Reserve(&budget, 30, "a");
  ASSERT_TRUE(first.ok());
  MemoryReservation moved(std::move(*first));
  EXPECT_EQ(first->bytes(), 0u);  // NOLINT(bugprone-use-after-move)
  EXPECT_EQ(moved.bytes(), 30u);
  EXPECT_EQ(budget.reserved(), 30u);

  auto second = MemoryReservation::Reserve(&budget, 20, "b");
  ASSERT_TRUE(second.ok());
  EXPECT_EQ(budget.reserved(), 50u);
  moved = std::move(*second);  // the 30 bytes go back, the 20 move over
  EXPECT_EQ(budget.reserved(), 20u);
  EXPECT_EQ(moved.bytes(), 20u);

  moved.Release();
  EXPECT_EQ(budget.reserved(), 0u);
  EXPECT_EQ(moved.bytes(), 0u);
  moved.Release();  // idempotent
  EXPECT_EQ(budget.reserved(), 0u);
}

}  // namespace
}  // namespace kvoffload::daemon
