#include "daemon/copy/cuda/issue_pool.h"

#include <atomic>
#include <set>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"

namespace kvoffload::daemon::cuda {
namespace {

TEST(IssuePoolTest, RunsEveryTaskOnceAndTheFirstOnTheCaller) {
  IssuePool pool(3);
  std::vector<std::atomic<int>> ran(8);
  std::thread::id first;
  std::vector<std::function<void()>> tasks;
  tasks.push_back([&] {
    first = std::this_thread::get_id();
    ++ran[0];
  });
  for (int i = 1; i < 8; ++i) tasks.push_back([&ran, i] { ++ran[i]; });
  pool.Run(std::move(tasks));
  EXPECT_EQ(first, std::this_thread::get_id());
  for (auto& r : ran) EXPECT_EQ(r.load(), 1);
}

TEST(IssuePoolTest, TasksRunInParallelOnTheHelpers) {
  IssuePool pool(3);
  // Four tasks that each wait until all four have started: only parallel threads finish.
  std::atomic<int> started{0};
  absl::Mutex mu;
  std::set<std::thread::id> threads;
  std::vector<std::function<void()>> tasks;
  for (int i = 0; i < 4; ++i) {
    tasks.push_back([&] {
      {
        absl::MutexLock lock(&mu);
        threads.insert(std::this_thread::get_id());
      }
      ++started;
      const absl::Time deadline = absl::Now() + absl::Seconds(10);
      while (started.load() < 4 && absl::Now() < deadline) std::this_thread::yield();
    });
  }
  pool.Run(std::move(tasks));
  EXPECT_EQ(started.load(), 4);
  EXPECT_EQ(threads.size(), 4u);
}

TEST(IssuePoolTest, WithoutHelpersTheCallerRunsEverything) {
  IssuePool pool(0);
  std::set<std::thread::id> threads;
  std::vector<std::function<void()>> tasks;
  for (int i = 0; i < 5; ++i) tasks.push_back([&] { threads.insert(std::this_thread::get_id()); });
  pool.Run(std::move(tasks));
  EXPECT_EQ(threads, std::set<std::thread::id>{std::this_thread::get_id()});
}

TEST(IssuePoolTest, ConcurrentCallersEachGetTheirOwnTasksDone) {
  IssuePool pool(2);
  std::vector<std::thread> callers;
  std::vector<std::atomic<int>> sums(6);
  for (int c = 0; c < 6; ++c) {
    callers.emplace_back([&pool, &sums, c] {
      for (int round = 0; round < 50; ++round) {
        std::vector<std::function<void()>> tasks;
        for (int i = 0; i < 5; ++i) tasks.push_back([&sums, c] { ++sums[c]; });
        pool.Run(std::move(tasks));
        EXPECT_EQ(sums[c].load(), 5 * (round + 1));  // every task of this Run has returned
      }
    });
  }
  for (std::thread& t : callers) t.join();
  for (auto& s : sums) EXPECT_EQ(s.load(), 250);
}

TEST(IssuePoolTest, AnEmptyRunReturns) {
  IssuePool pool(1);
  pool.Run({});
}

}  // namespace
}  // namespace kvoffload::daemon::cuda
