// The child of disk_tier_crash_test: opens a disk tier in argv[1], commits the stable records
// ("s<i>", version 0) and prints "stable"; then rewrites the hot keys ("h<j>") forever, always
// kCrashHotKeys writes in flight, and prints "streaming" once the first of them has completed.
// The test SIGKILLs it while it streams.
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "daemon/tier/block_io_factory.h"
#include "daemon/tier/disk_tier.h"
#include "daemon/tier/testing/crash_payload.h"
#include "daemon/tier/tier_file.h"

namespace kvoffload::tier::testing {
namespace {

int Run(const std::string& dir) {
  DiskTierOptions o;
  o.paths = {dir};
  o.max_payload_bytes = kCrashPayloadBytes;
  o.capacity_bytes = kSuperblockBytes + kCrashSlots * (kRecordHeaderBytes + kCrashPayloadBytes);
  o.queue_depth = 8;
  o.write_depth = 8;
  auto io = MakeBlockIo(o.queue_depth);
  if (!io.ok()) return 2;
  auto tier = DiskTier::Open(o, *std::move(io));
  if (!tier.ok()) {
    std::fprintf(stderr, "%s\n", tier.status().ToString().c_str());
    return 3;
  }
  for (int i = 0; i < kCrashStableRecords; ++i) {
    AlignedBuffer p = CrashPayload(i, 0);
    if (!WriteAndWait(**tier, kCrashNamespace, absl::StrCat("s", i), p, p.size()).ok()) return 4;
  }
  std::printf("stable\n");
  std::fflush(stdout);

  // One buffer per hot key, rewritten only after that key's previous write completed.
  absl::Mutex mu;
  bool busy[kCrashHotKeys] = {};
  bool announced = false;
  std::vector<AlignedBuffer> buffers(kCrashHotKeys);
  for (uint64_t version = 1;; ++version) {
    for (int j = 0; j < kCrashHotKeys; ++j) {
      {
        absl::MutexLock lock(&mu);
        mu.Await(absl::Condition(+[](bool* b) { return !*b; }, &busy[j]));
        busy[j] = true;
      }
      buffers[j] = CrashPayload(1000 + j, version);
      const AlignedBuffer& p = buffers[j];
      auto done = [&mu, &busy, &announced, j](absl::Status) {
        absl::MutexLock lock(&mu);
        busy[j] = false;
        if (!announced) {
          announced = true;
          std::printf("streaming\n");
          std::fflush(stdout);
        }
      };
      if (!(*tier)->Write(kCrashNamespace, absl::StrCat("h", j), p.data(), p.size(), done).ok()) {
        absl::MutexLock lock(&mu);
        busy[j] = false;
      }
    }
  }
}

}  // namespace
}  // namespace kvoffload::tier::testing

int main(int argc, char** argv) {
  if (argc != 2) return 1;
  return kvoffload::tier::testing::Run(argv[1]);
}
