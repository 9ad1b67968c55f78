// Command-line parsing for kvoffloadctl, kept out of the absl flags registry so that each
// subcommand owns its flags and every function here is pure (tests call it directly).
//
// Global flags may come before or after the command:
//
//   absl::StatusOr<GlobalArgs> g =
//       ParseGlobalArgs({"stats", "--socket", "/tmp/a.sock", "--json"});
//   // g->command == "stats", g->socket == "/tmp/a.sock", g->command_args == {"--json"}
//
// and each subcommand parses what is left against its own list:
//
//   absl::StatusOr<ParsedArgs> a =
//       ParseArgs({"llama", "--dp_rank=1", "--force"}, {{"dp_rank", true}, {"force", false}});
//   // a->positionals == {"llama"}, a->flags == {{"dp_rank", "1"}, {"force", ""}}
//
// Strict: unknown flags, repeated flags, a switch given a value and a value flag without one
// are INVALID_ARGUMENT with a one-line message. Thread-safe: no global state.
#ifndef KVOFFLOAD_CLIENT_CTL_ARGS_H_
#define KVOFFLOAD_CLIENT_CTL_ARGS_H_

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace kvoffload::client::ctl {

inline constexpr char kDefaultRuntimeDir[] = "/run/kvoffload";
// As daemon/daemon.h kAdminSocketName (the daemon library is not linked into the CLI).
inline constexpr char kAdminSocketName[] = "admin.sock";
inline constexpr char kAdminSocketEnv[] = "KVOFFLOAD_ADMIN_SOCKET";
inline constexpr absl::Duration kDefaultTimeout = absl::Seconds(10);

// The global flags and the command they surround.
struct GlobalArgs {
  std::optional<std::string> runtime_dir;  // --runtime_dir
  std::optional<std::string> socket;       // --socket
  absl::Duration timeout = kDefaultTimeout;  // --timeout_s
  bool help = false;                       // --help or -h before the command
  std::string command;                     // empty when none was given
  std::vector<std::string> command_args;   // everything after the command but global flags
};

// Takes the arguments after argv[0]. The first argument that is not a flag is the command;
// before it only global flags (and --help/-h) are allowed, after it global flags are taken out
// wherever they are and the rest is left, in order, for the command.
absl::StatusOr<GlobalArgs> ParseGlobalArgs(const std::vector<std::string>& args);

// The admin socket to dial: --socket, else <--runtime_dir>/admin.sock, else `env_socket`
// ($KVOFFLOAD_ADMIN_SOCKET) when not empty, else /run/kvoffload/admin.sock.
std::string AdminSocketPath(const GlobalArgs& args, absl::string_view env_socket);

// A flag a subcommand accepts: a switch (--force) or one that takes a value (--dp_rank=N or
// --dp_rank N).
struct FlagSpec {
  std::string name;
  bool takes_value = false;
};

struct ParsedArgs {
  std::map<std::string, std::string> flags;  // by name; "" for switches
  std::vector<std::string> positionals;      // in order

  bool Has(const std::string& name) const { return flags.count(name) != 0; }
};

absl::StatusOr<ParsedArgs> ParseArgs(const std::vector<std::string>& args,
                                     const std::vector<FlagSpec>& specs);

// Decimal digits only, at most 2^32 - 1; `what` names the value in the message ("--dp_rank").
absl::StatusOr<uint32_t> ParseUint32(absl::string_view text, absl::string_view what);

// The line for a bad command line of `command` ("stats"), ending in '\n':
// "kvoffloadctl stats: <message> (see kvoffloadctl stats --help)".
std::string UsageErrorLine(absl::string_view command, absl::string_view message);

// Parses a subcommand's arguments and checks it got between `min_positionals` and
// `max_positionals` plain arguments.
absl::StatusOr<ParsedArgs> ParseCommandArgs(const std::vector<std::string>& args,
                                            const std::vector<FlagSpec>& specs,
                                            size_t min_positionals, size_t max_positionals,
                                            absl::string_view positional_name);

// True when `args` asks for help (--help or -h anywhere).
bool WantsHelp(const std::vector<std::string>& args);

}  // namespace kvoffload::client::ctl

#endif  // KVOFFLOAD_CLIENT_CTL_ARGS_H_
