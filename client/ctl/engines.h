// `kvoffloadctl engines`: Admin.ListEngines as a table, one row per engine (one DP replica's
// region): engine, replicated, copies, row bytes, rows, region bytes, workers, idle s.
//
//   int rc = RunEngines({}, AdminTarget{"/run/kvoffload/admin.sock"}, std::cout, std::cerr);
//
// Thread-safe.
#ifndef KVOFFLOAD_CLIENT_CTL_ENGINES_H_
#define KVOFFLOAD_CLIENT_CTL_ENGINES_H_

#include <ostream>
#include <string>
#include <vector>

#include "client/ctl/admin_client.h"
#include "kvoffload/v1/kvoffload.pb.h"

namespace kvoffload::client::ctl {

// Runs `kvoffloadctl engines` with the arguments after "engines"; exit codes as exit_codes.h.
int RunEngines(const std::vector<std::string>& args, const AdminTarget& target, std::ostream& out,
               std::ostream& err);
std::string EnginesUsage();

// The table ("no engines" when there is none). "idle s" is "-" while a worker is connected.
std::string EnginesText(const v1::ListEnginesResponse& engines);

}  // namespace kvoffload::client::ctl

#endif  // KVOFFLOAD_CLIENT_CTL_ENGINES_H_
