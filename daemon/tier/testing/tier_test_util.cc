#include "daemon/tier/testing/tier_test_util.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <random>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"

namespace kvoffload::tier::testing {

AlignedBuffer RandomPayload(uint64_t bytes, uint64_t seed) {
  AlignedBuffer b(bytes);
  std::mt19937_64 rng(seed * 0x9E3779B97F4A7C15ull + 1);
  for (uint64_t i = 0; i + 8 <= b.size(); i += 8) {
    const uint64_t v = rng() | 1;  // never a zero word
    std::memcpy(b.data() + i, &v, 8);
  }
  return b;
}

std::string FreshDir(const std::string& tag) {
  const char* root = std::getenv("TEST_TMPDIR");
  static int counter = 0;
  const std::string dir = absl::StrCat(root ? root : "/tmp", "/tier_", tag, "_", getpid(), "_",
                                       counter++);
  mkdir(dir.c_str(), 0750);
  return dir;
}

absl::Status WriteAndWait(DiskTier& tier, uint64_t ns, const std::string& key,
                          const AlignedBuffer& payload, uint64_t bytes) {
  absl::Notification done;
  absl::Status result;
  absl::Status refused = tier.Write(ns, key, payload.data(), bytes, [&](absl::Status s) {
    result = std::move(s);
    done.Notify();
  });
  if (!refused.ok()) return refused;
  done.WaitForNotification();
  return result;
}

absl::StatusOr<uint64_t> ReadAndWait(DiskTier& tier, uint64_t ns, const std::string& key,
                                     AlignedBuffer& dst) {
  absl::Notification done;
  absl::StatusOr<uint64_t> result;
  absl::Status refused =
      tier.Read(ns, key, dst.data(), dst.size(), [&](absl::StatusOr<uint64_t> n) {
        result = std::move(n);
        done.Notify();
      });
  if (!refused.ok()) return refused;
  done.WaitForNotification();
  return result;
}

}  // namespace kvoffload::tier::testing
