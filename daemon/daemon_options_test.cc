// ValidateDaemonOptions: the defaults pass once the node cap is set, and every rule refuses its
// first value out of range with INVALID_ARGUMENT naming the flag.
#include "daemon/daemon_options.h"

#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace kvoffload::daemon {
namespace {

DaemonOptions Valid() {
  DaemonOptions o;
  o.max_region_bytes = 1 << 20;
  return o;
}

TEST(DaemonOptionsTest, TheDefaultsAreValidOnceTheNodeCapIsSet) {
  EXPECT_TRUE(ValidateDaemonOptions(Valid()).ok());
  absl::Status s = ValidateDaemonOptions(DaemonOptions());
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "--max_region_bytes must be > 0 (the node-wide region cap)");
}

TEST(DaemonOptionsTest, EachRuleNamesItsFlag) {
  struct Case {
    std::function<void(DaemonOptions&)> set;
    std::string message;
  };
  const std::vector<Case> cases = {
      {[](DaemonOptions& o) { o.runtime_dir.clear(); }, "--runtime_dir must not be empty"},
      {[](DaemonOptions& o) { o.jobs.job_timeout = absl::ZeroDuration(); },
       "--job_timeout_s must be > 0"},
      {[](DaemonOptions& o) { o.jobs.max_blocks_per_job = 0; }, "--max_blocks_per_job must be > 0"},
      {[](DaemonOptions& o) { o.jobs.max_blocks_per_job = uint64_t{1} << 40; },
       "--max_blocks_per_job 1099511627776 needs messages of "},
      {[](DaemonOptions& o) { o.jobs.max_jobs_per_engine = 0; },
       "--max_jobs_per_engine must be > 0"},
      {[](DaemonOptions& o) { o.jobs.max_jobs_per_session = 0; },
       "--max_jobs_per_session must be > 0"},
      {[](DaemonOptions& o) { o.registry.idle_engine_ttl = -absl::Seconds(1); },
       "--idle_engine_ttl_s must be >= 0 (0 keeps idle engines)"},
      {[](DaemonOptions& o) { o.registry.max_engines = 0; }, "--max_engines must be > 0"},
      {[](DaemonOptions& o) { o.registry.pools.max_members = 0; },
       "--pool_max_members must be 1..16, not 0"},
      {[](DaemonOptions& o) { o.registry.pools.max_members = 17; },
       "--pool_max_members must be 1..16, not 17"},
      {[](DaemonOptions& o) { o.registry.pools.member_floor = 1.5; },
       "--pool_member_floor must be in [0, 1], not 1.5"},
      {[](DaemonOptions& o) { o.registry.pools.member_floor = std::nan(""); },
       "--pool_member_floor must be in [0, 1], not nan"},
      {[](DaemonOptions& o) { o.workers.max_sessions = 0; }, "--max_worker_sessions must be > 0"},
      {[](DaemonOptions& o) { o.workers.max_queued_verdicts = 0; },
       "--max_queued_verdicts must be > 0"},
      {[](DaemonOptions& o) { o.workers.first_message_timeout = absl::ZeroDuration(); },
       "--first_message_timeout_s must be > 0"},
      {[](DaemonOptions& o) { o.shutdown_grace = -absl::Seconds(1); },
       "--shutdown_grace_s must be >= 0"},
      {[](DaemonOptions& o) { o.region_options.numa_node = -2; },
       "--region_numa_node must be -1 (first touch) or a node number"},
      {[](DaemonOptions& o) { o.state_key_bytes = 7; },
       "--state_key_bytes 7 is outside [8, 256]"},
      {[](DaemonOptions& o) { o.state_key_bytes = 257; },
       "--state_key_bytes 257 is outside [8, 256]"},
  };
  for (const Case& c : cases) {
    DaemonOptions o = Valid();
    c.set(o);
    absl::Status s = ValidateDaemonOptions(o);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << c.message;
    // The message starts with the expected text (the gRPC bound adds its arithmetic).
    EXPECT_EQ(s.message().substr(0, c.message.size()), c.message);
  }
}

TEST(DaemonOptionsTest, TheBoundsThemselvesAreAccepted) {
  DaemonOptions o = Valid();
  o.registry.idle_engine_ttl = absl::ZeroDuration();
  o.registry.pools.max_members = 16;
  o.registry.pools.member_floor = 0;
  o.shutdown_grace = absl::ZeroDuration();
  o.state_key_bytes = 256;
  o.region_options.numa_node = 0;
  EXPECT_TRUE(ValidateDaemonOptions(o).ok());
  o.registry.pools.member_floor = 1;
  o.state_key_bytes = 8;
  EXPECT_TRUE(ValidateDaemonOptions(o).ok());
}

}  // namespace
}  // namespace kvoffload::daemon
