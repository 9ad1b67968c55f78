// Redis Cluster key slots: CRC16 (XMODEM: polynomial 0x1021, initial value 0, no reflection) of
// the key, or of its hash tag, modulo 16384, as the Redis Cluster specification defines them.
//
// Hash tag: when the key holds a '{' followed later by a '}' with at least one byte between
// them, only the bytes between the first '{' and the first '}' after it are hashed. The cluster
// tier's own keys hold no '{' (cluster_options.cc refuses one in the key prefix; keys and
// namespaces are written in hex), so a row's values spread over every slot.
//
// Thread safety: pure functions.
#ifndef KVOFFLOAD_DAEMON_TIER_CLUSTER_KEY_SLOT_H_
#define KVOFFLOAD_DAEMON_TIER_CLUSTER_KEY_SLOT_H_

#include <cstdint>

#include "absl/strings/string_view.h"

namespace kvoffload::tier::cluster {

inline constexpr int kClusterSlots = 16384;

uint16_t Crc16(absl::string_view bytes);

// The part of `key` that is hashed: its hash tag, or the whole key.
absl::string_view HashedPart(absl::string_view key);

// The slot (0..16383) that owns `key`.
uint16_t KeySlot(absl::string_view key);

}  // namespace kvoffload::tier::cluster

#endif  // KVOFFLOAD_DAEMON_TIER_CLUSTER_KEY_SLOT_H_
