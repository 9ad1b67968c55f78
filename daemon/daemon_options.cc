#include "daemon/daemon_options.h"

#include <climits>

#include "absl/strings/str_cat.h"
#include "daemon/index/slot_index.h"
#include "daemon/service/limits.h"

namespace kvoffload::daemon {
namespace {

absl::Status Invalid(absl::string_view flag, absl::string_view rule) {
  return absl::InvalidArgumentError(absl::StrCat("--", flag, " ", rule));
}

}  // namespace

absl::Status ValidateDaemonOptions(const DaemonOptions& o) {
  if (o.runtime_dir.empty()) return Invalid("runtime_dir", "must not be empty");
  if (o.max_region_bytes == 0) {
    return Invalid("max_region_bytes", "must be > 0 (the node-wide region cap)");
  }
  if (o.jobs.job_timeout <= absl::ZeroDuration()) return Invalid("job_timeout_s", "must be > 0");
  if (o.jobs.max_blocks_per_job == 0) return Invalid("max_blocks_per_job", "must be > 0");
  // The largest legal request must fit one gRPC message (service/limits.h has the arithmetic).
  const uint64_t max_receive = MaxReceiveMessageBytes(o.jobs.max_blocks_per_job);
  if (max_receive > static_cast<uint64_t>(INT32_MAX)) {
    return Invalid("max_blocks_per_job",
                   absl::StrCat(o.jobs.max_blocks_per_job, " needs messages of ", max_receive,
                                " bytes, more than gRPC can take"));
  }
  if (o.jobs.max_jobs_per_engine == 0) return Invalid("max_jobs_per_engine", "must be > 0");
  if (o.jobs.max_jobs_per_session == 0) return Invalid("max_jobs_per_session", "must be > 0");
  if (o.jobs.finished_remembered == 0) {
    return absl::InvalidArgumentError("jobs.finished_remembered must be > 0");
  }
  if (o.registry.idle_engine_ttl < absl::ZeroDuration()) {
    return Invalid("idle_engine_ttl_s", "must be >= 0 (0 keeps idle engines)");
  }
  if (o.registry.max_engines == 0) return Invalid("max_engines", "must be > 0");
  if (o.registry.maintenance_period <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("registry.maintenance_period must be > 0");
  }
  if (o.registry.pools.max_members == 0 ||
      o.registry.pools.max_members > SlotIndex::kMaxMembers) {
    return Invalid("pool_max_members", absl::StrCat("must be 1..", SlotIndex::kMaxMembers,
                                                    ", not ", o.registry.pools.max_members));
  }
  if (!(o.registry.pools.member_floor >= 0 && o.registry.pools.member_floor <= 1)) {
    return Invalid("pool_member_floor",
                   absl::StrCat("must be in [0, 1], not ", o.registry.pools.member_floor));
  }
  if (o.workers.max_sessions == 0) return Invalid("max_worker_sessions", "must be > 0");
  if (o.workers.max_queued_verdicts == 0) return Invalid("max_queued_verdicts", "must be > 0");
  if (o.workers.first_message_timeout <= absl::ZeroDuration()) {
    return Invalid("first_message_timeout_s", "must be > 0");
  }
  if (o.shutdown_grace < absl::ZeroDuration()) return Invalid("shutdown_grace_s", "must be >= 0");
  if (!o.disk_tier.paths.empty()) {
    const tier::DiskTierOptions& d = o.disk_tier;
    for (const std::string& path : d.paths) {
      if (path.empty()) return Invalid("disk_tier_path", "names an empty directory");
    }
    if (d.max_payload_bytes == 0 || d.max_payload_bytes % 4096 != 0) {
      return Invalid("disk_tier_row_bytes", absl::StrCat("must be a positive multiple of 4096, not ",
                                                         d.max_payload_bytes));
    }
    // Each path holds at least one record.
    const uint64_t slot = d.max_payload_bytes + 4096;
    if (d.capacity_bytes / d.paths.size() < slot) {
      return Invalid("disk_tier_bytes",
                     absl::StrCat("must hold at least one record (", slot, " bytes) per path, not ",
                                  d.capacity_bytes, " bytes over ", d.paths.size(), " paths"));
    }
    if (d.queue_depth < 1 || d.queue_depth > 4096) {
      return Invalid("disk_tier_queue_depth", absl::StrCat("must be 1..4096, not ", d.queue_depth));
    }
    if (d.write_depth < 1 || d.write_depth > d.queue_depth) {
      return Invalid("disk_tier_write_depth",
                     absl::StrCat("must be 1..--disk_tier_queue_depth (", d.queue_depth, "), not ",
                                  d.write_depth));
    }
  }
  if (!o.cluster_tier.seeds.empty()) {
    absl::Status valid = tier::cluster::Validate(o.cluster_tier);
    if (!valid.ok()) return Invalid("cluster_tier", valid.message());
  }
  if (o.tiers.promote_timeout <= absl::ZeroDuration()) {
    return Invalid("tier_promote_timeout_ms", "must be > 0");
  }
  if (o.tiers.max_spills_in_flight == 0) return Invalid("tier_spills_in_flight", "must be > 0");
  if (o.tiers.max_spill_queue == 0) {
    return absl::InvalidArgumentError("tiers.max_spill_queue must be > 0");
  }
  if (o.region_options.numa_node < -1) {
    return Invalid("region_numa_node", "must be -1 (first touch) or a node number");
  }
  if (o.state_key_bytes < StateFile::kMinKeyCapacity ||
      o.state_key_bytes > StateFile::kMaxKeyCapacity) {
    return Invalid("state_key_bytes",
                   absl::StrCat(o.state_key_bytes, " is outside [", StateFile::kMinKeyCapacity,
                                ", ", StateFile::kMaxKeyCapacity, "]"));
  }
  return absl::OkStatus();
}

}  // namespace kvoffload::daemon
