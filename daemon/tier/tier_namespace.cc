#include "daemon/tier/tier_namespace.h"

#include "absl/strings/str_cat.h"
#include "daemon/tier/record_format.h"

namespace kvoffload::daemon {

std::string TierIdentity(const common::EngineSpec& spec, uint32_t owner_uid,
                         const common::Geometry& geometry) {
  // Lengths before the free-form strings, so that no two identities concatenate alike.
  const std::string who =
      spec.pool.empty() ? absl::StrCat("uid=", owner_uid, " engine=", spec.engine_id.size(), ":",
                                       spec.engine_id)
                        : absl::StrCat("pool=", spec.pool.size(), ":", spec.pool);
  return absl::StrCat(who, " model=", spec.model_identity.size(), ":", spec.model_identity,
                      " attention=", common::AttentionName(spec.attention), " tp=", spec.tp,
                      " dcp=", spec.dcp, " layers=", spec.num_layers,
                      " kv_groups=", spec.num_kv_groups, " page_bytes=", spec.page_bytes, " ",
                      geometry.Fingerprint());
}

uint64_t TierNamespace(const common::EngineSpec& spec, uint32_t owner_uid,
                       const common::Geometry& geometry) {
  return tier::NamespaceFingerprint(TierIdentity(spec, owner_uid, geometry));
}

}  // namespace kvoffload::daemon
