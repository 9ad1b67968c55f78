// Every field of EngineSpec, once, in the wire's order: the list that the proto conversion
// (proto/spec_convert.cc), the C ABI conversion (client/c_abi/spec_from_c.cc), kvo_engine_spec_init,
// EngineSpec::DebugString / operator== and the Python binding's field table
// (python/kvoffload/_native.py SPEC_FIELDS, checked against this file by
// python/tests/test_constants.py) all walk. The proto is the schema:
// client/c_abi/spec_from_c_test.cc sets every field of v1::EngineSpec through the descriptor and
// requires it to come back from C unchanged, so a proto field missing here fails that test.
//
// Adding a field `foo`:
//   1. kvoffload.proto: `foo = N;` in message EngineSpec (same name);
//   2. common::EngineSpec: the member `foo` with its default;
//   3. kvo_engine_spec (client/kvoffload_c.h): the member, appended, KVO_ABI_VERSION bumped;
//   4. a KIND(foo) line below, in proto order;
//   5. Python: a ("foo", KIND) entry in _native.SPEC_FIELDS (the ctypes struct and the dataclass
//      checks derive from it) and the dataclass field in _common.EngineSpec.
// A kind that is not listed here (a new type) needs a case in each consumer.
//
// Kinds: how each layer carries the field.
//   ID(f)      std::string      | proto bytes           | C const char* (NUL-terminated)
//   NUMBER(f)  uint32 / uint64  | the same               | the same
//   ENUM(f)    common enum      | v1 enum (0 = unset)    | int32 KVO_* value
//   FLAG(f)    bool             | bool                   | int32 0 or 1
//   TIERS(f)   vector<string>   | repeated bytes         | const char* comma list, NULL = none
//   IDS(f)     vector<uint32>   | repeated uint32        | const uint32* f + size_t num_f
// IDS are access lists (who may use the engine), not the spec's identity: operator== and
// DebugString skip them; DescribeAll prints them.
#ifndef KVOFFLOAD_COMMON_ENGINE_SPEC_FIELDS_H_
#define KVOFFLOAD_COMMON_ENGINE_SPEC_FIELDS_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "common/check.h"

#define KVOFFLOAD_ENGINE_SPEC_FIELDS(ID, NUMBER, ENUM, FLAG, TIERS, IDS) \
  ID(engine_id)                                                         \
  NUMBER(dp_rank)                                                       \
  NUMBER(world_size)                                                    \
  NUMBER(local_world_size)                                              \
  NUMBER(tp)                                                            \
  NUMBER(pp)                                                            \
  NUMBER(pcp)                                                           \
  NUMBER(dcp)                                                           \
  ENUM(executor)                                                        \
  ENUM(attention)                                                       \
  NUMBER(num_kv_groups)                                                 \
  NUMBER(num_layers)                                                    \
  NUMBER(page_bytes)                                                    \
  NUMBER(worker_bytes_per_block)                                        \
  NUMBER(blocks_per_row)                                                \
  NUMBER(budget_bytes)                                                  \
  TIERS(secondary_tiers)                                                \
  FLAG(rows_assigned_by_engine)                                         \
  IDS(member_uids)                                                      \
  IDS(member_gids)                                                      \
  FLAG(stores_by_writer_only)                                           \
  ID(pool)                                                              \
  ID(model_identity)

// For a consumer that does nothing with one kind.
#define KVOFFLOAD_SPEC_FIELD_SKIP(f)

// The values of the ENUM fields: X(common enumerator, NAME) where the proto's value is
// v1::<ENUM>_NAME and the C ABI's KVO_<ENUM>_NAME.
#define KVOFFLOAD_EXECUTOR_VALUES(X) X(kUni, UNI) X(kMp, MP) X(kRay, RAY) X(kExternal, EXTERNAL)
#define KVOFFLOAD_ATTENTION_VALUES(X) X(kMha, MHA) X(kMla, MLA)

namespace kvoffload::common {

// One enumerator and its value in another layer (the proto's or the C ABI's).
template <typename E>
struct WireEnumValue {
  E value;
  int wire;
  const char* wire_name;
};

// INVALID_ARGUMENT naming `what`, the value and every accepted one when `wire` is not in `table`.
template <typename E>
absl::StatusOr<E> EnumFromWire(absl::string_view what, int wire,
                               absl::Span<const WireEnumValue<E>> table) {
  std::string accepted;
  for (const WireEnumValue<E>& v : table) {
    if (v.wire == wire) return v.value;
    absl::StrAppend(&accepted, accepted.empty() ? "" : ", ", v.wire_name, " (", v.wire, ")");
  }
  return absl::InvalidArgumentError(
      absl::StrCat(what, " is ", wire, ", want one of ", accepted));
}

// Every enumerator must be in each table: a miss stops the process (CheckFailed, below). No test walks
// every enumerator yet; client/c_abi/spec_from_c_test.cc round-trips each enum field.
template <typename E>
int EnumToWire(E value, absl::Span<const WireEnumValue<E>> table) {
  for (const WireEnumValue<E>& v : table) {
    if (v.value == value) return v.wire;
  }
  common::CheckFailed(__FILE__, __LINE__, "EnumToWire",
                      absl::StrCat("enumerator ", static_cast<int>(value),
                                   " is missing from its wire table"));
}

}  // namespace kvoffload::common

#endif  // KVOFFLOAD_COMMON_ENGINE_SPEC_FIELDS_H_
