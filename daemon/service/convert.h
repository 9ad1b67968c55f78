// Conversions at the gRPC edge: kvoffload.v1 messages ↔ common/ and daemon/ types. absl::Status
// ↔ grpc::Status (codes 1:1, reasons in the status details) is proto/status_convert.h's
// ToGrpcStatus, shared with the client. Nothing past this file sees protobuf types except the
// service adapters.
#ifndef KVOFFLOAD_DAEMON_SERVICE_CONVERT_H_
#define KVOFFLOAD_DAEMON_SERVICE_CONVERT_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/engine_spec.h"
#include "common/geometry.h"
#include "daemon/copy/copy_backend.h"
#include "daemon/engine/engine.h"
#include "daemon/service/limits.h"
#include "grpcpp/grpcpp.h"
#include "kvoffload/v1/kvoffload.pb.h"
#include "proto/spec_convert.h"
#include "proto/status_convert.h"

namespace kvoffload::daemon {

absl::StatusOr<WorkerRegistration> FromProto(const v1::RegisterWorker& proto);
// The part as sent: lists and runs copied, nothing expanded and nothing checked but the
// direction (a value that is neither STORE nor LOAD is INVALID_ARGUMENT). The engine validates
// it (ValidatePart, engine/job_part.h) and turns it into runs.
absl::StatusOr<JobPart> FromProto(const v1::Submit& proto);
void ToProto(const EngineSnapshot& snapshot, v1::EngineStats* proto);
void ToProto(const PoolSnapshot& snapshot, v1::PoolStats* proto);
// One tier's store counters and its links' sums (tier_manager.h).
void ToProto(const TierManager::TierLine& line, v1::TierStats* proto);

// Keys of an index request: 1..kMaxKeysPerRequest keys (limits.h) of 1..256 bytes.
absl::StatusOr<std::vector<std::string>> KeysFromProto(
    const google::protobuf::RepeatedPtrField<std::string>& keys);

}  // namespace kvoffload::daemon

#endif  // KVOFFLOAD_DAEMON_SERVICE_CONVERT_H_
