#include "daemon/service/admin_service.h"

#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "daemon/service/convert.h"

namespace kvoffload::daemon {

std::vector<std::shared_ptr<Engine>> AdminService::Visible(const Caller& caller) const {
  std::vector<std::shared_ptr<Engine>> out;
  for (auto& engine : registry_->List()) {
    if (CheckEngineAdmin(caller, engine->owner_uid(), engine->key(), policy_, "see").ok()) {
      out.push_back(std::move(engine));
    }
  }
  return out;
}

grpc::Status AdminService::Stats(grpc::ServerContext* context, const v1::StatsRequest*,
                                 v1::StatsResponse* response) {
  auto caller = peers_->CallerOf(context);
  if (!caller.ok()) return ToGrpcStatus(caller.status());
  response->set_max_region_bytes(budget_->cap());
  response->set_reserved_bytes(budget_->reserved());
  response->set_backend(backend_->name());
  uint64_t region_bytes = 0;
  for (const auto& engine : registry_->List()) region_bytes += engine->Snapshot().region_bytes;
  // Node totals are the node's; engine lines only for engines the caller administers.
  for (const auto& engine : Visible(*caller)) {
    v1::EngineStats* stats = response->add_engines();
    ToProto(engine->Snapshot(), stats);
  }
  response->set_region_bytes(region_bytes);
  // A pool is shown to whoever administers one of its members (or the node).
  for (const auto& pool : registry_->ListPools()) {
    PoolSnapshot snapshot = pool->Snapshot();
    bool visible = IsNodeAdmin(*caller, policy_) || caller->uid == snapshot.owner_uid;
    for (const auto& engine : registry_->List()) {
      if (visible) break;
      visible = engine->pool() == pool &&
                CheckEngineAdmin(*caller, engine->owner_uid(), engine->key(), policy_, "see").ok();
    }
    if (visible) ToProto(snapshot, response->add_pools());
  }
  if (tiers_ != nullptr) {  // node totals, as region_bytes
    for (const TierManager::TierLine& line : tiers_->stats()) ToProto(line, response->add_tiers());
  }
  for (const auto& [device, bytes] : backend_->GpuMemoryBytes()) {
    (*response->mutable_gpu_memory_bytes())[device] = bytes;
  }
  for (const auto& [device, why] : backend_->FailedDevices()) {
    (*response->mutable_failed_devices())[device] = why;
  }
  response->set_uptime_seconds(absl::ToDoubleSeconds(absl::Now() - started_));
  return grpc::Status::OK;
}

grpc::Status AdminService::ListEngines(grpc::ServerContext* context, const v1::Empty*,
                                       v1::ListEnginesResponse* response) {
  auto caller = peers_->CallerOf(context);
  if (!caller.ok()) return ToGrpcStatus(caller.status());
  for (const auto& engine : Visible(*caller)) ToProto(engine->Snapshot(), response->add_engines());
  return grpc::Status::OK;
}

namespace {

// A dropped engine's records in the tiers go with it; a pool's stay (its other members use them).
std::shared_ptr<TierLink> PrivateTierLink(const Engine& engine) {
  return engine.pool() == nullptr ? engine.shared_tier_link() : nullptr;
}

void DropTierRecords(TierLink* link) {
  if (link == nullptr) return;
  absl::Status dropped = link->DropRecords();
  if (!dropped.ok()) {
    common::Logger("admin")->error("{}: its records in the tiers were not dropped: {}",
                                   link->label(), dropped.ToString());
  }
}

}  // namespace

grpc::Status AdminService::DropEngine(grpc::ServerContext* context,
                                      const v1::DropEngineRequest* request, v1::Empty*) {
  auto caller = peers_->CallerOf(context);
  if (!caller.ok()) return ToGrpcStatus(caller.status());
  if (request->engine_id().empty()) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "engine_id is empty");
  }
  std::shared_ptr<TierLink> link;
  absl::Status dropped = registry_->Drop(
      request->engine_id(), request->dp_rank(), request->force(), [&](const Engine& engine) {
        absl::Status allowed =
            CheckEngineAdmin(*caller, engine.owner_uid(), engine.key(), policy_, "drop");
        if (allowed.ok()) link = PrivateTierLink(engine);
        return allowed;
      });
  if (dropped.ok()) DropTierRecords(link.get());
  return ToGrpcStatus(dropped);
}

grpc::Status AdminService::Cleanup(grpc::ServerContext* context, const v1::CleanupRequest* request,
                                   v1::CleanupResponse* response) {
  auto caller = peers_->CallerOf(context);
  if (!caller.ok()) return ToGrpcStatus(caller.status());
  if (!request->drop_idle() && request->reset_engine_id().empty()) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                        "cleanup needs drop_idle or reset_engine_id");
  }
  if (!request->reset_engine_id().empty()) {
    auto engine = registry_->Find(request->reset_engine_id(), request->reset_dp_rank());
    if (!engine.ok()) return ToGrpcStatus(engine.status());
    absl::Status allowed =
        CheckEngineAdmin(*caller, (*engine)->owner_uid(), (*engine)->key(), policy_, "reset");
    if (!allowed.ok()) return ToGrpcStatus(allowed);
    // The tiers first: a Lookup between the two would promote what Reset just forgot.
    DropTierRecords((*engine)->tier_link());
    response->set_rows_reset((*engine)->index().Reset());
  }
  if (request->drop_idle()) {
    std::vector<std::shared_ptr<TierLink>> links;
    auto mine = [&](const Engine& engine) {
      absl::Status allowed =
          CheckEngineAdmin(*caller, engine.owner_uid(), engine.key(), policy_, "drop");
      if (allowed.ok()) links.push_back(PrivateTierLink(engine));  // approved is dropped
      return allowed;
    };
    for (const std::string& key : registry_->DropIdle(mine)) response->add_dropped(key);
    for (const auto& link : links) DropTierRecords(link.get());
  }
  return grpc::Status::OK;
}

}  // namespace kvoffload::daemon
