// The namespace of an engine's or a pool's rows in the tiers below the region: who may read
// them and what their bytes mean. Records of one namespace are promoted only into rows of the
// same namespace, so a row is never promoted into another owner's engine or another layout.
//
//   - who: a pool's name (its members are admitted by the pool's rules), else the owner's uid and
//     the engine id — not the DP rank: the replicas of one engine share their records, as they
//     compute the same KV for the same block hashes;
//   - what: the spec's model_identity, and the layout (the geometry's fingerprint and the spec
//     fields that shape a block: attention, tp, dcp, layers, KV groups, page bytes).
// The region's size (budget, rows) is not part of it: resizing keeps the records.
#ifndef KVOFFLOAD_DAEMON_TIER_TIER_NAMESPACE_H_
#define KVOFFLOAD_DAEMON_TIER_TIER_NAMESPACE_H_

#include <cstdint>
#include <string>

#include "common/engine_spec.h"
#include "common/geometry.h"

namespace kvoffload::daemon {

// The identity string (for logs and tests) and its 64-bit fingerprint.
std::string TierIdentity(const common::EngineSpec& spec, uint32_t owner_uid,
                         const common::Geometry& geometry);
uint64_t TierNamespace(const common::EngineSpec& spec, uint32_t owner_uid,
                       const common::Geometry& geometry);

}  // namespace kvoffload::daemon

#endif  // KVOFFLOAD_DAEMON_TIER_TIER_NAMESPACE_H_
