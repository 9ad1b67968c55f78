#include "common/refusals.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/error_info.h"
#include "common/limits.h"

namespace kvoffload::common {

absl::Status CheckRegionEpoch(absl::string_view who, uint64_t planned, uint64_t actual) {
  if (planned == kUncheckedRegionEpoch || planned == actual) return absl::OkStatus();
  // Unpadded hex: as logs, kvoffloadctl and the clients print epochs.
  const std::string message =
      actual == 0
          ? absl::StrFormat(
                "%s: planned against region epoch %x, which no longer exists (dropped: idle "
                "TTL, an operator, or a daemon restart; its rows are gone); open the engine "
                "without an epoch to start afresh",
                who, planned)
          : absl::StrFormat(
                "%s: planned against region epoch %x, but the engine's region is epoch %x now "
                "(dropped and re-created since: rows stored before hold no data); open the "
                "engine again",
                who, planned, actual);
  return WithErrorInfo(absl::FailedPreconditionError(message),
                       {reason::kRegionEpochMismatch,
                        {{"planned_epoch", absl::StrFormat("%x", planned)},
                         {"region_epoch", absl::StrFormat("%x", actual)}}});
}

absl::Status EngineNotFound(absl::string_view engine_key, absl::string_view detail) {
  return WithErrorInfo(absl::NotFoundError(absl::StrCat("no engine ", engine_key, detail)),
                       {reason::kEngineNotFound, {{"engine", std::string(engine_key)}}});
}

absl::Status KeyNotInIndex(absl::string_view operation, size_t key_index,
                           absl::string_view key_name) {
  return WithErrorInfo(
      absl::NotFoundError(absl::StrCat(operation, ": ", key_name, " is not in the index")),
      {reason::kKeyNotInIndex,
       {{"operation", std::string(operation)}, {"key_index", absl::StrCat(key_index)}}});
}

absl::Status SpecMismatch(absl::string_view engine_key, absl::string_view detail) {
  return WithErrorInfo(
      absl::FailedPreconditionError(absl::StrCat(
          "engine ", engine_key, " exists with a different spec or geometry: ", detail)),
      {reason::kSpecMismatch, {{"engine", std::string(engine_key)}}});
}

absl::Status SpecRule(absl::StatusCode code, absl::string_view rule, absl::string_view message) {
  return WithErrorInfo(absl::Status(code, absl::StrCat("rule ", rule, ": ", message)),
                       {reason::kSpecRule, {{"rule", std::string(rule)}}});
}

}  // namespace kvoffload::common
