// The refusals a SlotIndex gives for the keys of a request (slot_index.h: "When several keys are
// wrong, the first one in request order is reported"): each names the operation and the key by
// its place in the request and its hex bytes, "PrepareLoad: key #3 (0a1b...) ...".
//
// Thread-safety: plain functions of their arguments.
#ifndef KVOFFLOAD_DAEMON_INDEX_KEY_REFUSALS_H_
#define KVOFFLOAD_DAEMON_INDEX_KEY_REFUSALS_H_

#include <cstddef>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "common/limits.h"

namespace kvoffload::daemon {

inline bool ValidKeySize(absl::string_view key) {
  return key.size() >= common::kMinKeyBytes && key.size() <= common::kMaxKeyBytes;
}

// Names key #`index` of a request: "key #3 (0a1b...)"; long keys show their first 32 bytes.
std::string KeyName(size_t index, absl::string_view key);

// OK, or INVALID_ARGUMENT for a key of invalid length.
absl::Status ValidateKey(absl::string_view operation, size_t index, absl::string_view key);
// INVALID_ARGUMENT: the key appears more than once in the request.
absl::Status DuplicateKey(absl::string_view operation, size_t index, absl::string_view key);
// NOT_FOUND with reason key_not_in_index (common/refusals.h).
absl::Status UnknownKey(absl::string_view operation, size_t index, absl::string_view key);

}  // namespace kvoffload::daemon

#endif  // KVOFFLOAD_DAEMON_INDEX_KEY_REFUSALS_H_
