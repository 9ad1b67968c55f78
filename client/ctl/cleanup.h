// `kvoffloadctl cleanup [--idle] [--reset=ENGINE_ID [--dp_rank=N]]`: Admin.Cleanup. --idle
// drops every engine with no connected worker; --reset returns every row of one engine
// replica's index to FREE (its cache is emptied, its region kept). At least one is required.
//
//   int rc = RunCleanup({"--idle"}, target, std::cout, std::cerr);
//   // "dropped idle engine llama/0" per engine, or "no idle engines"
//
// Thread-safe.
#ifndef KVOFFLOAD_CLIENT_CTL_CLEANUP_H_
#define KVOFFLOAD_CLIENT_CTL_CLEANUP_H_

#include <ostream>
#include <string>
#include <vector>

#include "client/ctl/admin_client.h"
#include "kvoffload/v1/kvoffload.pb.h"

namespace kvoffload::client::ctl {

// Runs `kvoffloadctl cleanup` with the arguments after "cleanup"; exit codes as exit_codes.h.
int RunCleanup(const std::vector<std::string>& args, const AdminTarget& target, std::ostream& out,
               std::ostream& err);
std::string CleanupUsage();

// What the daemon did, one line per action:
//   "reset llama/0: 4096 rows freed"  (when `request` asked for a reset)
//   "dropped idle engine a/0"          (per dropped engine, when it asked for --idle)
//   "no idle engines"                  (when it asked for --idle and none was dropped)
std::string CleanupText(const v1::CleanupRequest& request, const v1::CleanupResponse& response);

}  // namespace kvoffload::client::ctl

#endif  // KVOFFLOAD_CLIENT_CTL_CLEANUP_H_
