#include "daemon/engine/engine_tier.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "daemon/tier/tier_namespace.h"

namespace kvoffload::daemon {
namespace {

spdlog::logger* Log() {
  static spdlog::logger* const log = common::Logger("engine");
  return log;
}

}  // namespace

std::shared_ptr<TierLink> MakeEngineTierLink(TierManager* tiers, const std::shared_ptr<Pool>& pool,
                                             const common::EngineSpec& spec,
                                             const common::Geometry& geometry, uint32_t owner_uid,
                                             SlotIndex* index, uint8_t* region_base,
                                             std::weak_ptr<void> owner) {
  if (tiers == nullptr) return nullptr;
  std::shared_ptr<TierLink> link;
  if (pool != nullptr) {
    link = pool->LinkTier(tiers, pool);
  } else {
    TierTarget target;
    target.index = index;
    target.row_bytes = geometry.row_bytes;
    target.namespace_id = TierNamespace(spec, owner_uid, geometry);
    target.label = absl::StrCat("engine ", spec.Key());
    target.lock_owner = [owner = std::move(owner)]() -> std::shared_ptr<void> {
      return owner.lock();
    };
    // The owner's reference (lock_owner) keeps the region mapped.
    const uint64_t row_bytes = geometry.row_bytes;
    target.row_memory = [region_base, row_bytes](uint64_t row, std::shared_ptr<void>*) {
      return region_base + row * row_bytes;
    };
    link = tiers->Link(std::move(target));
  }
  if (link == nullptr) {
    Log()->warn("engine {}: rows of {} bytes are larger than any tier holds (--disk_tier_row_bytes): "
                "its rows are not tiered",
                spec.Key(), geometry.row_bytes);
  }
  return link;
}

}  // namespace kvoffload::daemon
