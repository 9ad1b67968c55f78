// Topology validation and node-local sizing (DESIGN.md §2). Pure functions of their arguments:
// thread-safe, no allocation of region memory, no logging.
#include "common/geometry.h"

#include <limits>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/refusals.h"
#include "common/status_macros.h"

namespace kvoffload::common {
namespace {

constexpr size_t kMaxEngineIdLength = 128;

absl::Status InvalidRule(absl::string_view rule, absl::string_view message) {
  return SpecRule(absl::StatusCode::kInvalidArgument, rule, message);
}

absl::Status UnsupportedRule(absl::string_view rule, absl::string_view message) {
  return SpecRule(absl::StatusCode::kFailedPrecondition, rule, message);
}

// a × b, or false when the product does not fit in 64 bits.
bool CheckedMul(uint64_t a, uint64_t b, uint64_t* product) {
  if (a != 0 && b > std::numeric_limits<uint64_t>::max() / a) return false;
  *product = a * b;
  return true;
}

absl::Status Overflow(absl::string_view what, uint64_t a, absl::string_view b_name, uint64_t b) {
  return InvalidRule("sizes_fit_in_64_bits",
                     absl::StrCat(what, " ", a, " x ", b_name, " ", b, " overflows 64 bits"));
}

bool IsLauncher(Executor executor) {
  return executor == Executor::kRay || executor == Executor::kExternal;
}

// local_world_size with "undeclared" resolved; 0 when it cannot be known (a multi-worker
// ray/external engine that did not declare it, which ValidateTopology rejects).
uint32_t ResolvedLocalWorldSize(const EngineSpec& spec) {
  if (spec.local_world_size != 0) return spec.local_world_size;
  if (IsLauncher(spec.executor) && spec.world_size > 1) return 0;
  return spec.world_size;
}

// page_bytes × num_layers, or false on overflow.
bool DefaultWorkerBytesPerBlock(const EngineSpec& spec, uint64_t* bytes) {
  return CheckedMul(spec.page_bytes, spec.num_layers, bytes);
}

absl::StatusOr<uint64_t> ResolvedWorkerBytesPerBlock(const EngineSpec& spec) {
  if (spec.worker_bytes_per_block != 0) return spec.worker_bytes_per_block;
  uint64_t bytes = 0;
  if (!DefaultWorkerBytesPerBlock(spec, &bytes)) {
    return Overflow("page_bytes", spec.page_bytes, "num_layers", spec.num_layers);
  }
  return bytes;
}

absl::Status CheckEngineId(const std::string& engine_id) {
  bool ok = !engine_id.empty() && engine_id.size() <= kMaxEngineIdLength;
  for (char c : engine_id) {
    if (!absl::ascii_isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '_' && c != '-') {
      ok = false;
    }
  }
  if (ok) return absl::OkStatus();
  return InvalidRule(
      "engine_id_format",
      absl::StrCat("engine_id \"", absl::CHexEscape(engine_id.substr(0, 64)),
                   engine_id.size() > 64 ? "..." : "", "\" (length ", engine_id.size(),
                   ") must be 1-", kMaxEngineIdLength, " characters of [A-Za-z0-9._-]"));
}

absl::Status CheckPositive(absl::string_view field, uint64_t value) {
  if (value > 0) return absl::OkStatus();
  return InvalidRule(absl::StrCat("positive_", field),
                     absl::StrCat(field, " must be positive, got ", value));
}

absl::Status CheckAllPositive(const EngineSpec& spec) {
  RETURN_IF_ERROR(CheckPositive("world_size", spec.world_size));
  RETURN_IF_ERROR(CheckPositive("tp", spec.tp));
  RETURN_IF_ERROR(CheckPositive("pp", spec.pp));
  RETURN_IF_ERROR(CheckPositive("pcp", spec.pcp));
  RETURN_IF_ERROR(CheckPositive("dcp", spec.dcp));
  RETURN_IF_ERROR(CheckPositive("num_layers", spec.num_layers));
  RETURN_IF_ERROR(CheckPositive("num_kv_groups", spec.num_kv_groups));
  RETURN_IF_ERROR(CheckPositive("page_bytes", spec.page_bytes));
  RETURN_IF_ERROR(CheckPositive("blocks_per_row", spec.blocks_per_row));
  RETURN_IF_ERROR(CheckPositive("budget_bytes", spec.budget_bytes));
  return absl::OkStatus();
}

// The launcher rules and the local_world_size rule (DESIGN.md §2, seed 000).
absl::Status CheckLocalTopology(const EngineSpec& spec) {
  if (spec.executor == Executor::kUni && spec.world_size != 1) {
    return InvalidRule(
        "uni_executor_single_worker",
        absl::StrCat("executor uni runs one worker, but world_size is ", spec.world_size));
  }
  if (IsLauncher(spec.executor) && spec.world_size > 1 && spec.local_world_size == 0) {
    return InvalidRule(
        "launcher_requires_local_world_size",
        absl::StrCat("executor ", ExecutorName(spec.executor), " with world_size ", spec.world_size,
                     " must declare local_world_size: its topology is unknown here"));
  }
  const uint32_t lws = ResolvedLocalWorldSize(spec);
  if (lws == 0 || lws > spec.world_size || spec.world_size % lws != 0) {
    return InvalidRule("local_world_size_divides_world_size",
                       absl::StrCat("local_world_size ", spec.local_world_size,
                                    " must be a positive divisor of world_size ", spec.world_size));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ValidateTopology(const EngineSpec& spec) {
  RETURN_IF_ERROR(CheckEngineId(spec.engine_id));
  RETURN_IF_ERROR(CheckAllPositive(spec));
  if (spec.tp % spec.dcp != 0) {
    return InvalidRule("dcp_divides_tp",
                       absl::StrCat("dcp ", spec.dcp, " must divide tp ", spec.tp));
  }
  RETURN_IF_ERROR(CheckLocalTopology(spec));
  if (spec.pp > 1) {
    return UnsupportedRule(
        "no_pipeline_parallel",
        absl::StrCat("pp ", spec.pp,
                     " is not supported: heterogeneous worker byte geometry is not negotiated"));
  }
  if (spec.pcp > 1) {
    return UnsupportedRule(
        "no_prefill_context_parallel",
        absl::StrCat("pcp ", spec.pcp,
                     " is not supported: heterogeneous worker byte geometry is not negotiated"));
  }
  const uint32_t lws = ResolvedLocalWorldSize(spec);
  if (!spec.secondary_tiers.empty() && lws != spec.world_size) {
    return UnsupportedRule("secondary_tiers_need_node_local_replica",
                           absl::StrCat("secondary tiers [",
                                        absl::CHexEscape(absl::StrJoin(spec.secondary_tiers, ",")),
                                        "] need the replica on one node, but local_world_size ",
                                        lws, " != world_size ", spec.world_size));
  }
  return ResolvedWorkerBytesPerBlock(spec).status();
}

bool ReplicatedLayoutEligible(const EngineSpec& spec, std::string* why_not) {
  std::string reason;
  uint64_t expected_wbpb = 0;
  const bool wbpb_fits = DefaultWorkerBytesPerBlock(spec, &expected_wbpb);
  const uint32_t lws = ResolvedLocalWorldSize(spec);
  if (spec.attention != Attention::kMla || spec.num_kv_groups != 1) {
    reason = absl::StrCat("single bare MLA group: attention=", AttentionName(spec.attention),
                          " num_kv_groups=", spec.num_kv_groups);
  } else if (!wbpb_fits ||
             (spec.worker_bytes_per_block != 0 && spec.worker_bytes_per_block != expected_wbpb)) {
    reason =
        absl::StrCat("worker_bytes_per_block == page_bytes * num_layers: worker_bytes_per_block=",
                     spec.worker_bytes_per_block, " page_bytes=", spec.page_bytes,
                     " num_layers=", spec.num_layers);
  } else if (spec.tp <= 1) {
    reason = absl::StrCat("tp > 1: tp=", spec.tp);
  } else if (spec.pp != 1 || spec.pcp != 1 || spec.dcp != 1) {
    reason =
        absl::StrCat("pp == pcp == dcp == 1: pp=", spec.pp, " pcp=", spec.pcp, " dcp=", spec.dcp);
  } else if (spec.world_size != spec.tp) {
    reason = absl::StrCat("world_size == tp: world_size=", spec.world_size, " tp=", spec.tp);
  } else if (lws != spec.world_size) {
    reason =
        absl::StrCat("node-local replica: local_world_size=", lws, " world_size=", spec.world_size);
  }
  if (why_not != nullptr) *why_not = reason;
  return reason.empty();
}

absl::StatusOr<Geometry> ComputeGeometry(const EngineSpec& spec) {
  RETURN_IF_ERROR(ValidateTopology(spec));
  Geometry g;
  g.replicated = ReplicatedLayoutEligible(spec);
  g.local_world_size = ResolvedLocalWorldSize(spec);
  g.num_copies = g.replicated ? 1 : g.local_world_size;
  g.blocks_per_row = spec.blocks_per_row;
  ASSIGN_OR_RETURN(g.worker_bytes_per_block, ResolvedWorkerBytesPerBlock(spec));
  if (!CheckedMul(g.blocks_per_row, g.worker_bytes_per_block, &g.slot_bytes)) {
    return Overflow("blocks_per_row", g.blocks_per_row, "worker_bytes_per_block",
                    g.worker_bytes_per_block);
  }
  uint64_t copies_bytes = 0;
  if (!CheckedMul(g.num_copies, g.slot_bytes, &copies_bytes) ||
      copies_bytes > std::numeric_limits<uint64_t>::max() - (kRowAlignment - 1)) {
    return Overflow("num_copies", g.num_copies, "slot_bytes", g.slot_bytes);
  }
  g.row_bytes = (copies_bytes + kRowAlignment - 1) / kRowAlignment * kRowAlignment;
  g.num_rows = spec.budget_bytes / g.row_bytes;
  if (g.num_rows == 0) {
    return SpecRule(absl::StatusCode::kResourceExhausted, "budget_holds_a_row",
                    absl::StrCat("budget_bytes ", spec.budget_bytes, " holds no row of ",
                                 g.row_bytes, " bytes (", g.num_copies, " copies x ", g.slot_bytes,
                                 " slot bytes, rounded up to ", kRowAlignment, ")"));
  }
  g.capacity_bytes = g.num_rows * g.row_bytes;
  return g;
}

absl::StatusOr<uint32_t> SlotOf(const EngineSpec& spec, const Geometry& geometry,
                                uint32_t mp_rank) {
  if (mp_rank >= spec.world_size) {
    return InvalidRule(
        "mp_rank_in_world",
        absl::StrCat("mp_rank ", mp_rank, " must be less than world_size ", spec.world_size));
  }
  if (geometry.replicated) return 0u;
  if (geometry.local_world_size == 0) {
    return InvalidRule("local_world_size_divides_world_size",
                       "geometry has local_world_size 0; compute it with ComputeGeometry");
  }
  return mp_rank % geometry.local_world_size;
}

bool IsStoreWriter(const Geometry& geometry, uint32_t mp_rank) {
  return !geometry.replicated || mp_rank == 0;
}

std::string LayoutFingerprint(const Geometry& geometry, const std::vector<uint64_t>& page_bytes) {
  return absl::StrCat("replicated=", geometry.replicated ? 1 : 0, " copies=", geometry.num_copies,
                      " blocks_per_row=", geometry.blocks_per_row,
                      " worker_bytes_per_block=", geometry.worker_bytes_per_block,
                      " row_bytes=", geometry.row_bytes, " pages=[", absl::StrJoin(page_bytes, ","),
                      "]");
}

std::string Geometry::Fingerprint() const { return LayoutFingerprint(*this, {}); }

std::string Geometry::DebugString() const {
  return absl::StrCat("replicated=", replicated ? 1 : 0, " num_copies=", num_copies,
                      " local_world_size=", local_world_size, " blocks_per_row=", blocks_per_row,
                      " worker_bytes_per_block=", worker_bytes_per_block,
                      " slot_bytes=", slot_bytes, " row_bytes=", row_bytes, " num_rows=", num_rows,
                      " capacity_bytes=", capacity_bytes);
}

}  // namespace kvoffload::common
