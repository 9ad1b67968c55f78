// Engine service (scheduler side): OpenEngine and the row index of each engine region.
// Every call is made as its connection's kernel-verified caller (PeerTable): OpenEngine joins
// only an engine the caller may use (a new one belongs to the caller's uid), and the index calls
// of another uid's engine are PERMISSION_DENIED and change nothing (daemon/access/access.h).
#ifndef KVOFFLOAD_DAEMON_SERVICE_ENGINE_SERVICE_H_
#define KVOFFLOAD_DAEMON_SERVICE_ENGINE_SERVICE_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "daemon/engine/registry.h"
#include "daemon/service/peer_credentials.h"
#include "kvoffload/v1/kvoffload.grpc.pb.h"

namespace kvoffload::daemon {

// Thread-safe (gRPC calls it from many threads). Does not own the registry or the peer table.
class EngineService final : public v1::Engine::Service {
 public:
  EngineService(EngineRegistry* registry, const CallerSource* peers)
      : registry_(registry), peers_(peers) {}

  grpc::Status OpenEngine(grpc::ServerContext* context, const v1::OpenEngineRequest* request,
                          v1::OpenEngineResponse* response) override;
  grpc::Status Lookup(grpc::ServerContext* context, const v1::KeysRequest* request,
                      v1::LookupResponse* response) override;
  grpc::Status PrepareStore(grpc::ServerContext* context, const v1::KeysRequest* request,
                            v1::PrepareStoreResponse* response) override;
  grpc::Status CompleteStore(grpc::ServerContext* context, const v1::CompleteStoreRequest* request,
                             v1::Empty* response) override;
  grpc::Status PrepareLoad(grpc::ServerContext* context, const v1::KeysRequest* request,
                           v1::PrepareLoadResponse* response) override;
  grpc::Status CompleteLoad(grpc::ServerContext* context, const v1::KeysRequest* request,
                            v1::Empty* response) override;
  grpc::Status Touch(grpc::ServerContext* context, const v1::KeysRequest* request,
                     v1::Empty* response) override;

 private:
  // The engine of a request, if it exists, the caller may use it (`action` names the call in a
  // refusal) and its rows are handed out by this index.
  absl::StatusOr<std::shared_ptr<Engine>> IndexedEngine(grpc::ServerContext* context,
                                                        const std::string& engine_id,
                                                        uint32_t dp_rank, const char* action);
  // IndexedEngine, its region the one the caller planned against (region_epoch 0: not checked;
  // another: FAILED_PRECONDITION naming both), and the request's keys validated (KeysFromProto).
  struct IndexRequest {
    std::shared_ptr<Engine> engine;
    std::vector<std::string> keys;
  };
  absl::StatusOr<IndexRequest> ResolveIndexRequest(
      grpc::ServerContext* context, const char* action, const std::string& engine_id,
      uint32_t dp_rank, uint64_t region_epoch,
      const google::protobuf::RepeatedPtrField<std::string>& keys);

  EngineRegistry* const registry_;
  const CallerSource* const peers_;
};

}  // namespace kvoffload::daemon

#endif  // KVOFFLOAD_DAEMON_SERVICE_ENGINE_SERVICE_H_
