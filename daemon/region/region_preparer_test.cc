// RegionPreparer (durable regions: serve while pinning): the first chunk is waited for alone, the rest
// become ready in the background; `ready` reports only the contiguous prefix that is populated
// and pinned, in increasing order; a pin that is UNAVAILABLE is retried; a failure keeps the
// prefix and stops the rest. Chunks are held back through the populate seam, never by sleeping.
#include "daemon/region/region_preparer.h"

#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace kvoffload::daemon {
namespace {

using ::testing::ElementsAre;

constexpr uint64_t kChunk = 1 << 20;

std::unique_ptr<Region> Unpopulated(uint64_t bytes) {
  RegionOptions o;
  o.populate = false;
  return Region::Create("preparer-test", bytes, o).value();
}

// Records every `ready` call.
struct Reports {
  absl::Mutex mu;
  std::vector<uint64_t> ready ABSL_GUARDED_BY(mu);
  void Add(uint64_t b) {
    absl::MutexLock lock(&mu);
    ready.push_back(b);
  }
  std::vector<uint64_t> Get() {
    absl::MutexLock lock(&mu);
    return ready;
  }
};

TEST(ChunkBytesForTest, WholeRowsAtLeastOne) {
  EXPECT_EQ(ChunkBytesFor(3000, 10000), 9000u);
  EXPECT_EQ(ChunkBytesFor(3000, 100), 3000u);
}

TEST(RegionPreparerTest, PrefixOnlyAndInOrder) {
  auto region = Unpopulated(4 * kChunk);
  std::vector<std::unique_ptr<absl::Notification>> release;
  for (int i = 0; i < 4; ++i) release.push_back(std::make_unique<absl::Notification>());
  release[0]->Notify();
  Reports reports;
  std::vector<int> pinned(4, 0);
  RegionPreparer::Options o;
  o.chunk_bytes = kChunk;
  o.threads = 4;
  o.populate_chunk = [&](size_t c, uint64_t offset, uint64_t bytes) {
    EXPECT_EQ(offset, c * kChunk);
    EXPECT_EQ(bytes, kChunk);
    release[c]->WaitForNotification();
    return region->PopulateRange(offset, bytes);
  };
  auto p = RegionPreparer::Start(
      region.get(), o,
      [&](size_t c) {
        ++pinned[c];
        return absl::OkStatus();
      },
      [&](uint64_t b) { reports.Add(b); });
  ASSERT_TRUE(p->WaitFirstChunk().ok());
  // Chunk 2 is done before chunk 1: the prefix does not pass chunk 1.
  release[2]->Notify();
  RegionPreparer::Progress before = p->progress();
  EXPECT_LE(before.ready_bytes, kChunk);
  EXPECT_EQ(before.total_bytes, 4 * kChunk);
  EXPECT_EQ(before.chunks, 4u);
  release[1]->Notify();
  release[3]->Notify();
  ASSERT_TRUE(p->WaitAll().ok());
  std::vector<uint64_t> got = reports.Get();
  ASSERT_FALSE(got.empty());
  for (size_t i = 1; i < got.size(); ++i) EXPECT_LT(got[i - 1], got[i]);
  EXPECT_EQ(got.back(), 4 * kChunk);
  for (uint64_t b : got) EXPECT_EQ(b % kChunk, 0u);
  EXPECT_THAT(pinned, ElementsAre(1, 1, 1, 1));
  RegionPreparer::Progress after = p->progress();
  EXPECT_EQ(after.ready_bytes, 4 * kChunk);
  EXPECT_EQ(after.chunks_ready, 4u);
  EXPECT_GE(after.first_ready_seconds, 0);
  EXPECT_GE(after.fully_ready_seconds, after.first_ready_seconds);
}

TEST(RegionPreparerTest, HeldChunkIsNeverReported) {
  auto region = Unpopulated(3 * kChunk);
  absl::Notification hold;
  Reports reports;
  RegionPreparer::Options o;
  o.chunk_bytes = kChunk;
  o.threads = 2;
  absl::Notification chunk2_done;
  o.populate_chunk = [&](size_t c, uint64_t offset, uint64_t bytes) {
    if (c == 1) hold.WaitForNotification();
    absl::Status s = region->PopulateRange(offset, bytes);
    if (c == 2) chunk2_done.Notify();
    return s;
  };
  auto p = RegionPreparer::Start(
      region.get(), o, [](size_t) { return absl::OkStatus(); },
      [&](uint64_t b) { reports.Add(b); });
  ASSERT_TRUE(p->WaitFirstChunk().ok());
  chunk2_done.WaitForNotification();
  // Chunk 2 is populated; chunk 1 is held: nothing past chunk 0 may be reported.
  for (uint64_t b : reports.Get()) EXPECT_EQ(b, kChunk);
  EXPECT_LE(p->progress().ready_bytes, kChunk);
  hold.Notify();
  ASSERT_TRUE(p->WaitAll().ok());
  EXPECT_EQ(reports.Get().back(), 3 * kChunk);
}

TEST(RegionPreparerTest, UnavailablePinIsRetriedAndFirstChunkSettles) {
  auto region = Unpopulated(2 * kChunk);
  absl::Mutex mu;
  bool device = false;
  int attempts = 0;
  Reports reports;
  RegionPreparer::Options o;
  o.chunk_bytes = kChunk;
  o.threads = 1;
  o.retry_after = absl::Milliseconds(1);
  auto p = RegionPreparer::Start(
      region.get(), o,
      [&](size_t) {
        absl::MutexLock lock(&mu);
        ++attempts;
        return device ? absl::OkStatus() : absl::UnavailableError("no device context yet");
      },
      [&](uint64_t b) { reports.Add(b); });
  // Populated but not pinnable: OpenEngine may return, nothing is ready.
  ASSERT_TRUE(p->WaitFirstChunk().ok());
  EXPECT_EQ(p->progress().ready_bytes, 0u);
  EXPECT_TRUE(reports.Get().empty());
  {
    absl::MutexLock lock(&mu);
    device = true;
  }
  ASSERT_TRUE(p->WaitAll().ok());
  EXPECT_EQ(reports.Get().back(), 2 * kChunk);
  absl::MutexLock lock(&mu);
  EXPECT_GE(attempts, 3);
}

TEST(RegionPreparerTest, FailureKeepsThePrefixAndStops) {
  auto region = Unpopulated(3 * kChunk);
  Reports reports;
  RegionPreparer::Options o;
  o.chunk_bytes = kChunk;
  o.threads = 1;
  auto p = RegionPreparer::Start(
      region.get(), o,
      [](size_t c) {
        return c == 1 ? absl::ResourceExhaustedError("locked-memory limit") : absl::OkStatus();
      },
      [&](uint64_t b) { reports.Add(b); });
  absl::Status all = p->WaitAll();
  EXPECT_EQ(all.code(), absl::StatusCode::kResourceExhausted);
  // Asked after chunk 1 failed: chunk 0 is still usable, so OpenEngine must not fail (CI caught
  // WaitFirstChunk returning chunk 1's error when the failure beat the waiter).
  EXPECT_TRUE(p->WaitFirstChunk().ok());
  EXPECT_THAT(reports.Get(), ElementsAre(kChunk));
  RegionPreparer::Progress progress = p->progress();
  EXPECT_EQ(progress.ready_bytes, kChunk);
  EXPECT_EQ(progress.status.code(), absl::StatusCode::kResourceExhausted);
}

TEST(RegionPreparerTest, ChunkZeroStillWaitingForADeviceWhenAnotherFailsIsTheFailure) {
  // Chunk 0 is populated but its pin waits for a device; chunk 1 cannot be populated: the
  // preparation stops, chunk 0 will never be pinned, and OpenEngine must say why (not OK).
  auto region = Unpopulated(2 * kChunk);
  RegionPreparer::Options o;
  o.chunk_bytes = kChunk;
  o.threads = 2;
  o.populate_chunk = [&](size_t c, uint64_t offset, uint64_t bytes) {
    return c == 1 ? absl::ResourceExhaustedError("no memory for chunk 1")
                  : region->PopulateRange(offset, bytes);
  };
  auto p = RegionPreparer::Start(
      region.get(), o, [](size_t) { return absl::UnavailableError("no device context yet"); },
      [](uint64_t) { ADD_FAILURE() << "nothing is ready"; });
  EXPECT_EQ(p->WaitAll().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(p->WaitFirstChunk().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(p->WaitFirstChunkUsable(absl::Seconds(1)).code(), absl::StatusCode::kResourceExhausted);
}

TEST(RegionPreparerTest, AChunkPinnedWhileAnotherFailsIsStillReported) {
  // Chunk 0's pin is in flight when chunk 1 fails: chunk 0 is pinned, so it is served.
  auto region = Unpopulated(2 * kChunk);
  absl::Notification pin0_started, chunk1_failed;
  Reports reports;
  RegionPreparer::Options o;
  o.chunk_bytes = kChunk;
  o.threads = 2;
  o.populate_chunk = [&](size_t c, uint64_t offset, uint64_t bytes) {
    if (c == 1) pin0_started.WaitForNotification();  // chunk 1 fails only once 0 is pinning
    return region->PopulateRange(offset, bytes);
  };
  auto p = RegionPreparer::Start(
      region.get(), o,
      [&](size_t c) {
        if (c == 1) {
          chunk1_failed.Notify();
          return absl::ResourceExhaustedError("locked-memory limit");
        }
        pin0_started.Notify();
        chunk1_failed.WaitForNotification();
        absl::SleepFor(absl::Milliseconds(20));  // Fail has stopped the preparation by now
        return absl::OkStatus();
      },
      [&](uint64_t b) { reports.Add(b); });
  EXPECT_EQ(p->WaitAll().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(reports.Get(), ElementsAre(kChunk));
  EXPECT_TRUE(p->WaitFirstChunk().ok());
  EXPECT_EQ(p->progress().ready_bytes, kChunk);
}

TEST(RegionPreparerTest, FirstChunkFailureIsWhatWaitFirstChunkSays) {
  auto region = Unpopulated(2 * kChunk);
  RegionPreparer::Options o;
  o.chunk_bytes = kChunk;
  o.populate_chunk = [](size_t, uint64_t, uint64_t) {
    return absl::ResourceExhaustedError("no memory");
  };
  auto p = RegionPreparer::Start(
      region.get(), o, [](size_t) { return absl::OkStatus(); },
      [](uint64_t) { ADD_FAILURE() << "nothing is ready"; });
  EXPECT_EQ(p->WaitFirstChunk().code(), absl::StatusCode::kResourceExhausted);
}

TEST(RegionPreparerTest, StopWhileWaitingForADevice) {
  auto region = Unpopulated(2 * kChunk);
  RegionPreparer::Options o;
  o.chunk_bytes = kChunk;
  o.retry_after = absl::Hours(1);  // only Stop can end the wait
  auto p = RegionPreparer::Start(
      region.get(), o, [](size_t) { return absl::UnavailableError("no device"); },
      [](uint64_t) { ADD_FAILURE() << "nothing is ready"; });
  ASSERT_TRUE(p->WaitFirstChunk().ok());
  p->Stop();
  EXPECT_EQ(p->WaitAll().code(), absl::StatusCode::kCancelled);
}

TEST(RegionPreparerTest, RetryNowEndsTheWaitForADeviceAtOnce) {
  auto region = Unpopulated(2 * kChunk);
  absl::Mutex mu;
  bool device = false;
  Reports reports;
  RegionPreparer::Options o;
  o.chunk_bytes = kChunk;
  o.threads = 1;
  o.retry_after = absl::Hours(1);  // only RetryNow (or Stop) can end a wait
  auto p = RegionPreparer::Start(
      region.get(), o,
      [&](size_t) {
        absl::MutexLock lock(&mu);
        return device ? absl::OkStatus() : absl::UnavailableError("no device context yet");
      },
      [&](uint64_t b) { reports.Add(b); });
  ASSERT_TRUE(p->WaitFirstChunk().ok());
  EXPECT_EQ(p->WaitFirstChunkUsable(absl::Milliseconds(20)).code(),
            absl::StatusCode::kDeadlineExceeded);
  {
    absl::MutexLock lock(&mu);
    device = true;  // a worker brought a context
  }
  p->RetryNow();
  ASSERT_TRUE(p->WaitFirstChunkUsable(absl::Seconds(30)).ok());
  // Usable means `ready` has been told: the index can hand the rows out.
  ASSERT_FALSE(reports.Get().empty());
  EXPECT_GE(reports.Get().front(), kChunk);
  ASSERT_TRUE(p->WaitAll().ok());
}

TEST(RegionPreparerTest, PinningOnlyPinsChunkZeroBeforeAnyOther) {
  // An adopted region (nothing to populate): chunk 0's pin must not queue behind the others'.
  auto region = Unpopulated(6 * kChunk);
  absl::Mutex mu;
  std::vector<std::pair<size_t, bool>> events;  // (chunk, begin/end)
  RegionPreparer::Options o;
  o.chunk_bytes = kChunk;
  o.threads = 4;
  o.populate = false;
  auto p = RegionPreparer::Start(
      region.get(), o,
      [&](size_t c) {
        {
          absl::MutexLock lock(&mu);
          events.push_back({c, true});
        }
        absl::SleepFor(absl::Milliseconds(2));
        absl::MutexLock lock(&mu);
        events.push_back({c, false});
        return absl::OkStatus();
      },
      [](uint64_t) {});
  ASSERT_TRUE(p->WaitAll().ok());
  absl::MutexLock lock(&mu);
  ASSERT_EQ(events.size(), 12u);
  EXPECT_EQ(events[0], std::make_pair(size_t{0}, true));
  EXPECT_EQ(events[1], std::make_pair(size_t{0}, false));
}

TEST(RegionPreparerTest, PausesBetweenPinsAndStopEndsAPause) {
  auto region = Unpopulated(3 * kChunk);
  RegionPreparer::Options o;
  o.chunk_bytes = kChunk;
  o.threads = 1;
  o.populate = false;
  o.pause_between_pins = absl::Milliseconds(30);
  const absl::Time start = absl::Now();
  auto p = RegionPreparer::Start(
      region.get(), o, [](size_t) { return absl::OkStatus(); }, [](uint64_t) {});
  ASSERT_TRUE(p->WaitAll().ok());
  EXPECT_GE(absl::Now() - start, absl::Milliseconds(60));  // after chunks 0 and 1, not 2

  o.pause_between_pins = absl::Hours(1);  // only Stop can end it
  auto held = RegionPreparer::Start(
      region.get(), o, [](size_t) { return absl::OkStatus(); }, [](uint64_t) {});
  ASSERT_TRUE(held->WaitFirstChunkUsable(absl::Seconds(30)).ok());
  held->Stop();
  EXPECT_EQ(held->WaitAll().code(), absl::StatusCode::kCancelled);
}

TEST(RegionPreparerTest, DefaultPopulateFaultsTheWholeRegionIn) {
  auto region = Unpopulated(5 * kChunk + 4096);
  RegionPreparer::Options o;
  o.chunk_bytes = kChunk;
  o.threads = 3;
  Reports reports;
  auto p = RegionPreparer::Start(
      region.get(), o, [](size_t) { return absl::OkStatus(); },
      [&](uint64_t b) { reports.Add(b); });
  ASSERT_TRUE(p->WaitAll().ok());
  EXPECT_EQ(reports.Get().back(), 5 * kChunk + 4096);
  EXPECT_EQ(p->progress().chunks, 6u);
  // Populated memory is zero and writable.
  for (uint64_t off = 0; off < region->size(); off += 4096) ASSERT_EQ(region->data()[off], 0);
  region->data()[region->size() - 1] = 7;
}

}  // namespace
}  // namespace kvoffload::daemon
