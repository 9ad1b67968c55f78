#include "daemon/engine/engine_resources.h"

#include <algorithm>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "common/status_macros.h"

namespace kvoffload::daemon {
namespace {

spdlog::logger* Log() {
  static spdlog::logger* const log = common::Logger("engine");
  return log;
}

// The node-cap reservation of `cost`; a refusal names `what` and every part of the cost.
absl::StatusOr<MemoryReservation> Reserve(MemoryBudget* budget, const EngineCost& cost,
                                          const std::string& what) {
  return MemoryReservation::Reserve(
      budget, cost.total_bytes,
      absl::StrCat(what, " (region ", cost.region_bytes, " bytes + index metadata ",
                   cost.index_bytes, " bytes",
                   cost.state_bytes == 0
                       ? std::string()
                       : absl::StrCat(" + durable state ", cost.state_bytes, " bytes"),
                   ")"));
}

bool Background(const RegionOptions& options) { return options.ready_chunk_bytes > 0; }

RegionOptions CreateOptions(const RegionOptions& options) {
  RegionOptions o = options;
  if (Background(options)) o.populate = false;
  return o;
}

// Rows usable from the start: all of them unless the region is prepared in the background.
uint64_t InitialReadyRows(const RegionOptions& options) {
  return Background(options) ? 0 : UINT64_MAX;
}

}  // namespace

absl::Status MakeRegionUsable(EngineResources& r, const common::Geometry& geometry,
                              CopyBackend* backend, const RegionOptions& options, bool populate) {
  Region* const region = r.region.get();
  if (!Background(options)) {
    return backend->RegisterRegion(region->data(), region->size(), geometry.row_bytes);
  }
  RegionPreparer::Options o;
  o.chunk_bytes = ChunkBytesFor(geometry.row_bytes, options.ready_chunk_bytes);
  // Pinning alone (a region adopted after a restart) goes one chunk at a time with a pause after
  // each: the driver serialises registrations anyway, and registrations back to back starved
  // the copies of the chunks already usable (H200: a first load waited 5.9 s at 64 GiB with
  // eight threads, 2.3 s with one and no pause).
  o.threads = !populate ? 1 : options.populate_threads > 0 ? options.populate_threads : 8;
  if (!populate) o.pause_between_pins = absl::Microseconds(options.adopted_pin_pause_us);
  o.populate = populate;
  RETURN_IF_ERROR(
      backend->DeclareRegion(region->data(), region->size(), geometry.row_bytes, o.chunk_bytes));
  SlotIndex* const index = r.index.get();
  const uint64_t row_bytes = geometry.row_bytes;
  r.preparer = RegionPreparer::Start(
      region, o, [backend, region](size_t c) { return backend->PinRegionChunk(region->data(), c); },
      [index, row_bytes](uint64_t ready_bytes) { index->MarkRowsReady(ready_bytes / row_bytes); });
  absl::Status first = r.preparer->WaitFirstChunk();
  if (!first.ok()) {
    r.preparer.reset();
    backend->UnregisterRegion(region->data());
    return first;
  }
  return absl::OkStatus();
}

RegionReadiness ReadinessOf(const Region& region, const RegionPreparer* preparer) {
  RegionReadiness r;
  r.total_bytes = region.size();
  if (preparer == nullptr) {
    r.ready_bytes = region.size();
    r.first_ready_seconds = r.fully_ready_seconds = region.populate_seconds();
    return r;
  }
  RegionPreparer::Progress p = preparer->progress();
  r.ready_bytes = p.ready_bytes;
  r.first_ready_seconds = p.first_ready_seconds;
  r.fully_ready_seconds = p.fully_ready_seconds;
  if (!p.status.ok()) r.error = p.status.ToString();
  return r;
}

absl::Status WaitFirstChunkUsable(RegionPreparer* preparer, absl::Duration timeout,
                                  const std::function<bool()>& cancelled) {
  if (preparer == nullptr) return absl::OkStatus();
  preparer->RetryNow();
  // In short steps, so that an engine closed or drained meanwhile (a shutdown, a drop) does
  // not keep its registering worker, and with it the server's shutdown, waiting.
  const absl::Time deadline = absl::Now() + timeout;
  for (;;) {
    const absl::Duration left = deadline - absl::Now();
    absl::Status s = preparer->WaitFirstChunkUsable(std::min(left, absl::Milliseconds(50)));
    if (s.code() != absl::StatusCode::kDeadlineExceeded || left <= absl::Milliseconds(50)) {
      return s;
    }
    if (cancelled()) {
      return absl::CancelledError("the engine closed while its first rows were prepared");
    }
  }
}

absl::StatusOr<EngineCost> CostOfEngine(const common::Geometry& geometry, uint64_t state_bytes) {
  if (geometry.num_rows > SlotIndex::kMaxRows) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "an engine of ", geometry.num_rows, " rows of ", geometry.row_bytes, " bytes exceeds the ",
        SlotIndex::kMaxRows, " rows one index can hold; lower budget_bytes"));
  }
  EngineCost cost;
  cost.region_bytes = geometry.capacity_bytes;
  cost.index_bytes = SlotIndex::MetadataBytesFor(geometry.num_rows);
  cost.state_bytes = state_bytes;
  auto add = [](uint64_t a, uint64_t b) { return a > UINT64_MAX - b ? UINT64_MAX : a + b; };
  cost.total_bytes = add(add(cost.region_bytes, cost.index_bytes), cost.state_bytes);
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
  ASSIGN_OR_RETURN(resources.reservation,
                   Reserve(budget, cost, absl::StrCat("engine ", spec.Key())));
  ASSIGN_OR_RETURN(resources.region, Region::Create(spec.Key(), geometry.capacity_bytes,
                                                    CreateOptions(region_options)));
  ASSIGN_OR_RETURN(resources.index,
                   SlotIndex::Create(geometry.num_rows, nullptr, InitialReadyRows(region_options)));
  RETURN_IF_ERROR(
      MakeRegionUsable(resources, geometry, backend, region_options, /*populate=*/true));
  return resources;
}

