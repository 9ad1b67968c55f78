// Per-request limits of the gRPC surface and the message size they imply. The message limit is
// the largest legal request, so no legal request is refused for its size and no illegal one is
// read into memory (the arithmetic is documented in kvoffload.proto, "Limits").
#ifndef KVOFFLOAD_DAEMON_SERVICE_LIMITS_H_
#define KVOFFLOAD_DAEMON_SERVICE_LIMITS_H_

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "common/limits.h"

namespace kvoffload::daemon {

using common::kMaxKeyBytes;
using common::kMaxKeysPerRequest;
// Tensors and interprocess events of one worker registration.
inline constexpr size_t kMaxTensorsPerWorker = 1 << 16;
inline constexpr size_t kMaxEventsPerWorker = 4096;

// Protobuf encodes a uint64 in at most 10 bytes; a field's tag and length take a few more.
inline constexpr uint64_t kMaxVarintBytes = 10;

// The most a Submit can spend on one of its blocks: a BlockRun of one block (tag and length,
// gpu_block, row, num_rows, first_block, num_blocks) costs more than a block of the explicit
// lists (one gpu_blocks and at most one rows varint).
inline constexpr uint64_t kMaxSubmitBytesPerBlock = 2 + 4 * (kMaxVarintBytes + 1) + (5 + 1);

// A Submit of `max_blocks_per_job` blocks, however they are written (lists, runs of rows, runs
// of single blocks): every block costs at most kMaxSubmitBytesPerBlock.
// Saturates instead of wrapping for absurd block limits (the daemon refuses those at start).
constexpr uint64_t MaxSubmitBytes(uint64_t max_blocks_per_job) {
  return max_blocks_per_job > (UINT64_MAX - 64) / kMaxSubmitBytesPerBlock
             ? UINT64_MAX
             : max_blocks_per_job * kMaxSubmitBytesPerBlock + 64;
}

// A KeysRequest (or a PrepareStoreResponse's keys): every key at its longest.
constexpr uint64_t MaxKeysRequestBytes() {
  return kMaxKeysPerRequest * (kMaxKeyBytes + 3) + 256;
}

// A PrepareStoreResponse: keys and evicted keys at their longest, one row each.
constexpr uint64_t MaxPrepareStoreResponseBytes() {
  return 2 * MaxKeysRequestBytes() + kMaxKeysPerRequest * (kMaxVarintBytes + 1);
}

// A RegisterWorker: tensors (a 64-byte handle and five varints each), event handles, the spec.
constexpr uint64_t MaxRegisterBytes() {
  return kMaxTensorsPerWorker * 128 + kMaxEventsPerWorker * 67 + 4096;
}

// What the daemon accepts from a client: the largest of the requests above.
constexpr uint64_t MaxReceiveMessageBytes(uint64_t max_blocks_per_job) {
  return std::max({MaxSubmitBytes(max_blocks_per_job), MaxKeysRequestBytes(), MaxRegisterBytes()});
}

// What the daemon may send: the largest response (Stats of many engines is far smaller).
constexpr uint64_t MaxSendMessageBytes() { return MaxPrepareStoreResponseBytes() + 4096; }

}  // namespace kvoffload::daemon

#endif  // KVOFFLOAD_DAEMON_SERVICE_LIMITS_H_
