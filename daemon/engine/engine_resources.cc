#include "daemon/engine/engine_resources.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace kvoffload::daemon {

absl::StatusOr<EngineCost> CostOfEngine(const common::Geometry& geometry) {
  if (geometry.num_rows > SlotIndex::kMaxRows) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "an engine of ", geometry.num_rows, " rows of ", geometry.row_bytes,
        " bytes exceeds the ", SlotIndex::kMaxRows, " rows one index can hold; lower budget_bytes"));
  }
  EngineCost cost;
  cost.region_bytes = geometry.capacity_bytes;
  cost.index_bytes = SlotIndex::MetadataBytesFor(geometry.num_rows);
  cost.total_bytes = cost.region_bytes > UINT64_MAX - cost.index_bytes
                         ? UINT64_MAX
                         : cost.region_bytes + cost.index_bytes;
  return cost;
}

absl::StatusOr<EngineResources> AcquireEngineResources(const common::EngineSpec& spec,
                                                       const common::Geometry& geometry,
                                                       MemoryBudget* budget, CopyBackend* backend,
                                                       const RegionOptions& region_options) {
  // Admission before allocation: the whole cost (region + index metadata) is reserved first, so
  // a request that does not fit is refused in O(1) with nothing allocated, whatever its budget.
  // Then the region, then the index; each step is undone by RAII if a later one fails.
  ASSIGN_OR_RETURN(EngineCost cost, CostOfEngine(geometry));
  EngineResources resources;
  ASSIGN_OR_RETURN(
      resources.reservation,
      MemoryReservation::Reserve(budget, cost.total_bytes,
                                 absl::StrCat("engine ", spec.Key(), " (region ", cost.region_bytes,
                                              " bytes + index metadata ", cost.index_bytes,
                                              " bytes)")));
  ASSIGN_OR_RETURN(resources.region,
                   Region::Create(spec.Key(), geometry.capacity_bytes, region_options));
  RETURN_IF_ERROR(backend->RegisterRegion(resources.region->data(), resources.region->size(),
                                          geometry.row_bytes));
  absl::StatusOr<std::unique_ptr<SlotIndex>> index = SlotIndex::Create(geometry.num_rows);
  if (!index.ok()) {
    backend->UnregisterRegion(resources.region->data());
    return index.status();
  }
  resources.index = std::move(*index);
  return resources;
}

}  // namespace kvoffload::daemon
