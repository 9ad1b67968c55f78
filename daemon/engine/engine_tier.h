// The engine's tier link: an engine's rows — its own index, or its pool's — linked to the node's
// tiers (spill and promote, daemon/tier/tier_link.h), in the namespace of its spec, owner and
// layout (tier_namespace.h). A pool's members share the pool's link (Pool::LinkTier).
//
//   tier_link_ = MakeEngineTierLink(deps.tiers, pool, spec, geometry, owner_uid, index,
//                                   region->data(), weak_from_this());
//
// Thread-safety: call it before the engine is published (its index must not be shared yet).
// Ownership: the caller (the engine) owns the returned link; `index` and the region at
// `region_base` must stay alive as long as `owner` does (TierTarget::lock_owner locks it), and
// the link holds that reference during each I/O.
#ifndef KVOFFLOAD_DAEMON_ENGINE_ENGINE_TIER_H_
#define KVOFFLOAD_DAEMON_ENGINE_ENGINE_TIER_H_

#include <cstdint>
#include <memory>

#include "common/engine_spec.h"
#include "common/geometry.h"
#include "daemon/index/slot_index.h"
#include "daemon/pool/pool.h"
#include "daemon/tier/tier_link.h"
#include "daemon/tier/tier_manager.h"

namespace kvoffload::daemon {

// The link of the engine's rows: the pool's when `pool` is set, else one over `index` and the
// region at `region_base`. Null without tiers (`tiers` null), or when no tier holds rows of
// geometry.row_bytes (logged).
std::shared_ptr<TierLink> MakeEngineTierLink(TierManager* tiers, const std::shared_ptr<Pool>& pool,
                                             const common::EngineSpec& spec,
                                             const common::Geometry& geometry, uint32_t owner_uid,
                                             SlotIndex* index, uint8_t* region_base,
                                             std::weak_ptr<void> owner);

}  // namespace kvoffload::daemon

#endif  // KVOFFLOAD_DAEMON_ENGINE_ENGINE_TIER_H_
