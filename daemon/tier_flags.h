// The flags of the tiers below the regions (the disk tier, the cluster tier, spill and
// promote), kept beside main.cc's so that main.cc stays one screen of wiring. Each takes its
// default from the options struct that holds it (check_one_home.py).
#ifndef KVOFFLOAD_DAEMON_TIER_FLAGS_H_
#define KVOFFLOAD_DAEMON_TIER_FLAGS_H_

#include "absl/status/status.h"
#include "daemon/daemon_options.h"

namespace kvoffload::daemon {

// Sets options->disk_tier, ->cluster_tier and ->tiers from the flags. INVALID_ARGUMENT naming
// the flag for a value that does not parse (ranges are ValidateDaemonOptions's).
absl::Status ApplyTierFlags(DaemonOptions* options);

}  // namespace kvoffload::daemon

#endif  // KVOFFLOAD_DAEMON_TIER_FLAGS_H_
