#include "common/error_info.h"

#include <algorithm>

#include "absl/strings/cord.h"
#include "absl/strings/str_cat.h"
#include "kvoffload/v1/error_info.pb.h"

namespace kvoffload::common {

absl::Status WithErrorInfo(absl::Status status, const ErrorInfo& info) {
  if (status.ok()) return status;
  v1::ErrorInfo proto;
  proto.set_reason(info.reason);
  proto.set_domain(kErrorDomain);
  for (const auto& [key, value] : info.metadata) {
    std::string v = value;
    std::replace(v.begin(), v.end(), '\n', ' ');
    (*proto.mutable_metadata())[key] = std::move(v);
  }
  status.SetPayload(kErrorInfoTypeUrl, absl::Cord(proto.SerializeAsString()));
  return status;
}

ErrorInfo ErrorInfoOf(const absl::Status& status) {
  ErrorInfo info;
  std::optional<std::string> bytes = ErrorInfoBytes(status);
  v1::ErrorInfo proto;
  if (!bytes.has_value() || !proto.ParseFromString(*bytes)) return info;
  info.reason = proto.reason();
  info.metadata.insert(proto.metadata().begin(), proto.metadata().end());
  return info;
}

std::string ErrorReason(const absl::Status& status) { return ErrorInfoOf(status).reason; }

absl::Status Annotated(const absl::Status& from, absl::string_view message) {
  absl::Status out(from.code(), message);
  from.ForEachPayload([&out](absl::string_view url, const absl::Cord& payload) {
    out.SetPayload(url, payload);
  });
  return out;
}

std::optional<std::string> ErrorInfoBytes(const absl::Status& status) {
  auto payload = status.GetPayload(kErrorInfoTypeUrl);
  if (!payload.has_value()) return std::nullopt;
  return std::string(*payload);
}

absl::Status WithErrorInfoBytes(absl::Status status, const std::string& bytes) {
  if (status.ok()) return status;
  status.SetPayload(kErrorInfoTypeUrl, absl::Cord(bytes));
  return status;
}

std::string MetadataText(const ErrorInfo& info) {
  std::string out;
  for (const auto& [key, value] : info.metadata) absl::StrAppend(&out, key, "=", value, "\n");
  return out;
}

}  // namespace kvoffload::common
