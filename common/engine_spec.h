// EngineSpec: what one engine (one DP replica of a serving engine) declares about its topology
// and KV layout. Plain data, no gRPC: the daemon converts from kvoffload.v1.EngineSpec at the
// service edge, `kvoffloadctl plan` builds it from flags.
#ifndef KVOFFLOAD_COMMON_ENGINE_SPEC_H_
#define KVOFFLOAD_COMMON_ENGINE_SPEC_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace kvoffload::common {

enum class Executor { kUni, kMp, kRay, kExternal };
enum class Attention { kMha, kMla };

absl::StatusOr<Executor> ParseExecutor(absl::string_view name);  // "uni", "mp", "ray", "external"
absl::StatusOr<Attention> ParseAttention(absl::string_view name);  // "mha", "mla"
const char* ExecutorName(Executor e);
// A comma-separated list of secondary tiers ("fs, obj"): names stripped of ASCII whitespace,
// empty ones dropped. The one rule for every text form (kvoffloadctl plan, the C ABI).
std::vector<std::string> ParseSecondaryTiers(absl::string_view comma_separated);
const char* AttentionName(Attention a);

// The fields are listed once more in common/engine_spec_fields.h, which every conversion walks:
// a new field goes there too (its header says how).
struct EngineSpec {
  std::string engine_id = "engine";
  uint32_t dp_rank = 0;
  uint32_t world_size = 1;
  // Ranks of this replica on this node. 0 = not declared: taken as world_size (single node),
  // except for ray/external launchers with world_size > 1, which must declare it.
  uint32_t local_world_size = 0;
  uint32_t tp = 1;
  uint32_t pp = 1;
  uint32_t pcp = 1;
  uint32_t dcp = 1;
  Executor executor = Executor::kMp;
  Attention attention = Attention::kMha;
  uint32_t num_kv_groups = 1;
  uint32_t num_layers = 1;
  uint64_t page_bytes = 0;
  uint64_t worker_bytes_per_block = 0;  // 0 = page_bytes × num_layers
  uint32_t blocks_per_row = 1;
  uint64_t budget_bytes = 0;            // per node, per DP replica
  std::vector<std::string> secondary_tiers;
  bool rows_assigned_by_engine = false;
  // Replicated (MLA) layout only: a store job finishes on the writer's (mp_rank 0) vote alone and
  // the other local workers never submit store parts (vLLM's 2026-08 connector lets only rank 0
  // store). Loads still need every local worker. No effect on a per-rank layout.
  bool stores_by_writer_only = false;
  // Further uids and groups allowed to use the engine besides its owner (daemon/access/access.h).
  // Only the creator's lists count; not compared by operator== (access, not layout).
  std::vector<uint32_t> member_uids;
  std::vector<uint32_t> member_gids;
  // Pools: the name of a node-wide pool this engine shares its rows with (empty: a private
  // region). Its members agree on the layout and on `model_identity`, an opaque string the
  // engine derives from everything that changes its KV bytes (model, revision, dtypes, block
  // size, ...); a pool's first member lets the uids/gids of its member lists join.
  std::string pool;
  std::string model_identity;

  // "engine_id/dp_rank": the key of the engine's region on this node.
  std::string Key() const;
  // Every field of the spec's identity, for messages ("world_size=8 local_world_size=4 ...").
  std::string DebugString() const;
  // DebugString and the access lists (member_uids=[..] member_gids=[..]): every field.
  std::string DescribeAll() const;
  // Field-by-field: a declared local_world_size never equals an undeclared (0) one.
  bool operator==(const EngineSpec& other) const;
  bool operator!=(const EngineSpec& other) const { return !(*this == other); }
};

}  // namespace kvoffload::common

#endif  // KVOFFLOAD_COMMON_ENGINE_SPEC_H_
