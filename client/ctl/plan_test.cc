// Tests for `kvoffloadctl plan` (RunPlan): exit codes, the exact JSON line, and the exact
// one-line errors for bad flags and rejected topologies.
#include "client/ctl/plan.h"

#include <sstream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "gtest/gtest.h"

namespace kvoffload::client::ctl {
namespace {

struct Result {
  int rc;
  std::string out;
  std::string err;
};

Result Plan(const std::vector<std::string>& args) {
  std::ostringstream out;
  std::ostringstream err;
  const int rc = RunPlan(args, out, err);
  return {rc, out.str(), err.str()};
}

void ExpectUsageError(const std::vector<std::string>& args, const std::string& line) {
  Result r = Plan(args);
  EXPECT_EQ(r.rc, 2);
  EXPECT_EQ(r.out, "");
  EXPECT_EQ(r.err, "kvoffloadctl plan: " + line + "\n");
}

void ExpectRejected(const std::vector<std::string>& args, const std::string& line) {
  Result r = Plan(args);
  EXPECT_EQ(r.rc, 2);
  EXPECT_EQ(r.out, "");
  EXPECT_EQ(r.err, "rejected: " + line + "\n");
}

const std::vector<std::string> kLlama = {"--engine_id=llama", "--num_layers=32",
                                         "--page_bytes=16KiB", "--budget_bytes=8GiB"};

std::vector<std::string> Llama(std::vector<std::string> more) {
  std::vector<std::string> args = kLlama;
  args.insert(args.end(), more.begin(), more.end());
  return args;
}

TEST(PlanTest, Tp8OverTwoNodesRankFiveTakesSlotOne) {
  Result r = Plan(Llama({"--world_size=8", "--local_world_size=4", "--mp_rank=5"}));
  EXPECT_EQ(r.rc, 0);
  EXPECT_EQ(r.err, "");
  EXPECT_EQ(r.out,
            "{\"engine_key\":\"llama/0\",\"replicated\":false,\"num_copies\":4,"
            "\"local_world_size\":4,\"slot\":1,\"writer\":true,\"blocks_per_row\":1,"
            "\"worker_bytes_per_block\":524288,\"slot_bytes\":524288,\"row_bytes\":2097152,"
            "\"num_rows\":4096,\"capacity_bytes\":8589934592,\"budget_bytes\":8589934592,"
            "\"fingerprint\":\"replicated=0 copies=4 blocks_per_row=1 "
            "worker_bytes_per_block=524288 row_bytes=2097152 pages=[]\","
            "\"why_not_replicated\":\"single bare MLA group: attention=mha "
            "num_kv_groups=1\"}\n");
}

TEST(PlanTest, SpaceSeparatedValuesMatchEqualsForm) {
  Result equals = Plan(Llama({"--world_size=8", "--local_world_size=4", "--mp_rank=5"}));
  Result spaced =
      Plan({"--engine_id", "llama", "--num_layers", "32", "--page_bytes", "16384", "--budget_bytes",
            "8589934592", "--world_size", "8", "--local_world_size", "4", "--mp_rank", "5"});
  EXPECT_EQ(spaced.rc, 0);
  EXPECT_EQ(spaced.out, equals.out);
}

TEST(PlanTest, ReplicatedMlaStoresOneCopyAndOnlyRankZeroWrites) {
  const std::vector<std::string> base = {"--engine_id=deepseek", "--world_size=8",
                                         "--attention=mla",      "--num_layers=61",
                                         "--page_bytes=18432",   "--budget_bytes=64GiB"};
  std::vector<std::string> rank3 = base;
  rank3.push_back("--mp_rank=3");
  Result r = Plan(rank3);
  EXPECT_EQ(r.rc, 0);
  EXPECT_EQ(r.err, "");
  EXPECT_EQ(r.out,
            "{\"engine_key\":\"deepseek/0\",\"replicated\":true,\"num_copies\":1,"
            "\"local_world_size\":8,\"slot\":0,\"writer\":false,\"blocks_per_row\":1,"
            "\"worker_bytes_per_block\":1124352,\"slot_bytes\":1124352,\"row_bytes\":1126400,"
            "\"num_rows\":61008,\"capacity_bytes\":68719411200,\"budget_bytes\":68719476736,"
            "\"fingerprint\":\"replicated=1 copies=1 blocks_per_row=1 "
            "worker_bytes_per_block=1124352 row_bytes=1126400 pages=[]\"}\n");

  Result rank0 = Plan(base);
  EXPECT_EQ(rank0.rc, 0);
  EXPECT_NE(rank0.out.find("\"slot\":0,\"writer\":true,"), std::string::npos) << rank0.out;
}

TEST(PlanTest, MlaAcrossNodesFallsBackToPerRank) {
  Result r = Plan({"--world_size=8", "--local_world_size=4", "--mp_rank=6", "--attention=mla",
                   "--num_layers=61", "--page_bytes=18432", "--budget_bytes=64GiB"});
  EXPECT_EQ(r.rc, 0);
  EXPECT_NE(r.out.find("\"replicated\":false,\"num_copies\":4,\"local_world_size\":4,"
                       "\"slot\":2,\"writer\":true,"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("\"why_not_replicated\":\"node-local replica: local_world_size=4 "
                       "world_size=8\"}"),
            std::string::npos)
      << r.out;
}

TEST(PlanTest, DefaultsAreSingleWorkerMp) {
  Result r = Plan({"--num_layers=1", "--page_bytes=4KiB", "--budget_bytes=1MiB"});
  EXPECT_EQ(r.rc, 0);
  EXPECT_NE(r.out.find("{\"engine_key\":\"engine/0\",\"replicated\":false,\"num_copies\":1,"
                       "\"local_world_size\":1,\"slot\":0,\"writer\":true,"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("\"num_rows\":256,"), std::string::npos) << r.out;
}

TEST(PlanTest, DpRankIsPartOfTheKey) {
  Result r = Plan(Llama({"--world_size=2", "--dp_rank=1"}));
  EXPECT_EQ(r.rc, 0);
  EXPECT_EQ(r.out.rfind("{\"engine_key\":\"llama/1\",", 0), 0u) << r.out;
}

TEST(PlanTest, ExplicitWorkerBytesAndBlocksPerRow) {
  Result r = Plan(Llama({"--worker_bytes_per_block=12KiB", "--blocks_per_row=4"}));
  EXPECT_EQ(r.rc, 0);
  EXPECT_NE(r.out.find("\"blocks_per_row\":4,\"worker_bytes_per_block\":12288,"
                       "\"slot_bytes\":49152,\"row_bytes\":49152,"),
            std::string::npos)
      << r.out;
}

TEST(PlanTest, HelpPrintsUsage) {
  Result r = Plan({"--world_size=8", "--help"});
  EXPECT_EQ(r.rc, 0);
  EXPECT_EQ(r.err, "");
  EXPECT_EQ(r.out, PlanUsage());
  EXPECT_EQ(r.out.rfind("usage: kvoffloadctl plan", 0), 0u);
  EXPECT_NE(r.out.find("KiB, MiB, GiB or TiB"), std::string::npos);
  EXPECT_NE(r.out.find("--secondary_tiers"), std::string::npos);
  EXPECT_EQ(Plan({"-h"}).rc, 0);
}

// --- Rejected topologies ----------------------------------------------------------------------

TEST(PlanRejectTest, LocalWorldSizeNotADivisor) {
  ExpectRejected(Llama({"--world_size=8", "--local_world_size=3"}),
                 "rule local_world_size_divides_world_size: local_world_size 3 must be a "
                 "positive divisor of world_size 8");
}

TEST(PlanRejectTest, MpRankOutsideWorld) {
  ExpectRejected(Llama({"--world_size=8", "--mp_rank=8"}),
                 "rule mp_rank_in_world: mp_rank 8 must be less than world_size 8");
}

TEST(PlanRejectTest, PipelineParallel) {
  ExpectRejected(Llama({"--world_size=16", "--tp=8", "--pp=2"}),
                 "rule no_pipeline_parallel: pp 2 is not supported: heterogeneous worker "
                 "byte geometry is not negotiated");
}

TEST(PlanRejectTest, RayNeedsLocalWorldSize) {
  ExpectRejected(Llama({"--world_size=8", "--executor=ray"}),
                 "rule launcher_requires_local_world_size: executor ray with world_size 8 "
                 "must declare local_world_size: its topology is unknown here");
  EXPECT_EQ(Plan(Llama({"--world_size=8", "--executor=ray", "--local_world_size=4"})).rc, 0);
}

TEST(PlanRejectTest, SecondaryTiersAcrossNodes) {
  ExpectRejected(Llama({"--world_size=8", "--local_world_size=4", "--secondary_tiers=fs,obj"}),
                 "rule secondary_tiers_need_node_local_replica: secondary tiers [fs,obj] need "
                 "the replica on one node, but local_world_size 4 != world_size 8");
}

TEST(PlanRejectTest, BudgetTooSmall) {
  ExpectRejected({"--num_layers=32", "--page_bytes=16KiB", "--budget_bytes=256KiB"},
                 "rule budget_holds_a_row: budget_bytes 262144 holds no row of 524288 bytes "
                 "(1 copies x 524288 slot bytes, rounded up to 4096)");
}

TEST(PlanRejectTest, BadEngineId) {
  ExpectRejected({"--engine_id=a/b", "--num_layers=1", "--page_bytes=4KiB", "--budget_bytes=1MiB"},
                 "rule engine_id_format: engine_id \"a/b\" (length 3) must be 1-128 "
                 "characters of [A-Za-z0-9._-]");
}

// --- Bad flags --------------------------------------------------------------------------------

TEST(PlanFlagTest, UnknownFlag) {
  ExpectUsageError(Llama({"--world=8"}), "unknown flag --world (see --help)");
}

TEST(PlanFlagTest, PositionalArgument) {
  ExpectUsageError(Llama({"8"}), "unexpected argument \"8\" (flags are --name=value)");
}

TEST(PlanFlagTest, MissingRequired) {
  ExpectUsageError({"--num_layers=32", "--page_bytes=16KiB"},
                   "missing required flag --budget_bytes");
  ExpectUsageError({"--budget_bytes=1GiB", "--page_bytes=16KiB"},
                   "missing required flag --num_layers");
}

TEST(PlanFlagTest, NegativeValue) {
  ExpectUsageError(Llama({"--tp=-2"}), "--tp must not be negative, got \"-2\"");
  ExpectUsageError(Llama({"--mp_rank", "-1"}), "--mp_rank must not be negative, got \"-1\"");
}

TEST(PlanFlagTest, ZeroWhereNotAllowed) {
  ExpectUsageError(Llama({"--world_size=0"}), "--world_size must be positive, got 0");
  ExpectUsageError(Llama({"--blocks_per_row=0"}), "--blocks_per_row must be positive, got 0");
  ExpectUsageError({"--num_layers=32", "--page_bytes=16KiB", "--budget_bytes=0GiB"},
                   "--budget_bytes must be positive, got 0");
}

TEST(PlanFlagTest, ZeroLocalWorldSizeMeansUndeclared) {
  Result r = Plan(Llama({"--world_size=4", "--local_world_size=0"}));
  EXPECT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.out.find("\"local_world_size\":4,"), std::string::npos) << r.out;
}

TEST(PlanFlagTest, NotANumber) {
  ExpectUsageError(Llama({"--tp=eight"}), "--tp needs a non-negative integer, got \"eight\"");
  ExpectUsageError(Llama({"--tp=+8"}), "--tp needs a non-negative integer, got \"+8\"");
  ExpectUsageError(Llama({"--tp="}), "--tp needs a non-negative integer, got \"\"");
  ExpectUsageError({"--num_layers=32", "--page_bytes=16KB", "--budget_bytes=1GiB"},
                   "--page_bytes needs a byte count (digits with optional KiB, MiB, GiB or "
                   "TiB), got \"16KB\"");
}

TEST(PlanFlagTest, TooLarge) {
  ExpectUsageError(Llama({"--world_size=4294967296"}),
                   "--world_size is too large, got 4294967296 (max 4294967295)");
  ExpectUsageError({"--num_layers=32", "--page_bytes=16KiB", "--budget_bytes=17179869184GiB"},
                   "--budget_bytes is too large, got \"17179869184GiB\"");
}

TEST(PlanFlagTest, MissingValue) {
  ExpectUsageError(Llama({"--tp"}), "--tp needs a value");
  ExpectUsageError(Llama({"--tp", "--pp=1"}), "--tp needs a value");
}

TEST(PlanFlagTest, RepeatedFlag) {
  ExpectUsageError(Llama({"--tp=8", "--tp=4"}), "--tp is given more than once");
}

TEST(PlanFlagTest, UnknownExecutorAndAttention) {
  ExpectUsageError(Llama({"--executor=slurm"}),
                   "--executor: rule known_executor: unknown executor \"slurm\"; expected one "
                   "of uni, mp, ray, external");
  ExpectUsageError(Llama({"--attention=gqa"}),
                   "--attention: rule known_attention: unknown attention \"gqa\"; expected one "
                   "of mha, mla");
}

TEST(ParseByteSizeTest, AcceptsBinarySuffixes) {
  EXPECT_EQ(*ParseByteSize("0"), 0u);
  EXPECT_EQ(*ParseByteSize("4096"), 4096u);
  EXPECT_EQ(*ParseByteSize("12KiB"), 12288u);
  EXPECT_EQ(*ParseByteSize("2MiB"), 2097152u);
  EXPECT_EQ(*ParseByteSize("80GiB"), 85899345920u);
  EXPECT_EQ(*ParseByteSize("1TiB"), uint64_t{1} << 40);
  EXPECT_EQ(*ParseByteSize("18446744073709551615"), ~uint64_t{0});
}

TEST(ParseByteSizeTest, RejectsEverythingElse) {
  for (const char* bad : {"", "GiB", "1.5GiB", "1GB", "1gib", "1 GiB", "-1", "0x10",
                          "18446744073709551616", "16777216TiB"}) {
    EXPECT_EQ(ParseByteSize(bad).status().code(), absl::StatusCode::kInvalidArgument) << bad;
  }
}

}  // namespace
}  // namespace kvoffload::client::ctl
