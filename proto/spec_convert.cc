#include "proto/spec_convert.h"

#include "absl/strings/str_cat.h"
#include "absl/types/span.h"
#include "common/engine_spec_fields.h"
#include "common/limits.h"
#include "common/status_macros.h"

namespace kvoffload {
namespace {

#define KVO_PROTO_EXECUTOR(e, NAME) {common::Executor::e, v1::EXECUTOR_##NAME, "EXECUTOR_" #NAME},
#define KVO_PROTO_ATTENTION(e, NAME) \
  {common::Attention::e, v1::ATTENTION_##NAME, "ATTENTION_" #NAME},
constexpr common::WireEnumValue<common::Executor> kExecutors[] = {
    KVOFFLOAD_EXECUTOR_VALUES(KVO_PROTO_EXECUTOR)};
constexpr common::WireEnumValue<common::Attention> kAttentions[] = {
    KVOFFLOAD_ATTENTION_VALUES(KVO_PROTO_ATTENTION)};
#undef KVO_PROTO_EXECUTOR
#undef KVO_PROTO_ATTENTION

// The table of an ENUM field's type (picked by overload).
absl::Span<const common::WireEnumValue<common::Executor>> ProtoValues(const common::Executor*) {
  return kExecutors;
}
absl::Span<const common::WireEnumValue<common::Attention>> ProtoValues(const common::Attention*) {
  return kAttentions;
}

}  // namespace

absl::StatusOr<common::EngineSpec> SpecFromProto(const v1::EngineSpec& p) {
  common::EngineSpec s;
#define KVO_FROM_PROTO_COPY(f) s.f = p.f();
// In a block: ASSIGN_OR_RETURN names its temporary after the line, and the table is one line.
#define KVO_FROM_PROTO_ENUM(f)                                                           \
  {                                                                                      \
    ASSIGN_OR_RETURN(s.f, common::EnumFromWire("spec." #f, p.f(), ProtoValues(&s.f)));  \
  }
#define KVO_FROM_PROTO_LIST(f) s.f.assign(p.f().begin(), p.f().end());
#define KVO_FROM_PROTO_IDS(f)                                                                  \
  if (static_cast<size_t>(p.f##_size()) > common::kMaxMembersPerEngine) {                      \
    return absl::InvalidArgumentError(absl::StrCat("spec." #f ": ", p.f##_size(),              \
                                                   " ids, more than ",                          \
                                                   common::kMaxMembersPerEngine));              \
  }                                                                                            \
  KVO_FROM_PROTO_LIST(f)
  KVOFFLOAD_ENGINE_SPEC_FIELDS(KVO_FROM_PROTO_COPY, KVO_FROM_PROTO_COPY, KVO_FROM_PROTO_ENUM,
                               KVO_FROM_PROTO_COPY, KVO_FROM_PROTO_LIST, KVO_FROM_PROTO_IDS)
#undef KVO_FROM_PROTO_COPY
#undef KVO_FROM_PROTO_ENUM
#undef KVO_FROM_PROTO_LIST
#undef KVO_FROM_PROTO_IDS
  if (s.blocks_per_row == 0) s.blocks_per_row = 1;  // the wire's 0 = unset = 1
  return s;
}

void SpecToProto(const common::EngineSpec& s, v1::EngineSpec* p) {
#define KVO_TO_PROTO_SET(f) p->set_##f(s.f);
#define KVO_TO_PROTO_ENUM(f) \
  p->set_##f(static_cast<decltype(p->f())>(common::EnumToWire(s.f, ProtoValues(&s.f))));
#define KVO_TO_PROTO_LIST(f) \
  for (const auto& item : s.f) p->add_##f(item);
  KVOFFLOAD_ENGINE_SPEC_FIELDS(KVO_TO_PROTO_SET, KVO_TO_PROTO_SET, KVO_TO_PROTO_ENUM,
                               KVO_TO_PROTO_SET, KVO_TO_PROTO_LIST, KVO_TO_PROTO_LIST)
#undef KVO_TO_PROTO_SET
#undef KVO_TO_PROTO_ENUM
#undef KVO_TO_PROTO_LIST
}

void GeometryToProto(const common::Geometry& g, v1::Geometry* p) {
  p->set_replicated(g.replicated);
  p->set_num_copies(g.num_copies);
  p->set_blocks_per_row(g.blocks_per_row);
  p->set_worker_bytes_per_block(g.worker_bytes_per_block);
  p->set_slot_bytes(g.slot_bytes);
  p->set_row_bytes(g.row_bytes);
  p->set_num_rows(g.num_rows);
  p->set_capacity_bytes(g.capacity_bytes);
  p->set_fingerprint(g.Fingerprint());
  p->set_local_world_size(g.local_world_size);
}

common::Geometry GeometryFromProto(const v1::Geometry& p) {
  common::Geometry g;
  g.replicated = p.replicated();
  g.num_copies = p.num_copies();
  g.local_world_size = p.local_world_size();
  g.blocks_per_row = p.blocks_per_row();
  g.worker_bytes_per_block = p.worker_bytes_per_block();
  g.slot_bytes = p.slot_bytes();
  g.row_bytes = p.row_bytes();
  g.num_rows = p.num_rows();
  g.capacity_bytes = p.capacity_bytes();
  return g;
}

}  // namespace kvoffload
