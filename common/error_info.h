// ErrorInfo: a refusal's machine-readable reason, attached to its absl::Status as a payload
// (type URL kErrorInfoTypeUrl, the serialized kvoffload.v1.ErrorInfo of
// proto/kvoffload/v1/error_info.proto). Callers decide on code + reason, never on the message,
// so that a message can be reworded without changing anyone's behaviour. The reasons and the
// constructors that attach them live in common/refusals.h; this file is the mechanism.
//
//   absl::Status s = common::WithErrorInfo(absl::NotFoundError("..."), {"engine_not_found", {}});
//   if (common::ErrorReason(s) == common::reason::kEngineNotFound) ...
//   return common::Annotated(s, absl::StrCat(s.message(), " (while ...)"));  // keeps the reason
//
// Pure functions of their arguments: thread-safe. The header names no protobuf type.
#ifndef KVOFFLOAD_COMMON_ERROR_INFO_H_
#define KVOFFLOAD_COMMON_ERROR_INFO_H_

#include <map>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace kvoffload::common {

// The one type URL, for the absl::Status payload and the Any of the gRPC status details.
inline constexpr char kErrorInfoTypeUrl[] = "type.googleapis.com/kvoffload.v1.ErrorInfo";
inline constexpr char kErrorDomain[] = "kvoffload";

struct ErrorInfo {
  std::string reason;                           // "" = none
  std::map<std::string, std::string> metadata;  // sorted, so that its text form is stable
};

// `status` with `info` attached (replacing any earlier one). An OK status stays OK. Newlines in
// metadata values become spaces (the C ABI prints metadata as "key=value" lines).
absl::Status WithErrorInfo(absl::Status status, const ErrorInfo& info);

// The info attached to `status`; reason "" when it has none (or a payload that does not parse).
ErrorInfo ErrorInfoOf(const absl::Status& status);
std::string ErrorReason(const absl::Status& status);

// The same code and payloads as `from` with another message: context added on the way up
// keeps the reason. `from` must not be OK.
absl::Status Annotated(const absl::Status& from, absl::string_view message);

// The payload's bytes (a serialized kvoffload.v1.ErrorInfo), or nullopt; and the reverse.
// For the gRPC edges, which carry it without parsing it twice.
std::optional<std::string> ErrorInfoBytes(const absl::Status& status);
absl::Status WithErrorInfoBytes(absl::Status status, const std::string& bytes);

// Metadata as text: "key=value\n" per entry, sorted by key (the C ABI's form).
std::string MetadataText(const ErrorInfo& info);

}  // namespace kvoffload::common

#endif  // KVOFFLOAD_COMMON_ERROR_INFO_H_
