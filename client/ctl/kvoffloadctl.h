// kvoffloadctl: the admin CLI of kvoffloadd. This is the whole program but for reading argv
// and the environment (main.cc): global flags, the choice of subcommand, the usage text.
//
//   std::vector<std::string> args(argv + 1, argv + argc);
//   const char* env = std::getenv("KVOFFLOAD_ADMIN_SOCKET");
//   return RunKvoffloadctl(args, env == nullptr ? "" : env, std::cout, std::cerr);
//
// Exit codes are those of exit_codes.h. Thread-safe: no global state.
#ifndef KVOFFLOAD_CLIENT_CTL_KVOFFLOADCTL_H_
#define KVOFFLOAD_CLIENT_CTL_KVOFFLOADCTL_H_

#include <ostream>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"

namespace kvoffload::client::ctl {

// `args` are the arguments after the program name; `env_admin_socket` is the value of
// $KVOFFLOAD_ADMIN_SOCKET ("" when unset).
int RunKvoffloadctl(const std::vector<std::string>& args, absl::string_view env_admin_socket,
                    std::ostream& out, std::ostream& err);

// The text of `kvoffloadctl --help`.
std::string KvoffloadctlUsage();

}  // namespace kvoffload::client::ctl

#endif  // KVOFFLOAD_CLIENT_CTL_KVOFFLOADCTL_H_
