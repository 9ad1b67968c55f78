// Tests for ValidateTopology: every rule of DESIGN.md §2, with exact codes and messages.
#include <string>

#include "absl/status/status.h"
#include "common/engine_spec.h"
#include "common/geometry.h"
#include "gtest/gtest.h"

namespace kvoffload::common {
namespace {

constexpr uint64_t kGiB = uint64_t{1} << 30;

// A valid single-node TP8 MHA engine.
EngineSpec Tp8() {
  EngineSpec spec;
  spec.engine_id = "llama";
  spec.world_size = 8;
  spec.tp = 8;
  spec.num_layers = 32;
  spec.page_bytes = 16384;
  spec.budget_bytes = 8 * kGiB;
  return spec;
}

void ExpectRejected(const EngineSpec& spec, absl::StatusCode code, const std::string& message) {
  absl::Status status = ValidateTopology(spec);
  EXPECT_EQ(status.code(), code) << status;
  EXPECT_EQ(status.message(), message);
  // ComputeGeometry validates first and reports the same error.
  EXPECT_EQ(ComputeGeometry(spec).status(), status);
}

TEST(TopologyTest, AcceptsSingleNodeTp8) { EXPECT_TRUE(ValidateTopology(Tp8()).ok()); }

TEST(TopologyTest, EngineIdFormat) {
  EngineSpec spec = Tp8();
  spec.engine_id = "a/b";
  ExpectRejected(spec, absl::StatusCode::kInvalidArgument,
                 "rule engine_id_format: engine_id \"a/b\" (length 3) must be 1-128 "
                 "characters of [A-Za-z0-9._-]");
  spec.engine_id = "";
  ExpectRejected(spec, absl::StatusCode::kInvalidArgument,
                 "rule engine_id_format: engine_id \"\" (length 0) must be 1-128 "
                 "characters of [A-Za-z0-9._-]");
  spec.engine_id = "a b";
  EXPECT_EQ(ValidateTopology(spec).code(), absl::StatusCode::kInvalidArgument);
  spec.engine_id = std::string(129, 'x');
  EXPECT_EQ(ValidateTopology(spec).code(), absl::StatusCode::kInvalidArgument);
  spec.engine_id = std::string(128, 'x');
  EXPECT_TRUE(ValidateTopology(spec).ok());
  spec.engine_id = "Qwen3-0.6B_v2";
  EXPECT_TRUE(ValidateTopology(spec).ok());
}

struct PositiveCase {
  const char* field;
  void (*zero)(EngineSpec*);
};

TEST(TopologyTest, EveryCountAndSizeMustBePositive) {
  const PositiveCase cases[] = {
      {"world_size", [](EngineSpec* s) { s->world_size = 0; }},
      {"tp", [](EngineSpec* s) { s->tp = 0; }},
      {"pp", [](EngineSpec* s) { s->pp = 0; }},
      {"pcp", [](EngineSpec* s) { s->pcp = 0; }},
      {"dcp", [](EngineSpec* s) { s->dcp = 0; }},
      {"num_layers", [](EngineSpec* s) { s->num_layers = 0; }},
      {"num_kv_groups", [](EngineSpec* s) { s->num_kv_groups = 0; }},
      {"page_bytes", [](EngineSpec* s) { s->page_bytes = 0; }},
      {"blocks_per_row", [](EngineSpec* s) { s->blocks_per_row = 0; }},
      {"budget_bytes", [](EngineSpec* s) { s->budget_bytes = 0; }},
  };
  for (const PositiveCase& c : cases) {
    SCOPED_TRACE(c.field);
    EngineSpec spec = Tp8();
    c.zero(&spec);
    ExpectRejected(
        spec, absl::StatusCode::kInvalidArgument,
        std::string("rule positive_") + c.field + ": " + c.field + " must be positive, got 0");
  }
}

TEST(TopologyTest, DcpMustDivideTp) {
  EngineSpec spec = Tp8();
  spec.dcp = 3;
  ExpectRejected(spec, absl::StatusCode::kInvalidArgument,
                 "rule dcp_divides_tp: dcp 3 must divide tp 8");
  spec.dcp = 2;
  EXPECT_TRUE(ValidateTopology(spec).ok());
}

TEST(TopologyTest, LocalWorldSizeThreeOfEightRejected) {
  EngineSpec spec = Tp8();
  spec.local_world_size = 3;
  ExpectRejected(spec, absl::StatusCode::kInvalidArgument,
                 "rule local_world_size_divides_world_size: local_world_size 3 must be a "
                 "positive divisor of world_size 8");
}

TEST(TopologyTest, LocalWorldSizeSixteenOfEightRejected) {
  EngineSpec spec = Tp8();
  spec.local_world_size = 16;
  ExpectRejected(spec, absl::StatusCode::kInvalidArgument,
                 "rule local_world_size_divides_world_size: local_world_size 16 must be a "
                 "positive divisor of world_size 8");
}

TEST(TopologyTest, EveryDivisorOfWorldSizeAccepted) {
  for (uint32_t lws : {1u, 2u, 4u, 8u}) {
    EngineSpec spec = Tp8();
    spec.local_world_size = lws;
    EXPECT_TRUE(ValidateTopology(spec).ok()) << lws;
  }
}

TEST(TopologyTest, PipelineParallelRejected) {
  EngineSpec spec = Tp8();
  spec.world_size = 16;
  spec.pp = 2;
  ExpectRejected(spec, absl::StatusCode::kFailedPrecondition,
                 "rule no_pipeline_parallel: pp 2 is not supported: heterogeneous worker "
                 "byte geometry is not negotiated");
}

TEST(TopologyTest, PrefillContextParallelRejected) {
  EngineSpec spec = Tp8();
  spec.world_size = 16;
  spec.pcp = 2;
  ExpectRejected(spec, absl::StatusCode::kFailedPrecondition,
                 "rule no_prefill_context_parallel: pcp 2 is not supported: heterogeneous "
                 "worker byte geometry is not negotiated");
}

TEST(ExecutorTest, UniWithOneWorkerAccepted) {
  EngineSpec spec = Tp8();
  spec.executor = Executor::kUni;
  spec.world_size = 1;
  spec.tp = 1;
  EXPECT_TRUE(ValidateTopology(spec).ok());
}

TEST(ExecutorTest, UniWithTwoWorkersRejected) {
  EngineSpec spec = Tp8();
  spec.executor = Executor::kUni;
  spec.world_size = 2;
  spec.tp = 2;
  ExpectRejected(spec, absl::StatusCode::kInvalidArgument,
                 "rule uni_executor_single_worker: executor uni runs one worker, but "
                 "world_size is 2");
}

TEST(ExecutorTest, MpAcceptedDeclaredOrNot) {
  EngineSpec spec = Tp8();
  spec.executor = Executor::kMp;
  EXPECT_TRUE(ValidateTopology(spec).ok());
  spec.local_world_size = 4;
  EXPECT_TRUE(ValidateTopology(spec).ok());
}

TEST(ExecutorTest, RayWithoutLocalWorldSizeRejected) {
  EngineSpec spec = Tp8();
  spec.executor = Executor::kRay;
  ExpectRejected(spec, absl::StatusCode::kInvalidArgument,
                 "rule launcher_requires_local_world_size: executor ray with world_size 8 "
                 "must declare local_world_size: its topology is unknown here");
}

TEST(ExecutorTest, ExternalWithoutLocalWorldSizeRejected) {
  EngineSpec spec = Tp8();
  spec.executor = Executor::kExternal;
  ExpectRejected(spec, absl::StatusCode::kInvalidArgument,
                 "rule launcher_requires_local_world_size: executor external with "
                 "world_size 8 must declare local_world_size: its topology is unknown here");
}

TEST(ExecutorTest, LaunchersWithDeclaredLocalWorldSizeAccepted) {
  for (Executor e : {Executor::kRay, Executor::kExternal}) {
    EngineSpec spec = Tp8();
    spec.executor = e;
    spec.local_world_size = 4;
    EXPECT_TRUE(ValidateTopology(spec).ok()) << ExecutorName(e);
    spec.local_world_size = 8;
    EXPECT_TRUE(ValidateTopology(spec).ok()) << ExecutorName(e);
  }
}

TEST(ExecutorTest, LaunchersWithOneWorkerAccepted) {
  for (Executor e : {Executor::kRay, Executor::kExternal}) {
    EngineSpec spec = Tp8();
    spec.executor = e;
    spec.world_size = 1;
    spec.tp = 1;
    EXPECT_TRUE(ValidateTopology(spec).ok()) << ExecutorName(e);
    absl::StatusOr<Geometry> g = ComputeGeometry(spec);
    ASSERT_TRUE(g.ok()) << g.status();
    EXPECT_EQ(g->local_world_size, 1u);
  }
}

TEST(SecondaryTiersTest, ReplicaSpanningNodesRejected) {
  EngineSpec spec = Tp8();
  spec.local_world_size = 4;
  spec.secondary_tiers = {"fs", "obj"};
  ExpectRejected(spec, absl::StatusCode::kFailedPrecondition,
                 "rule secondary_tiers_need_node_local_replica: secondary tiers [fs,obj] need "
                 "the replica on one node, but local_world_size 4 != world_size 8");
}

TEST(SecondaryTiersTest, NodeLocalReplicaAccepted) {
  EngineSpec spec = Tp8();
  spec.secondary_tiers = {"fs"};
  EXPECT_TRUE(ValidateTopology(spec).ok());  // undeclared: the replica is node-local
  spec.local_world_size = 8;
  EXPECT_TRUE(ValidateTopology(spec).ok());
}

TEST(SecondaryTiersTest, DpReplicasOnDifferentNodesAccepted) {
  // DP2 x TP4: replica 0 on node A, replica 1 on node B, each node-local.
  for (uint32_t dp_rank : {0u, 1u}) {
    EngineSpec spec = Tp8();
    spec.dp_rank = dp_rank;
    spec.world_size = 4;
    spec.tp = 4;
    spec.local_world_size = 4;
    spec.secondary_tiers = {"fs"};
    EXPECT_TRUE(ValidateTopology(spec).ok()) << dp_rank;
  }
}

TEST(TopologyTest, WorkerBytesOverflowRejected) {
  EngineSpec spec = Tp8();
  spec.page_bytes = uint64_t{1} << 62;
  spec.num_layers = 4;
  ExpectRejected(spec, absl::StatusCode::kInvalidArgument,
                 "rule sizes_fit_in_64_bits: page_bytes 4611686018427387904 x num_layers 4 "
                 "overflows 64 bits");
  // An explicit worker_bytes_per_block does not need the product.
  spec.worker_bytes_per_block = 1 << 20;
  EXPECT_TRUE(ValidateTopology(spec).ok());
}

}  // namespace
}  // namespace kvoffload::common
