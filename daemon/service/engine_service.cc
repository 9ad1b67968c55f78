#include "daemon/service/engine_service.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/limits.h"
#include "common/refusals.h"
#include "daemon/access/access.h"
#include "daemon/service/convert.h"

namespace kvoffload::daemon {

grpc::Status EngineService::OpenEngine(grpc::ServerContext* context,
                                       const v1::OpenEngineRequest* request,
                                       v1::OpenEngineResponse* response) {
  auto caller = peers_->CallerOf(context);
  if (!caller.ok()) return ToGrpcStatus(caller.status());
  auto spec = SpecFromProto(request->spec());
  if (!spec.ok()) return ToGrpcStatus(spec.status());
  auto opened = registry_->Open(*spec, request->region_epoch(), &*caller);
  if (!opened.ok()) return ToGrpcStatus(opened.status());
  GeometryToProto(opened->engine->geometry(), response->mutable_geometry());
  response->set_created(opened->created);
  response->set_region_epoch(opened->engine->region_epoch());
  response->set_owner_uid(opened->engine->owner_uid());
  return grpc::Status::OK;
}

absl::StatusOr<std::shared_ptr<Engine>> EngineService::IndexedEngine(
    grpc::ServerContext* context, const std::string& engine_id, uint32_t dp_rank,
    const char* action) {
  auto caller = peers_->CallerOf(context);
  if (!caller.ok()) return caller.status();
  auto engine = registry_->Find(engine_id, dp_rank);
  if (!engine.ok()) return engine.status();
  // Before anything else about the engine is looked at or told.
  absl::Status allowed = CheckEngineUse(*caller, (*engine)->owner_uid(), (*engine)->spec(), action);
  if (!allowed.ok()) return allowed;
  if ((*engine)->spec().rows_assigned_by_engine) {
    return absl::FailedPreconditionError(
        absl::StrCat("engine ", (*engine)->key(),
                     " assigns its rows itself (rows_assigned_by_engine); the daemon index is "
                     "not used for it"));
  }
  return engine;
}

absl::StatusOr<EngineService::IndexRequest> EngineService::ResolveIndexRequest(
    grpc::ServerContext* context, const char* action, const std::string& engine_id,
    uint32_t dp_rank, uint64_t region_epoch,
    const google::protobuf::RepeatedPtrField<std::string>& keys) {
  auto engine = IndexedEngine(context, engine_id, dp_rank, action);
  if (!engine.ok()) return engine.status();
  if (absl::Status s = common::CheckRegionEpoch(absl::StrCat("engine ", (*engine)->key()),
                                                region_epoch, (*engine)->region_epoch());
      !s.ok()) {
    return s;
  }
  auto parsed = KeysFromProto(keys);
  if (!parsed.ok()) return parsed.status();
  return IndexRequest{std::move(*engine), std::move(*parsed)};
}

grpc::Status EngineService::Lookup(grpc::ServerContext* context, const v1::KeysRequest* request,
                                   v1::LookupResponse* response) {
  auto req = ResolveIndexRequest(context, "look up keys in", request->engine_id(),
                                 request->dp_rank(), request->region_epoch(),
                                 request->keys());
  if (!req.ok()) return ToGrpcStatus(req.status());
  const uint32_t member = req->engine->index_member();
  std::vector<SlotIndex::KeyState> states = req->engine->index().Lookup(req->keys, member);
  // Misses the node's tiers hold are promoted, and answered HIT_PENDING while they are read.
  if (TierLink* link = req->engine->tier_link()) link->Promote(req->keys, member, &states);
  for (SlotIndex::KeyState s : states) {
    switch (s) {
      case SlotIndex::KeyState::kMiss:
        response->add_states(v1::KEY_STATE_MISS);
        break;
      case SlotIndex::KeyState::kHit:
        response->add_states(v1::KEY_STATE_HIT);
        break;
      case SlotIndex::KeyState::kHitPending:
        response->add_states(v1::KEY_STATE_HIT_PENDING);
        break;
    }
  }
  return grpc::Status::OK;
}

grpc::Status EngineService::PrepareStore(grpc::ServerContext* context,
                                         const v1::KeysRequest* request,
                                         v1::PrepareStoreResponse* response) {
  auto req = ResolveIndexRequest(context, "prepare a store in", request->engine_id(),
                                 request->dp_rank(), request->region_epoch(),
                                 request->keys());
  if (!req.ok()) return ToGrpcStatus(req.status());
  auto result = req->engine->index().PrepareStore(req->keys, req->engine->index_member());
  if (!result.ok()) return ToGrpcStatus(result.status());
  for (const std::string& k : result->keys) response->add_keys(k);
  // Rows go out as handles with the call's ticket: a part naming them is refused once a row has
  // been handed to another key (SlotIndex, "Row handles").
  for (uint64_t r : result->rows) response->add_rows(StoreHandle(result->ticket, r));
  for (const std::string& k : result->evicted_keys) response->add_evicted_keys(k);
  return grpc::Status::OK;
}

grpc::Status EngineService::CompleteStore(grpc::ServerContext* context,
                                          const v1::CompleteStoreRequest* request, v1::Empty*) {
  auto req = ResolveIndexRequest(context, "complete a store in", request->engine_id(),
                                 request->dp_rank(), request->region_epoch(),
                                 request->keys());
  if (!req.ok()) return ToGrpcStatus(req.status());
  return ToGrpcStatus(req->engine->index().CompleteStore(req->keys, request->success()));
}

grpc::Status EngineService::PrepareLoad(grpc::ServerContext* context,
                                        const v1::KeysRequest* request,
                                        v1::PrepareLoadResponse* response) {
  auto req = ResolveIndexRequest(context, "prepare a load in", request->engine_id(),
                                 request->dp_rank(), request->region_epoch(),
                                 request->keys());
  if (!req.ok()) return ToGrpcStatus(req.status());
  std::vector<uint32_t> tickets;
  auto rows = req->engine->index().PrepareLoad(req->keys, &tickets,
                                                   req->engine->index_member());
  if (!rows.ok()) return ToGrpcStatus(rows.status());
  // The same handles PrepareStore gave out for these rows (SlotIndex, "Row handles").
  for (size_t i = 0; i < rows->size(); ++i) {
    response->add_rows(StoreHandle(tickets[i], (*rows)[i]));
  }
  return grpc::Status::OK;
}

grpc::Status EngineService::CompleteLoad(grpc::ServerContext* context,
                                         const v1::KeysRequest* request,
                                         v1::Empty*) {
  auto req = ResolveIndexRequest(context, "complete a load in", request->engine_id(),
                                 request->dp_rank(), request->region_epoch(),
                                 request->keys());
  if (!req.ok()) return ToGrpcStatus(req.status());
  return ToGrpcStatus(
      req->engine->index().CompleteLoad(req->keys, req->engine->index_member()));
}

grpc::Status EngineService::Touch(grpc::ServerContext* context, const v1::KeysRequest* request,
                                  v1::Empty*) {
  auto req = ResolveIndexRequest(context, "touch keys in", request->engine_id(),
                                 request->dp_rank(), request->region_epoch(),
                                 request->keys());
  if (!req.ok()) return ToGrpcStatus(req.status());
  return ToGrpcStatus(req->engine->index().Touch(req->keys));
}

}  // namespace kvoffload::daemon
