#include "client/ctl/kvoffloadctl.h"

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "client/ctl/admin_client.h"
#include "client/ctl/args.h"
#include "client/ctl/cleanup.h"
#include "client/ctl/drop.h"
#include "client/ctl/engines.h"
#include "client/ctl/exit_codes.h"
#include "client/ctl/health.h"
#include "client/ctl/plan.h"
#include "client/ctl/stats.h"

namespace kvoffload::client::ctl {
namespace {

using DaemonCommand = int (*)(const std::vector<std::string>&, const AdminTarget&, std::ostream&,
                              std::ostream&);

struct Command {
  const char* name;
  DaemonCommand run;  // nullptr for plan, which needs no daemon
  std::string (*usage)();
};

const Command kCommands[] = {
    {"stats", RunStats, StatsUsage},   {"engines", RunEngines, EnginesUsage},
    {"drop", RunDrop, DropUsage},      {"cleanup", RunCleanup, CleanupUsage},
    {"health", RunHealth, HealthUsage}, {"plan", nullptr, PlanUsage},
};

const Command* FindCommand(absl::string_view name) {
  for (const Command& command : kCommands) {
    if (name == command.name) return &command;
  }
  return nullptr;
}

}  // namespace

std::string KvoffloadctlUsage() {
  return absl::StrCat(
      "usage: kvoffloadctl [global flags] COMMAND [flags]\n"
      "\n"
      "Administers the kvoffloadd of this node through its admin socket.\n"
      "\n"
      "Commands:\n"
      "  stats [--json]            node and per-engine statistics: a table, or one JSON line\n"
      "  engines                   the engines the daemon holds, one row each\n"
      "  drop ENGINE_ID [--dp_rank=N] [--force]\n"
      "                            drop an engine replica and free its region\n"
      "  cleanup [--idle] [--reset=ENGINE_ID [--dp_rank=N]]\n"
      "                            drop idle engines; empty one engine's cache\n"
      "  health                    gRPC health check: prints SERVING or NOT_SERVING\n"
      "  plan FLAGS                the geometry a topology gets; needs no daemon\n"
      "  help [COMMAND]            this text, or the command's (also COMMAND --help)\n"
      "\n"
      "Global flags, before or after the command (--name=value or --name value):\n"
      "  --runtime_dir=DIR         the daemon's runtime directory; the admin socket is\n"
      "                            DIR/admin.sock (default ",
      kDefaultRuntimeDir,
      ")\n"
      "  --socket=PATH             the admin socket itself (overrides --runtime_dir)\n"
      "  --timeout_s=SECONDS       deadline of the call (default 10; connecting gets at most 3)\n"
      "  --help, -h                this text\n"
      "With neither --socket nor --runtime_dir, $",
      kAdminSocketEnv,
      " names the socket when set.\n"
      "\n"
      "Exit status:\n"
      "  0  success (health: the daemon is SERVING)\n"
      "  1  the daemon answered with an error, one line \"kvoffloadctl: CODE: message\" on\n"
      "     stderr (CODE as NOT_FOUND); health: an answer other than SERVING\n"
      "  2  usage error, or plan rejected the topology\n"
      "  3  the daemon cannot be reached (or gave no answer within --timeout_s), one line\n"
      "     on stderr:\n"
      "       kvoffloadctl: kvoffloadd is not running (no socket at PATH)\n"
      "       kvoffloadctl: permission denied on PATH (join group G, the socket's group)\n"
      "       kvoffloadctl: cannot reach kvoffloadd at PATH: REASON\n"
      "\n"
      "See docs/kvoffloadctl.md.\n");
}

int RunKvoffloadctl(const std::vector<std::string>& args, absl::string_view env_admin_socket,
                    std::ostream& out, std::ostream& err) {
  absl::StatusOr<GlobalArgs> global = ParseGlobalArgs(args);
  if (!global.ok()) {
    err << "kvoffloadctl: " << global.status().message() << "\n";
    return kExitUsage;
  }
  if (global->command.empty()) {
    if (global->help) {
      out << KvoffloadctlUsage();
      return kExitOk;
    }
    err << "kvoffloadctl: missing COMMAND (see kvoffloadctl --help)\n";
    return kExitUsage;
  }
  if (global->command == "help") {
    const std::vector<std::string>& topic = global->command_args;
    if (topic.empty()) {
      out << KvoffloadctlUsage();
      return kExitOk;
    }
    const Command* command = topic.size() == 1 ? FindCommand(topic[0]) : nullptr;
    if (command == nullptr) {
      err << "kvoffloadctl help: unknown command \"" << absl::CHexEscape(absl::StrJoin(topic, " "))
          << "\" (see kvoffloadctl --help)\n";
      return kExitUsage;
    }
    out << command->usage();
    return kExitOk;
  }
  const Command* command = FindCommand(global->command);
  if (command == nullptr) {
    err << "kvoffloadctl: unknown command \"" << absl::CHexEscape(global->command)
        << "\" (see kvoffloadctl --help)\n";
    return kExitUsage;
  }
  if (command->run == nullptr) return RunPlan(global->command_args, out, err);
  AdminTarget target;
  target.socket_path = AdminSocketPath(*global, env_admin_socket);
  target.timeout = global->timeout;
  return command->run(global->command_args, target, out, err);
}

}  // namespace kvoffload::client::ctl
