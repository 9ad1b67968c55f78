// Many writers and readers (and drops) at once on a tier smaller than the key set, so
// eviction, slot reuse, replacement of keys being read and drops all race. Every read that
// succeeds is byte-exact; nothing else than NOT_FOUND or success is seen (no fault injected).
// Run under TSan by run_all.sh's tsan stage.
#include <atomic>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "daemon/tier/block_io_factory.h"
#include "daemon/tier/disk_tier.h"
#include "daemon/tier/testing/io_kinds.h"
#include "daemon/tier/testing/tier_test_util.h"
#include "daemon/tier/tier_file.h"
#include "gtest/gtest.h"

namespace kvoffload::tier {
namespace {

using testing::RandomPayload;

constexpr uint64_t kBytes = 16 * 1024;
constexpr int kKeys = 48;
constexpr int kThreads = 6;
constexpr int kOpsPerThread = 120;

uint64_t Seed(uint64_t ns, int key) { return ns * 1000 + key; }

class DiskTierConcurrencyTest : public ::testing::TestWithParam<BlockIoKind> {};

TEST_P(DiskTierConcurrencyTest, ReadsAreExactOrMissesUnderRacingWritesEvictionsAndDrops) {
  DiskTierOptions o;
  o.paths = {testing::FreshDir("conc_a"), testing::FreshDir("conc_b")};
  o.max_payload_bytes = kBytes;
  o.capacity_bytes = 2 * (kSuperblockBytes + 16 * (kRecordHeaderBytes + kBytes));  // 32 slots
  o.queue_depth = 8;
  o.write_depth = 3;
  auto io = MakeBlockIo(o.queue_depth, GetParam());
  ASSERT_TRUE(io.ok());
  auto opened = DiskTier::Open(o, *std::move(io));
  ASSERT_TRUE(opened.ok()) << opened.status();
  DiskTier& tier = **opened;

  std::atomic<int> bad{0}, served{0}, written{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      AlignedBuffer out(kBytes);
      for (int op = 0; op < kOpsPerThread; ++op) {
        const uint64_t ns = 1 + (op + t) % 2;
        const int key = (op * 7 + t * 13) % kKeys;
        const std::string name = absl::StrCat("k", key);
        if ((op + t) % 3 == 0) {
          AlignedBuffer in = RandomPayload(kBytes, Seed(ns, key));
          absl::Status s = testing::WriteAndWait(tier, ns, name, in, kBytes);
          // RESOURCE_EXHAUSTED (every slot busy) and ABORTED (dropped meanwhile) are allowed.
          if (s.ok()) ++written;
          else if (!absl::IsResourceExhausted(s) && !absl::IsAborted(s)) ++bad;
        } else if (t == 0 && op % 40 == 39) {
          if (!tier.DropNamespace(ns).ok()) ++bad;
        } else {
          absl::StatusOr<uint64_t> n = testing::ReadAndWait(tier, ns, name, out);
          if (n.ok()) {
            AlignedBuffer want = RandomPayload(kBytes, Seed(ns, key));
            if (*n != kBytes || std::memcmp(out.data(), want.data(), kBytes) != 0) ++bad;
            ++served;
          } else if (!absl::IsNotFound(n.status())) {
            ++bad;
          }
        }
      }
    });
  }
  for (std::thread& th : threads) th.join();
  EXPECT_EQ(bad.load(), 0);
  EXPECT_GT(written.load(), 0);
  const DiskTierStats s = tier.stats();
  EXPECT_EQ(s.read_corrupt, 0u);
  EXPECT_EQ(s.reads_ok, static_cast<uint64_t>(served.load()));
  EXPECT_LE(s.records, s.capacity_slots);
}

INSTANTIATE_TEST_SUITE_P(Io, DiskTierConcurrencyTest,
                         testing::AllIoKinds(), testing::IoKindTestName);

}  // namespace
}  // namespace kvoffload::tier
