// Admin service (admin socket): Stats, ListEngines, DropEngine, Cleanup. Health checking and
// reflection are gRPC's standard services, enabled by the server.
#ifndef KVOFFLOAD_DAEMON_SERVICE_ADMIN_SERVICE_H_
#define KVOFFLOAD_DAEMON_SERVICE_ADMIN_SERVICE_H_

#include "absl/time/time.h"
#include "daemon/copy/copy_backend.h"
#include "daemon/engine/registry.h"
#include "daemon/region/memory_budget.h"
#include "kvoffload/v1/kvoffload.grpc.pb.h"

namespace kvoffload::daemon {

// Thread-safe. Borrows everything it is given.
class AdminService final : public v1::Admin::Service {
 public:
  AdminService(EngineRegistry* registry, const CopyBackend* backend, const MemoryBudget* budget)
      : registry_(registry), backend_(backend), budget_(budget), started_(absl::Now()) {}

  grpc::Status Stats(grpc::ServerContext*, const v1::StatsRequest*,
                     v1::StatsResponse* response) override;
  grpc::Status ListEngines(grpc::ServerContext*, const v1::Empty*,
                           v1::ListEnginesResponse* response) override;
  grpc::Status DropEngine(grpc::ServerContext*, const v1::DropEngineRequest* request,
                          v1::Empty*) override;
  grpc::Status Cleanup(grpc::ServerContext*, const v1::CleanupRequest* request,
                       v1::CleanupResponse* response) override;

 private:
  EngineRegistry* const registry_;
  const CopyBackend* const backend_;
  const MemoryBudget* const budget_;
  const absl::Time started_;
};

}  // namespace kvoffload::daemon

#endif  // KVOFFLOAD_DAEMON_SERVICE_ADMIN_SERVICE_H_
