// kvoffloadctl: reads argv and $KVOFFLOAD_ADMIN_SOCKET, then runs RunKvoffloadctl (all of
// the program is in libraries that tests link).
#include <cstdlib>
#include <iostream>
#include <string>
#include <vector>

#include "client/ctl/args.h"
#include "client/ctl/kvoffloadctl.h"

int main(int argc, char** argv) {
  const std::vector<std::string> args(argv + 1, argv + argc);
  const char* env_socket = std::getenv(kvoffload::client::ctl::kAdminSocketEnv);
  return kvoffload::client::ctl::RunKvoffloadctl(args, env_socket == nullptr ? "" : env_socket,
                                                 std::cout, std::cerr);
}
