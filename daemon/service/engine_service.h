// Engine service (scheduler side): OpenEngine and the row index of each engine region.
#ifndef KVOFFLOAD_DAEMON_SERVICE_ENGINE_SERVICE_H_
#define KVOFFLOAD_DAEMON_SERVICE_ENGINE_SERVICE_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "daemon/engine/registry.h"
#include "kvoffload/v1/kvoffload.grpc.pb.h"

namespace kvoffload::daemon {

// Thread-safe (gRPC calls it from many threads). Does not own the registry.
class EngineService final : public v1::Engine::Service {
 public:
  explicit EngineService(EngineRegistry* registry) : registry_(registry) {}

  grpc::Status OpenEngine(grpc::ServerContext*, const v1::OpenEngineRequest* request,
                          v1::OpenEngineResponse* response) override;
  grpc::Status Lookup(grpc::ServerContext*, const v1::KeysRequest* request,
                      v1::LookupResponse* response) override;
  grpc::Status PrepareStore(grpc::ServerContext*, const v1::KeysRequest* request,
                            v1::PrepareStoreResponse* response) override;
  grpc::Status CompleteStore(grpc::ServerContext*, const v1::CompleteStoreRequest* request,
                             v1::Empty* response) override;
  grpc::Status PrepareLoad(grpc::ServerContext*, const v1::KeysRequest* request,
                           v1::PrepareLoadResponse* response) override;
  grpc::Status CompleteLoad(grpc::ServerContext*, const v1::KeysRequest* request,
                            v1::Empty* response) override;
  grpc::Status Touch(grpc::ServerContext*, const v1::KeysRequest* request,
                     v1::Empty* response) override;

 private:
  // The engine of a request, if it exists and its rows are handed out by this index.
  absl::StatusOr<std::shared_ptr<Engine>> IndexedEngine(const std::string& engine_id,
                                                        uint32_t dp_rank);
  // IndexedEngine, and the request's keys validated (KeysFromProto).
  struct IndexRequest {
    std::shared_ptr<Engine> engine;
    std::vector<std::string> keys;
  };
  absl::StatusOr<IndexRequest> ResolveIndexRequest(
      const std::string& engine_id, uint32_t dp_rank,
      const google::protobuf::RepeatedPtrField<std::string>& keys);

  EngineRegistry* const registry_;
};

}  // namespace kvoffload::daemon

#endif  // KVOFFLOAD_DAEMON_SERVICE_ENGINE_SERVICE_H_
