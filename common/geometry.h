// Geometry: the single source of truth for node-local sizing and topology rules (DESIGN.md §2,
// seeds 000-002). The daemon, the client and `kvoffloadctl plan` all call ComputeGeometry.
//
//   ASSIGN_OR_RETURN(Geometry g, ComputeGeometry(spec));
//   ASSIGN_OR_RETURN(uint32_t slot, SlotOf(spec, g, mp_rank));
//
// Every rejection is common::SpecRule (common/refusals.h): reason spec_rule with metadata
// rule=<name>, for clients and tests, and a message that starts with "rule <name>: " for
// operators. Nothing here allocates memory for a region.
#ifndef KVOFFLOAD_COMMON_GEOMETRY_H_
#define KVOFFLOAD_COMMON_GEOMETRY_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/engine_spec.h"

namespace kvoffload::common {

inline constexpr uint64_t kRowAlignment = 4096;

struct Geometry {
  bool replicated = false;
  uint32_t num_copies = 1;
  uint32_t local_world_size = 1;  // resolved (never 0)
  uint32_t blocks_per_row = 1;
  uint64_t worker_bytes_per_block = 0;
  uint64_t slot_bytes = 0;  // blocks_per_row × worker_bytes_per_block
  uint64_t row_bytes = 0;   // round_up(num_copies × slot_bytes, 4096)
  uint64_t num_rows = 0;    // budget_bytes / row_bytes
  uint64_t capacity_bytes = 0;  // num_rows × row_bytes: exactly the resident region size

  // Byte offset of (row, slot) in the region.
  uint64_t SlotOffset(uint64_t row, uint32_t slot) const {
    return row * row_bytes + static_cast<uint64_t>(slot) * slot_bytes;
  }
  // Identity of the layout; see LayoutFingerprint.
  std::string Fingerprint() const;
  std::string DebugString() const;
};

// Checks the topology rules of DESIGN.md §2. INVALID_ARGUMENT for inconsistent values,
// FAILED_PRECONDITION for topologies this daemon does not support (pp, pcp, ...).
// Rules, in the order they are checked (the first failure is returned):
//   INVALID_ARGUMENT     engine_id_format (1-128 of [A-Za-z0-9._-]);
//                        positive_{world_size,tp,pp,pcp,dcp,num_layers,num_kv_groups,
//                                  page_bytes,blocks_per_row,budget_bytes};
//                        dcp_divides_tp;
//                        uni_executor_single_worker (uni needs world_size == 1);
//                        launcher_requires_local_world_size (ray/external, world_size > 1,
//                          local_world_size undeclared; declared, they are accepted: the
//                          daemon aggregates votes itself);
//                        local_world_size_divides_world_size;
//   FAILED_PRECONDITION  no_pipeline_parallel; no_prefill_context_parallel;
//                        secondary_tiers_need_node_local_replica;
//   INVALID_ARGUMENT     sizes_fit_in_64_bits (page_bytes × num_layers).
// ComputeGeometry adds sizes_fit_in_64_bits (slot and row bytes) and RESOURCE_EXHAUSTED
// budget_holds_a_row; SlotOf adds INVALID_ARGUMENT mp_rank_in_world.
absl::Status ValidateTopology(const EngineSpec& spec);

// Whether the replicated (single-copy MLA) layout applies. When `why_not` is given and the
// answer is false, it names the first clause of the gate that failed.
bool ReplicatedLayoutEligible(const EngineSpec& spec, std::string* why_not = nullptr);

// Validates and sizes. RESOURCE_EXHAUSTED when the budget holds no row.
absl::StatusOr<Geometry> ComputeGeometry(const EngineSpec& spec);

// The slot of a worker: 0 for replicated layouts, else mp_rank % local_world_size.
// INVALID_ARGUMENT when mp_rank >= world_size.
absl::StatusOr<uint32_t> SlotOf(const EngineSpec& spec, const Geometry& geometry,
                                uint32_t mp_rank);

// Whether this worker performs store copies (false only for replicated non-writers: mp_rank != 0).
bool IsStoreWriter(const Geometry& geometry, uint32_t mp_rank);

// Fingerprint of a layout including the per-tensor page sizes a worker registers, so that
// 2 blocks × 24 KiB and 4 blocks × 12 KiB (same row size) differ. Pass an empty list for the
// engine-level fingerprint.
std::string LayoutFingerprint(const Geometry& geometry, const std::vector<uint64_t>& page_bytes);

}  // namespace kvoffload::common

#endif  // KVOFFLOAD_COMMON_GEOMETRY_H_
