#include "client/c_abi/spec_from_c.h"

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/limits.h"

namespace kvoffload::client {

absl::StatusOr<common::EngineSpec> SpecFromC(const kvo_engine_spec* c) {
  if (c == nullptr) return absl::InvalidArgumentError("engine spec is NULL");
  if (c->engine_id == nullptr) return absl::InvalidArgumentError("engine spec: engine_id is NULL");
  common::EngineSpec spec;
  spec.engine_id = c->engine_id;
  spec.dp_rank = c->dp_rank;
  spec.world_size = c->world_size;
  spec.local_world_size = c->local_world_size;
  spec.tp = c->tp;
  spec.pp = c->pp;
  spec.pcp = c->pcp;
  spec.dcp = c->dcp;
  switch (c->executor) {
    case KVO_EXECUTOR_UNI: spec.executor = common::Executor::kUni; break;
    case KVO_EXECUTOR_MP: spec.executor = common::Executor::kMp; break;
    case KVO_EXECUTOR_RAY: spec.executor = common::Executor::kRay; break;
    case KVO_EXECUTOR_EXTERNAL: spec.executor = common::Executor::kExternal; break;
    default:
      return absl::InvalidArgumentError(absl::StrCat(
          "engine spec: executor ", c->executor,
          " is not one of KVO_EXECUTOR_UNI (0), _MP (1), _RAY (2), _EXTERNAL (3)"));
  }
  switch (c->attention) {
    case KVO_ATTENTION_MHA: spec.attention = common::Attention::kMha; break;
    case KVO_ATTENTION_MLA: spec.attention = common::Attention::kMla; break;
    default:
      return absl::InvalidArgumentError(absl::StrCat(
          "engine spec: attention ", c->attention,
          " is not one of KVO_ATTENTION_MHA (0), KVO_ATTENTION_MLA (1)"));
  }
  spec.num_kv_groups = c->num_kv_groups;
  spec.num_layers = c->num_layers;
  spec.blocks_per_row = c->blocks_per_row;
  spec.page_bytes = c->page_bytes;
  spec.worker_bytes_per_block = c->worker_bytes_per_block;
  spec.budget_bytes = c->budget_bytes;
  if (c->secondary_tiers != nullptr) {
    spec.secondary_tiers = common::ParseSecondaryTiers(c->secondary_tiers);
  }
  if (c->rows_assigned_by_engine != 0 && c->rows_assigned_by_engine != 1) {
    return absl::InvalidArgumentError(absl::StrCat("engine spec: rows_assigned_by_engine is ",
                                                   c->rows_assigned_by_engine, ", want 0 or 1"));
  }
  spec.rows_assigned_by_engine = c->rows_assigned_by_engine == 1;
  if (c->stores_by_writer_only != 0 && c->stores_by_writer_only != 1) {
    return absl::InvalidArgumentError(absl::StrCat("engine spec: stores_by_writer_only is ",
                                                   c->stores_by_writer_only, ", want 0 or 1"));
  }
  spec.stores_by_writer_only = c->stores_by_writer_only == 1;
  if ((c->member_uids == nullptr && c->num_member_uids != 0) ||
      (c->member_gids == nullptr && c->num_member_gids != 0)) {
    return absl::InvalidArgumentError(
        "engine spec: member_uids / member_gids is NULL with a non-zero count");
  }
  if (c->num_member_uids > common::kMaxMembersPerEngine ||
      c->num_member_gids > common::kMaxMembersPerEngine) {
    return absl::InvalidArgumentError(absl::StrCat(
        "engine spec: more than ", common::kMaxMembersPerEngine, " member uids or gids"));
  }
  if (c->num_member_uids > 0) {
    spec.member_uids.assign(c->member_uids, c->member_uids + c->num_member_uids);
  }
  if (c->num_member_gids > 0) {
    spec.member_gids.assign(c->member_gids, c->member_gids + c->num_member_gids);
  }
  return spec;
}

}  // namespace kvoffload::client
