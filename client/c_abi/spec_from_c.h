// The C ABI's engine spec (kvo_engine_spec, client/kvoffload_c.h) as a common::EngineSpec: the
// only mapping from the C struct. From there every path is shared: the client library sends it
// with proto/spec_convert (SpecToProto), the daemon reads it with SpecFromProto, and
// `kvoffloadctl plan` builds the same common::EngineSpec from flags (with the same
// ParseExecutor / ParseAttention / ParseSecondaryTiers rules). Python maps onto the C struct.
//
//   ASSIGN_OR_RETURN(common::EngineSpec spec, SpecFromC(c_spec));
#ifndef KVOFFLOAD_CLIENT_C_ABI_SPEC_FROM_C_H_
#define KVOFFLOAD_CLIENT_C_ABI_SPEC_FROM_C_H_

#include "absl/status/statusor.h"
#include "client/kvoffload_c.h"
#include "common/engine_spec.h"

namespace kvoffload::client {

// INVALID_ARGUMENT for a NULL spec or engine_id, an executor or attention outside the KVO_*
// values, or rows_assigned_by_engine other than 0 or 1. secondary_tiers: NULL or a comma list
// (common::ParseSecondaryTiers). The topology itself is checked by common::ComputeGeometry.
absl::StatusOr<common::EngineSpec> SpecFromC(const kvo_engine_spec* c);

}  // namespace kvoffload::client

#endif  // KVOFFLOAD_CLIENT_C_ABI_SPEC_FROM_C_H_
