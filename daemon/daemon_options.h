// DaemonOptions: everything kvoffloadd is configured with, and the one pass that checks it.
//
// Each setting's default is written once, in the options struct of the part that uses it
// (JobLimits, RegistryOptions, PoolOptions, WorkerServiceOptions, RegionOptions, ...); this struct
// embeds those whole, and daemon/main.cc's flags take their defaults from a default-constructed
// DaemonOptions (tests/docs/check_one_home.py keeps literals out of the flags). The two settings
// whose daemon default differs from the library's on purpose are the constants below: a library
// user (a test) gets no metrics port and regions pinned whole before OpenEngine returns.
#ifndef KVOFFLOAD_DAEMON_DAEMON_OPTIONS_H_
#define KVOFFLOAD_DAEMON_DAEMON_OPTIONS_H_

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "daemon/access/access.h"
#include "daemon/engine/job_limits.h"
#include "daemon/engine/registry.h"
#include "daemon/region/region.h"
#include "daemon/restart/state_file.h"
#include "daemon/service/worker_service.h"
#include "daemon/tier/cluster/cluster_options.h"
#include "daemon/tier/disk_tier.h"
#include "daemon/tier/tier_manager.h"

namespace kvoffload::daemon {

// kvoffloadd's --metrics_address default (DaemonOptions: none).
inline constexpr char kDefaultMetricsAddress[] = "127.0.0.1:9470";
// kvoffloadd's --region_chunk_bytes default: serve while pinning, in chunks of about this many
// bytes (RegionOptions: 0, the whole region before OpenEngine returns).
inline constexpr uint64_t kDefaultRegionChunkBytes = uint64_t{128} << 20;

// kvoffloadd's --durable_regions default: regions and row states go to the service manager's fd
// store when there is one (main.cc decides; Daemon::Start only sees RestartInputs).
inline constexpr bool kDefaultDurableRegions = true;

struct DaemonOptions {
  std::string runtime_dir = "/run/kvoffload";
  // Node-wide cap over all regions; must be > 0 (kvoffloadd's default: half of physical memory).
  uint64_t max_region_bytes = 0;
  JobLimits jobs;
  // Engines, pools, idle TTL, descriptor reserve. Daemon::Start sets `durability` itself.
  RegistryOptions registry;
  WorkerServiceOptions workers;
  RegionOptions region_options;
  std::string metrics_address;  // host:port for Prometheus text metrics; empty disables
  // Who may connect (file mode and group of each socket; unset group: the daemon's) and who
  // administers every engine (README "Security model").
  mode_t data_socket_mode = 0660;
  std::optional<gid_t> data_socket_gid;
  mode_t admin_socket_mode = 0660;
  std::optional<gid_t> admin_socket_gid;
  AccessPolicy access;
  // Key bytes a durable row record holds (StateFile); longer keys are served but come back as
  // misses after a restart.
  uint32_t state_key_bytes = StateFile::kDefaultKeyCapacity;
  // kvoffloadd, on SIGTERM: how long running copies get to finish (Daemon::Shutdown's grace).
  absl::Duration shutdown_grace = absl::Seconds(10);
  // The disk tier below the regions (docs/disk_tier.md): off while disk_tier.paths is empty;
  // then capacity_bytes must be set.
  tier::DiskTierOptions disk_tier;
  // The cluster tier below the disk tier (docs/cluster_tier.md): off while it has no seeds.
  tier::cluster::ClusterTierOptions cluster_tier;
  // How rows are spilled to the tiers and promoted from them.
  TierOptions tiers;
};

// Every range rule of DaemonOptions, in one place (Daemon::Start calls it; kvoffloadd calls it
// before anything starts). INVALID_ARGUMENT naming the flag of the first setting out of range.
absl::Status ValidateDaemonOptions(const DaemonOptions& options);

}  // namespace kvoffload::daemon

#endif  // KVOFFLOAD_DAEMON_DAEMON_OPTIONS_H_
