// EngineSpec and Geometry ↔ kvoffload.v1 messages, shared by the daemon and the client so that
// both sides read the wire the same way.
#ifndef KVOFFLOAD_PROTO_SPEC_CONVERT_H_
#define KVOFFLOAD_PROTO_SPEC_CONVERT_H_

#include "absl/status/statusor.h"
#include "common/engine_spec.h"
#include "common/geometry.h"
#include "kvoffload/v1/kvoffload.pb.h"

namespace kvoffload {

// INVALID_ARGUMENT for enum values out of range; the topology itself is checked by common/.
absl::StatusOr<common::EngineSpec> SpecFromProto(const v1::EngineSpec& proto);
void SpecToProto(const common::EngineSpec& spec, v1::EngineSpec* proto);
void GeometryToProto(const common::Geometry& geometry, v1::Geometry* proto);
common::Geometry GeometryFromProto(const v1::Geometry& proto);

}  // namespace kvoffload

#endif  // KVOFFLOAD_PROTO_SPEC_CONVERT_H_
