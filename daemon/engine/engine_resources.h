// EngineResources: what an engine holds of the node — its node-cap reservation, its region
// (registered with the copy backend) and its row index — and the admission rule that acquires
// them (DESIGN.md §3 "Admission before allocation").
//
//   ASSIGN_OR_RETURN(EngineCost cost, CostOfEngine(geometry));
//   ASSIGN_OR_RETURN(EngineResources resources,
//                    AcquireEngineResources(spec, geometry, budget, backend, region_options));
//   ... an Engine takes them over; its destructor unregisters the region ...
//
// Thread-safety: the functions are thread-safe (the budget and backend are). Ownership: the
// returned resources own the reservation, region and index; the region is registered with
// `backend` and must be unregistered (backend->UnregisterRegion(region->data())) before the
// region is destroyed — Engine's destructor does it.
#ifndef KVOFFLOAD_DAEMON_ENGINE_ENGINE_RESOURCES_H_
#define KVOFFLOAD_DAEMON_ENGINE_ENGINE_RESOURCES_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/engine_spec.h"
#include "common/geometry.h"
#include "daemon/copy/copy_backend.h"
#include "daemon/index/slot_index.h"
#include "daemon/region/memory_budget.h"
#include "daemon/region/region.h"
#include "daemon/region/region_preparer.h"
#include "daemon/restart/durability.h"

namespace kvoffload::daemon {

// What an engine costs the node, charged to the node cap before anything is allocated.
struct EngineCost {
  uint64_t region_bytes = 0;
  uint64_t index_bytes = 0;  // SlotIndex::MetadataBytesFor(num_rows)
  uint64_t state_bytes = 0;  // the durable state file (durable regions); 0 when not durable
  uint64_t total_bytes = 0;  // the sum; UINT64_MAX when it does not fit 64 bits
};

// The whole cost of an engine of `geometry`, arithmetically (nothing is allocated), with a
// durable state file of `state_bytes` (Durability::StateBytes).
// RESOURCE_EXHAUSTED when it cannot be held by any node: more rows than one index can number.
absl::StatusOr<EngineCost> CostOfEngine(const common::Geometry& geometry,
                                        uint64_t state_bytes = 0);

struct EngineResources {
  MemoryReservation reservation;
  std::unique_ptr<Region> region;  // registered with the backend
  std::unique_ptr<SlotIndex> index;
  // The layout identity (per-tensor page sizes) the rows were stored with, when the engine's
  // rows outlive a daemon: restored from the state file; empty when no worker has fixed it yet.
  // A worker with another layout is refused (WorkerSessions::CheckAttach).
  std::vector<uint64_t> layout;
  // Called once, with the engine's lock held, when the first worker fixes the layout — before
  // any row can become READY — so that a restored engine knows it (the state file records it).
  // Must be quick (a few stores into the state memfd). Empty: nothing to record.
  std::function<void(const std::vector<uint64_t>&)> record_layout;
  // Rows READY now or before whose key was too long for the durable state (StateFile::
  // rows_not_durable): served, but they do not outlive the daemon. Empty when not durable.
  std::function<uint64_t()> rows_not_durable;
  // Serve while pinning (region_options.ready_chunk_bytes > 0): populates and pins the region
  // chunk by chunk and raises the index's readiness watermark as it goes. Declared last, so that
  // it stops before the index and region go; the owner stops it (reset) before it unregisters
  // the region. Null when the whole region was ready before the resources were returned.
  std::unique_ptr<RegionPreparer> preparer;
};

// Makes `r.region` usable for `r.index`: registered whole (RegisterRegion), or, with
// options.ready_chunk_bytes > 0, declared to the backend and prepared in the background
// (r.preparer; populating each chunk first when `populate`), returning once chunk 0 is usable or
// waits for a device. On failure nothing stays registered. What every Acquire/Adopt above uses;
// public for the GPU benchmark (tests/gpu/restart_pin_bench.cc).
absl::Status MakeRegionUsable(EngineResources& r, const common::Geometry& geometry,
                              CopyBackend* backend, const RegionOptions& options, bool populate);

// Ready vs total bytes of `resources`' region: all of it without a preparer.
struct RegionReadiness {
  uint64_t ready_bytes = 0;
  uint64_t total_bytes = 0;
  double first_ready_seconds = 0;  // -1 while nothing is ready
  double fully_ready_seconds = 0;  // -1 while not all is ready
  std::string error;               // why preparing stopped; empty if it did not fail
};
RegionReadiness ReadinessOf(const Region& region, const RegionPreparer* preparer);
// Serve while pinning: retries the pin of chunk 0 at once (its device context may have just
// come) and waits, at most `timeout`, until it is usable — in short steps, CANCELLED as soon as
// `cancelled()` says so. OK at once without a preparer.
absl::Status WaitFirstChunkUsable(RegionPreparer* preparer, absl::Duration timeout,
                                  const std::function<bool()>& cancelled);

// Reserves the whole cost (CostOfEngine) against the node cap, then creates and populates the
// region, registers it with the backend and builds the index, in that order. With
// region_options.ready_chunk_bytes > 0 (serve while pinning) the region is mapped unpopulated,
// the index starts with no usable row, the region is declared to the backend, and this returns
// once its first chunk is populated (and pinned, where a device can pin it now): the preparer
// does the rest in the background. An engine that does
// not fit is RESOURCE_EXHAUSTED in O(1) time with nothing allocated; on any failure nothing is
// left allocated, registered or reserved.
absl::StatusOr<EngineResources> AcquireEngineResources(const common::EngineSpec& spec,
                                                       const common::Geometry& geometry,
                                                       MemoryBudget* budget, CopyBackend* backend,
                                                       const RegionOptions& region_options);

// The same for an engine whose rows outlive the daemon (durable regions; `durability` enabled): its
// state file is charged with the rest, created after the region, and owned by the index as its
// journal; both memfds go to the fd store (Durability::Publish) before this returns. A failure
// to store them is logged and the engine is served without durability rather than refused.
// With durability disabled, exactly AcquireEngineResources.
absl::StatusOr<EngineResources> AcquireDurableEngineResources(
    const StateIdentity& identity, const common::Geometry& geometry, MemoryBudget* budget,
    CopyBackend* backend, const RegionOptions& region_options, Durability* durability);

// The resources of an engine a previous daemon left in the fd store: charged to the node cap
// (RESOURCE_EXHAUSTED when it no longer fits; nothing is mapped then), the region adopted
// (Region::Adopt: not populated again) and registered, the index restored from the state file's
// READY rows (SlotIndex::Restore) with the state file as its journal. Serving while pinning, the
// region is pinned again chunk by chunk (not populated: its pages are there) and restored rows
// above the ready prefix are parked — Lookup misses them — until their chunk is pinned.
struct AdoptedResources {
  EngineResources resources;
  uint64_t rows_restored = 0;
  uint64_t rows_dropped = 0;
};
absl::StatusOr<AdoptedResources> AdoptEngineResources(Durability::Restorable restorable,
                                                      MemoryBudget* budget, CopyBackend* backend,
                                                      const RegionOptions& region_options);
}  // namespace kvoffload::daemon

#endif  // KVOFFLOAD_DAEMON_ENGINE_ENGINE_RESOURCES_H_
