#include "proto/spec_convert.h"

#include "absl/strings/str_cat.h"
#include "common/limits.h"

namespace kvoffload {

absl::StatusOr<common::EngineSpec> SpecFromProto(const v1::EngineSpec& p) {
  common::EngineSpec s;
  s.engine_id = p.engine_id();
  s.dp_rank = p.dp_rank();
  s.world_size = p.world_size();
  s.local_world_size = p.local_world_size();
  s.tp = p.tp();
  s.pp = p.pp();
  s.pcp = p.pcp();
  s.dcp = p.dcp();
  switch (p.executor()) {
    case v1::EXECUTOR_UNI:
      s.executor = common::Executor::kUni;
      break;
    case v1::EXECUTOR_MP:
      s.executor = common::Executor::kMp;
      break;
    case v1::EXECUTOR_RAY:
      s.executor = common::Executor::kRay;
      break;
    case v1::EXECUTOR_EXTERNAL:
      s.executor = common::Executor::kExternal;
      break;
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("spec.executor must be UNI, MP, RAY or EXTERNAL (got ", p.executor(), ")"));
  }
  switch (p.attention()) {
    case v1::ATTENTION_MHA:
      s.attention = common::Attention::kMha;
      break;
    case v1::ATTENTION_MLA:
      s.attention = common::Attention::kMla;
      break;
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("spec.attention must be MHA or MLA (got ", p.attention(), ")"));
  }
  s.num_kv_groups = p.num_kv_groups();
  s.num_layers = p.num_layers();
  s.page_bytes = p.page_bytes();
  s.worker_bytes_per_block = p.worker_bytes_per_block();
  s.blocks_per_row = p.blocks_per_row() == 0 ? 1 : p.blocks_per_row();
  s.budget_bytes = p.budget_bytes();
  s.secondary_tiers.assign(p.secondary_tiers().begin(), p.secondary_tiers().end());
  s.rows_assigned_by_engine = p.rows_assigned_by_engine();
  s.stores_by_writer_only = p.stores_by_writer_only();
  if (static_cast<size_t>(p.member_uids_size()) > common::kMaxMembersPerEngine ||
      static_cast<size_t>(p.member_gids_size()) > common::kMaxMembersPerEngine) {
    return absl::InvalidArgumentError(absl::StrCat("spec: more than ",
                                                   common::kMaxMembersPerEngine,
                                                   " member_uids or member_gids"));
  }
  s.member_uids.assign(p.member_uids().begin(), p.member_uids().end());
  s.member_gids.assign(p.member_gids().begin(), p.member_gids().end());
  return s;
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

void SpecToProto(const common::EngineSpec& s, v1::EngineSpec* p) {
  p->set_engine_id(s.engine_id);
  p->set_dp_rank(s.dp_rank);
  p->set_world_size(s.world_size);
  p->set_local_world_size(s.local_world_size);
  p->set_tp(s.tp);
  p->set_pp(s.pp);
  p->set_pcp(s.pcp);
  p->set_dcp(s.dcp);
  switch (s.executor) {
    case common::Executor::kUni:
      p->set_executor(v1::EXECUTOR_UNI);
      break;
    case common::Executor::kMp:
      p->set_executor(v1::EXECUTOR_MP);
      break;
    case common::Executor::kRay:
      p->set_executor(v1::EXECUTOR_RAY);
      break;
    case common::Executor::kExternal:
      p->set_executor(v1::EXECUTOR_EXTERNAL);
      break;
  }
  p->set_attention(s.attention == common::Attention::kMla ? v1::ATTENTION_MLA : v1::ATTENTION_MHA);
  p->set_num_kv_groups(s.num_kv_groups);
  p->set_num_layers(s.num_layers);
  p->set_page_bytes(s.page_bytes);
  p->set_worker_bytes_per_block(s.worker_bytes_per_block);
  p->set_blocks_per_row(s.blocks_per_row);
  p->set_budget_bytes(s.budget_bytes);
  for (const std::string& tier : s.secondary_tiers) p->add_secondary_tiers(tier);
  p->set_rows_assigned_by_engine(s.rows_assigned_by_engine);
  p->set_stores_by_writer_only(s.stores_by_writer_only);
  for (uint32_t uid : s.member_uids) p->add_member_uids(uid);
  for (uint32_t gid : s.member_gids) p->add_member_gids(gid);
}

}  // namespace kvoffload