absl::StatusOr<EngineResources> AcquireDurableEngineResources(
    const StateIdentity& identity, const common::Geometry& geometry, MemoryBudget* budget,
    CopyBackend* backend, const RegionOptions& region_options, Durability* durability) {
  const common::EngineSpec& spec = identity.spec;
  if (durability == nullptr || !durability->enabled()) {
    return AcquireEngineResources(spec, geometry, budget, backend, region_options);
  }
  ASSIGN_OR_RETURN(uint64_t state_bytes, durability->StateBytes(identity, geometry));
  ASSIGN_OR_RETURN(EngineCost cost, CostOfEngine(geometry, state_bytes));
  EngineResources resources;
  ASSIGN_OR_RETURN(resources.reservation,
                   Reserve(budget, cost, absl::StrCat("engine ", spec.Key())));
  ASSIGN_OR_RETURN(resources.region, Region::Create(spec.Key(), geometry.capacity_bytes,
                                                    CreateOptions(region_options)));
  ASSIGN_OR_RETURN(std::unique_ptr<StateFile> state, durability->NewState(identity, geometry));
  const int state_fd = state->fd();
  // The index owns the state file and lives as long as the engine that calls this.
  StateFile* const file = state.get();
  resources.record_layout = [file](const std::vector<uint64_t>& pages) {
    file->RecordLayout(pages);
  };
  resources.rows_not_durable = [file] { return file->rows_not_durable(); };
  ASSIGN_OR_RETURN(resources.index, SlotIndex::Create(geometry.num_rows, std::move(state),
                                                      InitialReadyRows(region_options)));
  RETURN_IF_ERROR(
      MakeRegionUsable(resources, geometry, backend, region_options, /*populate=*/true));
  // Last: nothing above can fail any more, so the store never holds a region we then freed.
  if (absl::Status s =
          durability->Publish(identity.region_epoch, spec.Key(), resources.region->fd(), state_fd);
      !s.ok()) {
    Log()->error(
        "engine {}: its region cannot be handed to the fd store ({}); it is served but "
        "will not outlive this daemon",
        spec.Key(), s.ToString());
  }
  return resources;
}

absl::StatusOr<AdoptedResources> AdoptEngineResources(Durability::Restorable restorable,
                                                      MemoryBudget* budget, CopyBackend* backend,
                                                      const RegionOptions& region_options) {
  StateFile::Adopted& state = restorable.state;
  const common::EngineSpec& spec = state.identity.spec;
  const common::Geometry& geometry = state.geometry;
  ASSIGN_OR_RETURN(EngineCost cost, CostOfEngine(geometry, state.file->bytes()));
  AdoptedResources adopted;
  EngineResources& resources = adopted.resources;
  ASSIGN_OR_RETURN(resources.reservation,
                   Reserve(budget, cost, absl::StrCat("restored engine ", spec.Key())));
  ASSIGN_OR_RETURN(resources.region, Region::Adopt(restorable.region.release(), spec.Key(),
                                                   geometry.capacity_bytes, region_options));
  StateFile* const file = state.file.get();
  resources.rows_not_durable = [file] { return file->rows_not_durable(); };
  resources.layout = std::move(state.layout);
  if (!state.layout_recorded) {
    // No worker fixed the layout before: the first one after the restart does (and records it).
    resources.record_layout = [file](const std::vector<uint64_t>& pages) {
      file->RecordLayout(pages);
    };
  }
  const uint64_t rows_in_state = state.rows.size();
  ASSIGN_OR_RETURN(SlotIndex::RestoreResult restored,
                   SlotIndex::Restore(geometry.num_rows, std::move(state.rows), state.next_ticket,
                                      std::move(state.file), InitialReadyRows(region_options)));
  resources.index = std::move(restored.index);
  adopted.rows_dropped = restored.rows_dropped;
  // Parked rows (serving while pinning) come back as their chunks are pinned: they count as
  // restored; only refused entries are dropped.
  adopted.rows_restored = rows_in_state - restored.rows_dropped;
  RETURN_IF_ERROR(
      MakeRegionUsable(resources, geometry, backend, region_options, /*populate=*/false));
  return adopted;
}

}  // namespace kvoffload::daemon
