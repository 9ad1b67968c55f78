// Limits every layer shares (daemon, C++ client, C ABI, Python): one definition. The daemon's
// message-size arithmetic (daemon/service/limits.h) is derived from these; the C header and the
// Python package repeat the values, and tests check that they agree with this file.
#ifndef KVOFFLOAD_COMMON_LIMITS_H_
#define KVOFFLOAD_COMMON_LIMITS_H_

#include <cstddef>
#include <cstdint>

namespace kvoffload::common {

// Keys of one index request: a 1M-token prompt at 16 tokens per block. The client libraries
// split larger calls into several requests themselves.
inline constexpr size_t kMaxKeysPerRequest = 1 << 16;
// Bytes of one key (in practice a block hash).
inline constexpr size_t kMinKeyBytes = 1;
inline constexpr size_t kMaxKeyBytes = 256;
// Further uids, and further gids, an engine spec may name (EngineSpec.member_uids / _gids).
inline constexpr size_t kMaxMembersPerEngine = 1024;
// The region epoch that names no region. In a request (OpenEngine, RegisterWorker, index calls,
// job parts) it means "not checked"; the client library replaces it with the region it knows
// before sending (JobRequest.region_epoch, SchedulerClient), so its requests are always checked.
// A real epoch is never 0.
inline constexpr uint64_t kUncheckedRegionEpoch = 0;

}  // namespace kvoffload::common

#endif  // KVOFFLOAD_COMMON_LIMITS_H_
