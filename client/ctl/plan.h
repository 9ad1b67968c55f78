// `kvoffloadctl plan`: the geometry a topology gets, computed without a daemon (DESIGN.md §2,
// §4). The same ComputeGeometry the daemon runs, fed from command-line flags.
//
//   std::vector<std::string> args = {"--world_size=8", "--local_world_size=4", "--mp_rank=5",
//                                    "--num_layers=32", "--page_bytes=16KiB",
//                                    "--budget_bytes=8GiB"};
//   int rc = kvoffload::client::ctl::RunPlan(args, std::cout, std::cerr);
//
// prints one JSON object on `out` ({"engine_key":"engine/0","replicated":false,...,"slot":1,...})
// and returns 0. A topology the daemon would reject returns 2 with one line "rejected: rule
// <name>: ..." on `err`; bad flags return 2 with one line "kvoffloadctl plan: ...".
//
// Flags are parsed here, not through the absl flags registry, so that the kvoffloadctl binary
// can host other subcommands with other flags. Thread-safe: no global state.
#ifndef KVOFFLOAD_CLIENT_CTL_PLAN_H_
#define KVOFFLOAD_CLIENT_CTL_PLAN_H_

#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace kvoffload::client::ctl {

// Exit codes of RunPlan.
inline constexpr int kPlanOk = 0;
inline constexpr int kPlanUsageOrRejected = 2;

// Runs `kvoffloadctl plan` with the arguments that follow "plan" on the command line.
// Accepts `--flag=value` and `--flag value`; `--help` (or `-h`) prints usage on `out`.
int RunPlan(const std::vector<std::string>& args, std::ostream& out, std::ostream& err);

// The usage text printed by --help.
std::string PlanUsage();

// A byte count: decimal digits with an optional binary suffix KiB, MiB, GiB or TiB
// ("80GiB" = 80 × 2^30). INVALID_ARGUMENT for anything else or a value above 2^64 - 1.
absl::StatusOr<uint64_t> ParseByteSize(absl::string_view text);

}  // namespace kvoffload::client::ctl

#endif  // KVOFFLOAD_CLIENT_CTL_PLAN_H_
