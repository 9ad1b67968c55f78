// The payloads of the disk tier's crash test, shared by the writer child and the verifying
// test: a record's first 8 bytes hold its version, the rest follow from (seed, version), so any
// served record can be checked byte for byte without knowing which write it came from. Pure.
#ifndef KVOFFLOAD_DAEMON_TIER_TESTING_CRASH_PAYLOAD_H_
#define KVOFFLOAD_DAEMON_TIER_TESTING_CRASH_PAYLOAD_H_

#include <cstdint>
#include <cstring>

#include "daemon/tier/testing/tier_test_util.h"

namespace kvoffload::tier::testing {

inline constexpr uint64_t kCrashPayloadBytes = 64 * 1024;
inline constexpr uint64_t kCrashNamespace = 0xC0FFEE;
inline constexpr int kCrashStableRecords = 40;
inline constexpr int kCrashHotKeys = 8;
// Slots: every stable record, each hot key twice (committed + in flight), and room to spare,
// so the hot stream never evicts a stable record.
inline constexpr uint64_t kCrashSlots = kCrashStableRecords + 3 * kCrashHotKeys;

inline AlignedBuffer CrashPayload(uint64_t seed, uint64_t version) {
  AlignedBuffer b = RandomPayload(kCrashPayloadBytes, seed * 1000003 + version);
  std::memcpy(b.data(), &version, sizeof(version));
  return b;
}

}  // namespace kvoffload::tier::testing

#endif  // KVOFFLOAD_DAEMON_TIER_TESTING_CRASH_PAYLOAD_H_
