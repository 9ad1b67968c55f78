// The C ABI's engine spec (kvo_engine_spec, client/kvoffload_c.h) ↔ common::EngineSpec: the
// only mapping of the C struct, walking common/engine_spec_fields.h. From common::EngineSpec
// every path is shared: the client library sends it with proto/spec_convert (SpecToProto), the
// daemon reads it with SpecFromProto, and `kvoffloadctl plan` builds the same common::EngineSpec
// from flags (with the same ParseExecutor / ParseAttention / ParseSecondaryTiers rules). Python
// maps onto the C struct (python/kvoffload/_native.py SPEC_FIELDS).
//
//   ASSIGN_OR_RETURN(common::EngineSpec spec, SpecFromC(c_spec));
//   CEngineSpec c(spec);  kvo_scheduler_open(path, c.get(), ...);
#ifndef KVOFFLOAD_CLIENT_C_ABI_SPEC_FROM_C_H_
#define KVOFFLOAD_CLIENT_C_ABI_SPEC_FROM_C_H_

#include <string>

#include "absl/status/statusor.h"
#include "client/kvoffload_c.h"
#include "common/engine_spec.h"

namespace kvoffload::client {

// INVALID_ARGUMENT for a NULL spec or engine_id, an executor or attention outside the KVO_*
// values, a flag other than 0 or 1, a NULL id array with a non-zero count or more than
// common::kMaxMembersPerEngine ids. secondary_tiers: NULL or a comma list
// (common::ParseSecondaryTiers). The topology itself is checked by common::ComputeGeometry.
absl::StatusOr<common::EngineSpec> SpecFromC(const kvo_engine_spec* c);

// A kvo_engine_spec that points into its own copy of a common::EngineSpec (kvo_engine_spec_init
// and the tests). Not copyable: the struct points into the object.
class CEngineSpec {
 public:
  explicit CEngineSpec(common::EngineSpec spec);
  CEngineSpec(const CEngineSpec&) = delete;
  CEngineSpec& operator=(const CEngineSpec&) = delete;

  const kvo_engine_spec* get() const { return &c_; }

 private:
  const common::EngineSpec spec_;
  std::string secondary_tiers_;  // the comma list c_.secondary_tiers points to
  kvo_engine_spec c_;
};

}  // namespace kvoffload::client

#endif  // KVOFFLOAD_CLIENT_C_ABI_SPEC_FROM_C_H_
