#include "client/ctl/health.h"

#include "client/ctl/args.h"
#include "client/ctl/health_check.grpc.pb.h"

namespace kvoffload::client::ctl {

using ::grpc::health::v1::Health;
using ::grpc::health::v1::HealthCheckRequest;
using ::grpc::health::v1::HealthCheckResponse;

std::string HealthUsage() {
  return "usage: kvoffloadctl [global flags] health\n"
         "\n"
         "gRPC health check of kvoffloadd (grpc.health.v1.Health/Check, service \"\") on the\n"
         "admin socket. Prints SERVING or NOT_SERVING; exits 0 only when SERVING, 1 for any\n"
         "other answer, 3 when the daemon cannot be reached.\n";
}

int RunHealth(const std::vector<std::string>& args, const AdminTarget& target, std::ostream& out,
              std::ostream& err) {
  if (WantsHelp(args)) {
    out << HealthUsage();
    return kExitOk;
  }
  absl::StatusOr<ParsedArgs> parsed = ParseCommandArgs(args, {}, 0, 0, "");
  if (!parsed.ok()) {
    err << UsageErrorLine("health", parsed.status().message());
    return kExitUsage;
  }
  HealthCheckResponse response;
  const int rc = CallDaemon(target, err, [&](const std::shared_ptr<grpc::Channel>& channel,
                                             grpc::ClientContext* context) {
    HealthCheckRequest request;
    request.set_service("");
    return Health::NewStub(channel)->Check(context, request, &response);
  });
  if (rc != kExitOk) return rc;
  const std::string& name = HealthCheckResponse::ServingStatus_Name(response.status());
  out << (name.empty() ? std::to_string(response.status()) : name) << "\n";
  return response.status() == HealthCheckResponse::SERVING ? kExitOk : kExitDaemonError;
}

}  // namespace kvoffload::client::ctl
