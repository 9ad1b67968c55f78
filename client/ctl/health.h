// `kvoffloadctl health`: the standard gRPC health check (grpc.health.v1.Health/Check, service
// "") on the admin socket. Prints the serving status (SERVING, NOT_SERVING, ...) on one line;
// exits 0 only for SERVING, 1 for any other answer, 3 when the daemon cannot be reached.
//
//   if (RunHealth({}, target, std::cout, std::cerr) == kExitOk) { ... }
//
// Thread-safe.
#ifndef KVOFFLOAD_CLIENT_CTL_HEALTH_H_
#define KVOFFLOAD_CLIENT_CTL_HEALTH_H_

#include <ostream>
#include <string>
#include <vector>

#include "client/ctl/admin_client.h"

namespace kvoffload::client::ctl {

// Runs `kvoffloadctl health` with the arguments after "health"; exit codes as above.
int RunHealth(const std::vector<std::string>& args, const AdminTarget& target, std::ostream& out,
              std::ostream& err);
std::string HealthUsage();

}  // namespace kvoffload::client::ctl

#endif  // KVOFFLOAD_CLIENT_CTL_HEALTH_H_
