#include "daemon/index/key_refusals.h"

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/refusals.h"

namespace kvoffload::daemon {
namespace {

// Hex of a key for error messages; long keys are shortened to their first 32 bytes.
std::string KeyHex(absl::string_view key) {
  constexpr size_t kShown = 32;
  if (key.size() <= kShown) return absl::BytesToHexString(key);
  return absl::StrCat(absl::BytesToHexString(key.substr(0, kShown)), "...(", key.size(), " bytes)");
}

}  // namespace

std::string KeyName(size_t index, absl::string_view key) {
  return absl::StrCat("key #", index, " (", KeyHex(key), ")");
}

absl::Status ValidateKey(absl::string_view operation, size_t index, absl::string_view key) {
  if (ValidKeySize(key)) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrFormat("%s: key #%d has %d bytes; keys must have %d..%d bytes", operation, index,
                      key.size(), common::kMinKeyBytes, common::kMaxKeyBytes));
}

absl::Status DuplicateKey(absl::string_view operation, size_t index, absl::string_view key) {
  return absl::InvalidArgumentError(
      absl::StrCat(operation, ": ", KeyName(index, key), " appears more than once in the request"));
}

absl::Status UnknownKey(absl::string_view operation, size_t index, absl::string_view key) {
  return common::KeyNotInIndex(operation, index, KeyName(index, key));
}

}  // namespace kvoffload::daemon
