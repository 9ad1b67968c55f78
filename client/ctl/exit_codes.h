// Exit codes of kvoffloadctl, shared by every subcommand (RunPlan's kPlanOk and
// kPlanUsageOrRejected are 0 and 2 of the same list). Documented in `kvoffloadctl --help` and
// docs/kvoffloadctl.md; scripts depend on them, so they never change meaning.
#ifndef KVOFFLOAD_CLIENT_CTL_EXIT_CODES_H_
#define KVOFFLOAD_CLIENT_CTL_EXIT_CODES_H_

namespace kvoffload::client::ctl {

inline constexpr int kExitOk = 0;
// The daemon answered with an error ("kvoffloadctl: CODE: message"), or `health` got an
// answer other than SERVING.
inline constexpr int kExitDaemonError = 1;
// Bad command line, or `plan` rejected the topology.
inline constexpr int kExitUsage = 2;
// The daemon could not be reached: no socket, permission denied, no connection, or no answer
// before the --timeout_s deadline.
inline constexpr int kExitUnreachable = 3;

}  // namespace kvoffload::client::ctl

#endif  // KVOFFLOAD_CLIENT_CTL_EXIT_CODES_H_
