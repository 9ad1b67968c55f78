// The refusals clients act on: one constructor per rule, each giving its status a reason
// (common/error_info.h) besides code and message. The reasons are stable snake_case names,
// listed with their codes and metadata in proto/kvoffload/v1/error_info.proto (docs/api.md);
// python/kvoffload/_common.py mirrors them (python/tests/test_constants.py ties the three).
// A message may be reworded freely; a reason keeps its name and meaning.
//
//   RETURN_IF_ERROR(common::CheckRegionEpoch(absl::StrCat("engine ", key), sent, epoch_now));
//   return common::EngineNotFound(key, " on this node (call OpenEngine first)");
//
// Pure functions of their arguments: thread-safe.
#ifndef KVOFFLOAD_COMMON_REFUSALS_H_
#define KVOFFLOAD_COMMON_REFUSALS_H_

#include <cstddef>
#include <cstdint>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace kvoffload::common {

namespace reason {
// X(constant, name): every reason, once. Add one here, in error_info.proto's table and in
// python/kvoffload/_common.py's Reason (a test compares the three).
#define KVO_ERROR_REASONS(X)                         \
  X(kRegionEpochMismatch, "region_epoch_mismatch")   \
  X(kEngineNotFound, "engine_not_found")             \
  X(kKeyNotInIndex, "key_not_in_index")              \
  X(kSpecMismatch, "spec_mismatch")                  \
  X(kSpecRule, "spec_rule")
#define KVO_DECLARE_REASON(constant, name) inline constexpr char constant[] = name;
KVO_ERROR_REASONS(KVO_DECLARE_REASON)
#undef KVO_DECLARE_REASON
}  // namespace reason

// The region epoch rule, for every call that names the region it planned against (OpenEngine,
// RegisterWorker, index calls, job parts): OK when `planned` is 0 ("not checked") or equals
// `actual`; else FAILED_PRECONDITION region_epoch_mismatch. `actual` 0 means the region no
// longer exists. `who` starts the message ("engine llama/0", "job 7 of engine llama/0").
absl::Status CheckRegionEpoch(absl::string_view who, uint64_t planned, uint64_t actual);

// NOT_FOUND engine_not_found: "no engine <key><detail>".
absl::Status EngineNotFound(absl::string_view engine_key, absl::string_view detail = "");

// NOT_FOUND key_not_in_index: "<operation>: <key_name> is not in the index"; key_index is the
// key's position in the request.
absl::Status KeyNotInIndex(absl::string_view operation, size_t key_index,
                           absl::string_view key_name);

// FAILED_PRECONDITION spec_mismatch: "engine <key> exists with a different spec or geometry:
// <detail>".
absl::Status SpecMismatch(absl::string_view engine_key, absl::string_view detail);

// spec_rule with metadata rule=<rule>: "rule <rule>: <message>", with the rule's code
// (INVALID_ARGUMENT, FAILED_PRECONDITION or RESOURCE_EXHAUSTED; common/geometry.h lists them).
absl::Status SpecRule(absl::StatusCode code, absl::string_view rule, absl::string_view message);

}  // namespace kvoffload::common

#endif  // KVOFFLOAD_COMMON_REFUSALS_H_
