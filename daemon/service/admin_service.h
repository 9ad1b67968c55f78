// Admin service (admin socket): Stats, ListEngines, DropEngine, Cleanup. Health checking and
// reflection are gRPC's standard services, enabled by the server.
//
// Access (daemon/access/access.h): whoever may connect to the admin socket sees node totals; the
// per-engine lines, DropEngine and Cleanup reset are for engines the kernel-verified caller may
// administer (owner, root, --admin_group). Another uid's DropEngine or reset is PERMISSION_DENIED
// and changes nothing; Cleanup drop_idle drops only the caller's own idle engines (all of them for
// root and the admin group).
#ifndef KVOFFLOAD_DAEMON_SERVICE_ADMIN_SERVICE_H_
#define KVOFFLOAD_DAEMON_SERVICE_ADMIN_SERVICE_H_

#include "absl/time/time.h"
#include "daemon/access/access.h"
#include "daemon/copy/copy_backend.h"
#include "daemon/engine/registry.h"
#include "daemon/region/memory_budget.h"
#include "daemon/service/peer_credentials.h"
#include "kvoffload/v1/kvoffload.grpc.pb.h"

namespace kvoffload::daemon {

// Thread-safe. Borrows everything it is given.
class AdminService final : public v1::Admin::Service {
 public:
  // `tiers`: the node's tiers below the regions, or null.
  AdminService(EngineRegistry* registry, const CopyBackend* backend, const MemoryBudget* budget,
               const CallerSource* peers, const AccessPolicy& policy,
               const TierManager* tiers = nullptr)
      : registry_(registry),
        backend_(backend),
        budget_(budget),
        peers_(peers),
        policy_(policy),
        tiers_(tiers),
        started_(absl::Now()) {}

  grpc::Status Stats(grpc::ServerContext* context, const v1::StatsRequest*,
                     v1::StatsResponse* response) override;
  grpc::Status ListEngines(grpc::ServerContext* context, const v1::Empty*,
                           v1::ListEnginesResponse* response) override;
  grpc::Status DropEngine(grpc::ServerContext* context, const v1::DropEngineRequest* request,
                          v1::Empty*) override;
  grpc::Status Cleanup(grpc::ServerContext* context, const v1::CleanupRequest* request,
                       v1::CleanupResponse* response) override;

 private:
  // Engines `caller` may administer.
  std::vector<std::shared_ptr<Engine>> Visible(const Caller& caller) const;

  EngineRegistry* const registry_;
  const CopyBackend* const backend_;
  const MemoryBudget* const budget_;
  const CallerSource* const peers_;
  const AccessPolicy policy_;
  const TierManager* const tiers_;
  const absl::Time started_;
};

}  // namespace kvoffload::daemon

#endif  // KVOFFLOAD_DAEMON_SERVICE_ADMIN_SERVICE_H_
