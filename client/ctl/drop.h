// `kvoffloadctl drop ENGINE_ID [--dp_rank=N] [--force]`: Admin.DropEngine. Frees the region of
// one engine replica; without --force the daemon refuses (FAILED_PRECONDITION) while workers
// are connected, with --force their sessions are ended.
//
//   int rc = RunDrop({"llama", "--dp_rank=1"}, target, std::cout, std::cerr);  // "dropped llama/1"
//
// Thread-safe.
#ifndef KVOFFLOAD_CLIENT_CTL_DROP_H_
#define KVOFFLOAD_CLIENT_CTL_DROP_H_

#include <ostream>
#include <string>
#include <vector>

#include "client/ctl/admin_client.h"

namespace kvoffload::client::ctl {

// Runs `kvoffloadctl drop` with the arguments after "drop"; exit codes as exit_codes.h.
int RunDrop(const std::vector<std::string>& args, const AdminTarget& target, std::ostream& out,
            std::ostream& err);
std::string DropUsage();

}  // namespace kvoffload::client::ctl

#endif  // KVOFFLOAD_CLIENT_CTL_DROP_H_
