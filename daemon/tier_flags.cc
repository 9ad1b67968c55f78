#include "daemon/tier_flags.h"

#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/bytes.h"

namespace {
kvoffload::daemon::DaemonOptions D() { return {}; }
int64_t Millis(absl::Duration d) { return absl::ToInt64Milliseconds(d); }
}  // namespace

ABSL_FLAG(std::string, disk_tier_path, "",
          "Disk tier (docs/disk_tier.md): comma-separated directories, one per NVMe device, that "
          "hold the tier's files (striped). READY rows are written there and promoted back on a "
          "lookup that misses the region. Empty: no disk tier.");
ABSL_FLAG(std::string, disk_tier_bytes, "",
          "Disk tier: the files' total size, e.g. 2TiB, split evenly over the paths and "
          "allocated up front; the least recently written records are evicted beyond it. "
          "Required with --disk_tier_path.");
ABSL_FLAG(uint64_t, disk_tier_row_bytes, D().disk_tier.max_payload_bytes,
          "Disk tier: the largest row it holds (a multiple of 4096; each record takes this plus a "
          "4 KiB header). Engines with larger rows are not tiered; `kvoffloadctl plan` prints an "
          "engine's row bytes.");
ABSL_FLAG(int32_t, disk_tier_queue_depth, D().disk_tier.queue_depth,
          "Disk tier: requests in flight to the devices at most.");
ABSL_FLAG(int32_t, disk_tier_write_depth, D().disk_tier.write_depth,
          "Disk tier: of those, writes at most (reads, i.e. promotions, always go first).");
ABSL_FLAG(bool, disk_tier_write_through, D().disk_tier.write_through,
          "Disk tier: each record write is RWF_DSYNC, durable through a power loss once written "
          "(slower); false: durable through a daemon crash.");
ABSL_FLAG(std::string, cluster_tier, "",
          "Cluster tier (docs/cluster_tier.md): redis://host:port[,host:port...], seed nodes of a "
          "Redis Cluster shared by the nodes of a data centre. READY rows are written there too, "
          "and a lookup that misses the region and the disk asks it. Empty: no cluster tier.");
ABSL_FLAG(std::string, cluster_tier_user, D().cluster_tier.user,
          "Cluster tier: the ACL user (AUTH user password); empty: the default user.");
ABSL_FLAG(std::string, cluster_tier_password_file, D().cluster_tier.password_file,
          "Cluster tier: a file holding the password (never a flag value); empty: no AUTH.");
ABSL_FLAG(std::string, cluster_tier_key_prefix, D().cluster_tier.key_prefix,
          "Cluster tier: every key starts with this and a slash (one prefix per deployment; an "
          "ACL user can be confined to it).");
ABSL_FLAG(int64_t, cluster_tier_connect_timeout_ms, Millis(D().cluster_tier.connect_timeout),
          "Cluster tier: the bound on connecting (and AUTH) to one node.");
ABSL_FLAG(int64_t, cluster_tier_command_timeout_ms, Millis(D().cluster_tier.command_timeout),
          "Cluster tier: the bound on one row's write or read, redirects included.");
ABSL_FLAG(int64_t, cluster_tier_lookup_timeout_ms, Millis(D().cluster_tier.lookup_timeout),
          "Cluster tier: the bound on asking which keys it holds (one batch per lookup, on the "
          "engine's lookup path); keys it could not ask about are misses.");
ABSL_FLAG(int32_t, cluster_tier_connections_per_node, D().cluster_tier.connections_per_node,
          "Cluster tier: connections kept per cluster node.");
ABSL_FLAG(int32_t, cluster_tier_threads, D().cluster_tier.threads,
          "Cluster tier: threads that run its writes and reads.");
ABSL_FLAG(uint64_t, cluster_tier_max_value_bytes, D().cluster_tier.max_value_bytes,
          "Cluster tier: the largest value it writes (4 KiB header included); a longer row is "
          "split into several values. The same on every node of a deployment.");
ABSL_FLAG(int64_t, tier_promote_timeout_ms, Millis(D().tiers.promote_timeout),
          "A row being promoted from a tier for longer than this looks up as a miss, so the "
          "engine recomputes instead of waiting on a slow tier (the read still lands).");
ABSL_FLAG(uint32_t, tier_spills_in_flight, D().tiers.max_spills_in_flight,
          "Row writes to the tiers at once, node-wide (each row is kept from eviction meanwhile).");

namespace kvoffload::daemon {

absl::Status ApplyTierFlags(DaemonOptions* options) {
  tier::DiskTierOptions& disk = options->disk_tier;
  disk.paths = absl::StrSplit(absl::GetFlag(FLAGS_disk_tier_path), ',', absl::SkipWhitespace());
  if (!absl::GetFlag(FLAGS_disk_tier_bytes).empty()) {
    absl::StatusOr<uint64_t> bytes = common::ParseBytes(absl::GetFlag(FLAGS_disk_tier_bytes));
    if (!bytes.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--disk_tier_bytes: ", bytes.status().message()));
    }
    disk.capacity_bytes = *bytes;
  }
  disk.max_payload_bytes = absl::GetFlag(FLAGS_disk_tier_row_bytes);
  disk.queue_depth = absl::GetFlag(FLAGS_disk_tier_queue_depth);
  disk.write_depth = absl::GetFlag(FLAGS_disk_tier_write_depth);
  disk.write_through = absl::GetFlag(FLAGS_disk_tier_write_through);

  tier::cluster::ClusterTierOptions& cluster = options->cluster_tier;
  if (!absl::GetFlag(FLAGS_cluster_tier).empty()) {
    absl::StatusOr<std::vector<tier::cluster::NodeAddress>> seeds =
        tier::cluster::ParseClusterUrl(absl::GetFlag(FLAGS_cluster_tier));
    if (!seeds.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("--cluster_tier: ", seeds.status().message()));
    }
    cluster.seeds = *std::move(seeds);
  }
  cluster.user = absl::GetFlag(FLAGS_cluster_tier_user);
  cluster.password_file = absl::GetFlag(FLAGS_cluster_tier_password_file);
  cluster.key_prefix = absl::GetFlag(FLAGS_cluster_tier_key_prefix);
  cluster.connect_timeout = absl::Milliseconds(absl::GetFlag(FLAGS_cluster_tier_connect_timeout_ms));
  cluster.command_timeout = absl::Milliseconds(absl::GetFlag(FLAGS_cluster_tier_command_timeout_ms));
  cluster.lookup_timeout = absl::Milliseconds(absl::GetFlag(FLAGS_cluster_tier_lookup_timeout_ms));
  cluster.connections_per_node = absl::GetFlag(FLAGS_cluster_tier_connections_per_node);
  cluster.threads = absl::GetFlag(FLAGS_cluster_tier_threads);
  cluster.max_value_bytes = absl::GetFlag(FLAGS_cluster_tier_max_value_bytes);

  options->tiers.promote_timeout = absl::Milliseconds(absl::GetFlag(FLAGS_tier_promote_timeout_ms));
  options->tiers.max_spills_in_flight = absl::GetFlag(FLAGS_tier_spills_in_flight);
  return absl::OkStatus();
}

}  // namespace kvoffload::daemon
