// absl::Status ↔ the wire, the one conversion both the daemon and the client use: codes map 1:1,
// and a status's reason (common/error_info.h) travels with it. On a unary call it rides in the
// gRPC status details (an RpcStatus holding one Any of kvoffload.v1.ErrorInfo,
// proto/kvoffload/v1/error_info.proto); in a worker session in the `error` field of JobFinished
// and SessionClosed. Pure functions: thread-safe.
#ifndef KVOFFLOAD_PROTO_STATUS_CONVERT_H_
#define KVOFFLOAD_PROTO_STATUS_CONVERT_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "common/error_info.h"
#include "grpcpp/grpcpp.h"
#include "kvoffload/v1/error_info.pb.h"

namespace kvoffload {

grpc::Status ToGrpcStatus(const absl::Status& status);
// Details that are not an RpcStatus holding an ErrorInfo are ignored (the reason is then "").
absl::Status FromGrpcStatus(const grpc::Status& status);

// The status's reason into `error` (left untouched when it has none), and back.
void ErrorInfoToProto(const absl::Status& status, v1::ErrorInfo* error);
absl::Status StatusFromWire(int32_t code, const std::string& message, const v1::ErrorInfo* error);

// For the session messages with `code`, `message` and `error` (JobFinished, SessionClosed).
template <typename Message>
void StatusToMessage(const absl::Status& status, Message* m) {
  m->set_code(static_cast<int32_t>(status.code()));
  m->set_message(std::string(status.message()));
  if (common::ErrorInfoBytes(status).has_value()) ErrorInfoToProto(status, m->mutable_error());
}

template <typename Message>
absl::Status StatusFromMessage(const Message& m) {
  return StatusFromWire(m.code(), m.message(), m.has_error() ? &m.error() : nullptr);
}

}  // namespace kvoffload

#endif  // KVOFFLOAD_PROTO_STATUS_CONVERT_H_
