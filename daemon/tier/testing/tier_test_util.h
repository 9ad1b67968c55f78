// Helpers for the disk tier's tests: random payloads, synchronous Write/Read wrappers, and
// options over a fresh directory under TEST_TMPDIR. Not thread-safe (each helper is called
// by one test thread; the wrappers wait on their own notification).
#ifndef KVOFFLOAD_DAEMON_TIER_TESTING_TIER_TEST_UTIL_H_
#define KVOFFLOAD_DAEMON_TIER_TESTING_TIER_TEST_UTIL_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "daemon/tier/aligned_buffer.h"
#include "daemon/tier/disk_tier.h"

namespace kvoffload::tier::testing {

// `bytes` pseudo-random bytes from `seed` (never zeros: a zero page must not pass for data).
AlignedBuffer RandomPayload(uint64_t bytes, uint64_t seed);

// A new empty directory under TEST_TMPDIR (or /tmp) named after `tag`.
std::string FreshDir(const std::string& tag);

// Write or Read and wait for the result (the refusal, or what `done` reported).
absl::Status WriteAndWait(DiskTier& tier, uint64_t ns, const std::string& key,
                          const AlignedBuffer& payload, uint64_t bytes);
absl::StatusOr<uint64_t> ReadAndWait(DiskTier& tier, uint64_t ns, const std::string& key,
                                     AlignedBuffer& dst);

}  // namespace kvoffload::tier::testing

#endif  // KVOFFLOAD_DAEMON_TIER_TESTING_TIER_TEST_UTIL_H_
