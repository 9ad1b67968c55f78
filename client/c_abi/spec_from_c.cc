#include "client/c_abi/spec_from_c.h"

#include <cstring>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/types/span.h"
#include "common/engine_spec_fields.h"
#include "common/limits.h"
#include "common/status_macros.h"

namespace kvoffload::client {
namespace {

#define KVO_C_EXECUTOR(e, NAME) \
  {common::Executor::e, KVO_EXECUTOR_##NAME, "KVO_EXECUTOR_" #NAME},
#define KVO_C_ATTENTION(e, NAME) \
  {common::Attention::e, KVO_ATTENTION_##NAME, "KVO_ATTENTION_" #NAME},
constexpr common::WireEnumValue<common::Executor> kExecutors[] = {
    KVOFFLOAD_EXECUTOR_VALUES(KVO_C_EXECUTOR)};
constexpr common::WireEnumValue<common::Attention> kAttentions[] = {
    KVOFFLOAD_ATTENTION_VALUES(KVO_C_ATTENTION)};
#undef KVO_C_EXECUTOR
#undef KVO_C_ATTENTION

// The table of an ENUM field's type (picked by overload).
absl::Span<const common::WireEnumValue<common::Executor>> CValues(const common::Executor*) {
  return kExecutors;
}
absl::Span<const common::WireEnumValue<common::Attention>> CValues(const common::Attention*) {
  return kAttentions;
}

absl::StatusOr<bool> FlagFromC(const char* name, int32_t value) {
  if (value != 0 && value != 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("engine spec: ", name, " is ", value, ", want 0 or 1"));
  }
  return value == 1;
}

absl::Status IdsFromC(const char* name, const uint32_t* ids, size_t n,
                      std::vector<uint32_t>* out) {
  if (ids == nullptr && n != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("engine spec: ", name, " is NULL with num_", name, " ", n));
  }
  if (n > common::kMaxMembersPerEngine) {
    return absl::InvalidArgumentError(absl::StrCat("engine spec: ", n, " ", name,
                                                   ", more than ",
                                                   common::kMaxMembersPerEngine));
  }
  if (n > 0) out->assign(ids, ids + n);
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<common::EngineSpec> SpecFromC(const kvo_engine_spec* c) {
  if (c == nullptr) return absl::InvalidArgumentError("engine spec is NULL");
  common::EngineSpec spec;
#define KVO_FROM_C_ID(f)                                                          \
  if (c->f == nullptr) return absl::InvalidArgumentError("engine spec: " #f " is NULL"); \
  spec.f = c->f;
#define KVO_FROM_C_NUMBER(f) spec.f = c->f;
// In a block each: ASSIGN_OR_RETURN names its temporary after the line, and the whole table
// expands on one.
#define KVO_FROM_C_ENUM(f)                                                                   \
  {                                                                                          \
    ASSIGN_OR_RETURN(spec.f, common::EnumFromWire("engine spec: " #f, c->f, CValues(&spec.f))); \
  }
#define KVO_FROM_C_FLAG(f) \
  { ASSIGN_OR_RETURN(spec.f, FlagFromC(#f, c->f)); }
#define KVO_FROM_C_TIERS(f) \
  if (c->f != nullptr) spec.f = common::ParseSecondaryTiers(c->f);
#define KVO_FROM_C_IDS(f) RETURN_IF_ERROR(IdsFromC(#f, c->f, c->num_##f, &spec.f));
  KVOFFLOAD_ENGINE_SPEC_FIELDS(KVO_FROM_C_ID, KVO_FROM_C_NUMBER, KVO_FROM_C_ENUM,
                               KVO_FROM_C_FLAG, KVO_FROM_C_TIERS, KVO_FROM_C_IDS)
#undef KVO_FROM_C_ID
#undef KVO_FROM_C_NUMBER
#undef KVO_FROM_C_ENUM
#undef KVO_FROM_C_FLAG
#undef KVO_FROM_C_TIERS
#undef KVO_FROM_C_IDS
  return spec;
}

CEngineSpec::CEngineSpec(common::EngineSpec spec) : spec_(std::move(spec)) {
  std::memset(&c_, 0, sizeof(c_));
#define KVO_TO_C_ID(f) c_.f = spec_.f.c_str();
#define KVO_TO_C_NUMBER(f) c_.f = spec_.f;
#define KVO_TO_C_ENUM(f) c_.f = common::EnumToWire(spec_.f, CValues(&spec_.f));
#define KVO_TO_C_FLAG(f) c_.f = spec_.f ? 1 : 0;
#define KVO_TO_C_TIERS(f)                  \
  f##_ = absl::StrJoin(spec_.f, ",");      \
  c_.f = f##_.empty() ? nullptr : f##_.c_str();
#define KVO_TO_C_IDS(f)                                  \
  c_.f = spec_.f.empty() ? nullptr : spec_.f.data();     \
  c_.num_##f = spec_.f.size();
  KVOFFLOAD_ENGINE_SPEC_FIELDS(KVO_TO_C_ID, KVO_TO_C_NUMBER, KVO_TO_C_ENUM, KVO_TO_C_FLAG,
                               KVO_TO_C_TIERS, KVO_TO_C_IDS)
#undef KVO_TO_C_ID
#undef KVO_TO_C_NUMBER
#undef KVO_TO_C_ENUM
#undef KVO_TO_C_FLAG
#undef KVO_TO_C_TIERS
#undef KVO_TO_C_IDS
}

}  // namespace kvoffload::client
