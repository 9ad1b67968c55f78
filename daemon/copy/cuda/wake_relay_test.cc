#include "daemon/copy/cuda/wake_relay.h"

#include <atomic>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace kvoffload::daemon::cuda {
namespace {

TEST(WakeRelayTest, AFiredFunctionWakesTheHolder) {
  int wakes = 0;
  WakeRelay* relay = WakeRelay::Create([&wakes] { ++wakes; });
  relay->Arm();
  relay->Arm();
  EXPECT_EQ(relay->pending(), 2);
  WakeRelay::Fire(relay);
  EXPECT_EQ(wakes, 1);
  relay->Disarm();  // a launch that failed wakes nobody
  EXPECT_EQ(wakes, 1);
  EXPECT_EQ(relay->pending(), 0);
  relay->Detach();  // nothing pending: deleted here (ASan/LSan see a leak or a double free)
}

TEST(WakeRelayTest, FunctionsStillQueuedAfterDetachWakeNobodyAndTheLastDeletesIt) {
  int wakes = 0;
  WakeRelay* relay = WakeRelay::Create([&wakes] { ++wakes; });
  relay->Arm();
  relay->Arm();
  relay->Detach();  // the holder is gone; two functions are still queued
  WakeRelay::Fire(relay);
  EXPECT_EQ(wakes, 0);
  relay->Disarm();  // the last one: deletes the relay
  EXPECT_EQ(wakes, 0);
}

TEST(WakeRelayTest, ConcurrentFiresAndDetachLoseNoWakeAndFreeOnce) {
  // Under TSan and ASan: functions firing on other threads while the holder detaches.
  for (int round = 0; round < 50; ++round) {
    std::atomic<int> wakes{0};
    WakeRelay* relay = WakeRelay::Create([&wakes] { wakes.fetch_add(1); });
    constexpr int kFunctions = 8;
    for (int i = 0; i < kFunctions; ++i) relay->Arm();
    std::vector<std::thread> streams;
    for (int i = 0; i < kFunctions; ++i) streams.emplace_back([relay] { WakeRelay::Fire(relay); });
    const int before_detach = wakes.load();
    relay->Detach();
    const int at_detach = wakes.load();
    for (auto& t : streams) t.join();
    // No wake after Detach returned.
    EXPECT_EQ(wakes.load(), at_detach);
    EXPECT_LE(before_detach, at_detach);
    EXPECT_LE(at_detach, kFunctions);
  }
}

}  // namespace
}  // namespace kvoffload::daemon::cuda
