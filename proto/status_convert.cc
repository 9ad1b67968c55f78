#include "proto/status_convert.h"

#include <optional>

#include "kvoffload/v1/error_info.pb.h"

namespace kvoffload {

grpc::Status ToGrpcStatus(const absl::Status& status) {
  if (status.ok()) return grpc::Status::OK;
  const auto code = static_cast<grpc::StatusCode>(status.code());
  std::string message(status.message());
  std::optional<std::string> info = common::ErrorInfoBytes(status);
  if (!info.has_value()) return grpc::Status(code, std::move(message));
  v1::RpcStatus details;
  details.set_code(static_cast<int32_t>(status.code()));
  details.set_message(message);
  google::protobuf::Any* any = details.add_details();
  any->set_type_url(common::kErrorInfoTypeUrl);
  any->set_value(*info);
  return grpc::Status(code, std::move(message), details.SerializeAsString());
}

absl::Status FromGrpcStatus(const grpc::Status& status) {
  if (status.ok()) return absl::OkStatus();
  absl::Status out(static_cast<absl::StatusCode>(status.error_code()), status.error_message());
  v1::RpcStatus details;
  if (status.error_details().empty() || !details.ParseFromString(status.error_details())) {
    return out;
  }
  for (const google::protobuf::Any& any : details.details()) {
    if (any.type_url() == common::kErrorInfoTypeUrl) {
      return common::WithErrorInfoBytes(std::move(out), any.value());
    }
  }
  return out;
}

void ErrorInfoToProto(const absl::Status& status, v1::ErrorInfo* error) {
  std::optional<std::string> info = common::ErrorInfoBytes(status);
  if (info.has_value()) error->ParseFromString(*info);
}

absl::Status StatusFromWire(int32_t code, const std::string& message, const v1::ErrorInfo* error) {
  if (code == 0) return absl::OkStatus();
  absl::Status out(static_cast<absl::StatusCode>(code), message);
  if (error == nullptr) return out;
  return common::WithErrorInfoBytes(std::move(out), error->SerializeAsString());
}

}  // namespace kvoffload
