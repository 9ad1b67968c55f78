// Tests for EngineSpec: name parsing, the region key, printing and equality.
#include "common/engine_spec.h"

#include "absl/status/status.h"
#include "gtest/gtest.h"

namespace kvoffload::common {
namespace {

TEST(ParseExecutorTest, ParsesEveryName) {
  EXPECT_EQ(*ParseExecutor("uni"), Executor::kUni);
  EXPECT_EQ(*ParseExecutor("mp"), Executor::kMp);
  EXPECT_EQ(*ParseExecutor("ray"), Executor::kRay);
  EXPECT_EQ(*ParseExecutor("external"), Executor::kExternal);
}

TEST(ParseExecutorTest, RoundTripsThroughName) {
  for (Executor e : {Executor::kUni, Executor::kMp, Executor::kRay, Executor::kExternal}) {
    EXPECT_EQ(*ParseExecutor(ExecutorName(e)), e);
  }
}

TEST(ParseExecutorTest, RejectsUnknownNamingAllowedValues) {
  absl::StatusOr<Executor> e = ParseExecutor("MP");
  ASSERT_EQ(e.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(e.status().message(),
            "rule known_executor: unknown executor \"MP\"; expected one of uni, mp, ray, "
            "external");
  EXPECT_EQ(ParseExecutor("").status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(ParseAttentionTest, ParsesEveryName) {
  EXPECT_EQ(*ParseAttention("mha"), Attention::kMha);
  EXPECT_EQ(*ParseAttention("mla"), Attention::kMla);
  EXPECT_STREQ(AttentionName(Attention::kMha), "mha");
  EXPECT_STREQ(AttentionName(Attention::kMla), "mla");
}

TEST(ParseAttentionTest, RejectsUnknownNamingAllowedValues) {
  absl::StatusOr<Attention> a = ParseAttention("gqa");
  ASSERT_EQ(a.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(a.status().message(),
            "rule known_attention: unknown attention \"gqa\"; expected one of mha, mla");
}

TEST(ParseAttentionTest, EscapesControlBytesInMessage) {
  absl::StatusOr<Attention> a = ParseAttention("m\nla");
  ASSERT_FALSE(a.ok());
  EXPECT_EQ(std::string(a.status().message()).find('\n'), std::string::npos);
}

TEST(EngineSpecTest, KeyIsEngineIdSlashDpRank) {
  EngineSpec spec;
  spec.engine_id = "llama-70b";
  spec.dp_rank = 3;
  EXPECT_EQ(spec.Key(), "llama-70b/3");
}

TEST(EngineSpecTest, DebugStringNamesEveryField) {
  EngineSpec spec;
  spec.engine_id = "e";
  spec.world_size = 8;
  spec.local_world_size = 4;
  spec.tp = 8;
  spec.executor = Executor::kRay;
  spec.attention = Attention::kMla;
  spec.num_layers = 61;
  spec.page_bytes = 18432;
  spec.budget_bytes = 1 << 30;
  spec.secondary_tiers = {"fs", "obj"};
  EXPECT_EQ(spec.DebugString(),
            "engine_id=e dp_rank=0 world_size=8 local_world_size=4 tp=8 pp=1 pcp=1 dcp=1 "
            "executor=ray attention=mla num_kv_groups=1 num_layers=61 page_bytes=18432 "
            "worker_bytes_per_block=0 blocks_per_row=1 budget_bytes=1073741824 "
            "secondary_tiers=[fs,obj] rows_assigned_by_engine=0 stores_by_writer_only=0 pool= "
            "model_identity=");
}

TEST(EngineSpecTest, EqualityComparesEveryField) {
  EngineSpec a;
  a.page_bytes = 4096;
  a.budget_bytes = 1 << 20;
  EngineSpec b = a;
  EXPECT_TRUE(a == b);
  EXPECT_FALSE(a != b);

  b.secondary_tiers = {"fs"};
  EXPECT_FALSE(a == b);
  b = a;
  b.rows_assigned_by_engine = true;
  EXPECT_NE(a, b);
  b = a;
  b.stores_by_writer_only = true;
  EXPECT_NE(a, b);
  b = a;
  b.dp_rank = 1;
  EXPECT_NE(a, b);
  b = a;
  b.worker_bytes_per_block = 4096;
  EXPECT_NE(a, b);
  // Undeclared (0) and declared local_world_size differ even when they resolve alike.
  b = a;
  b.local_world_size = 1;
  EXPECT_NE(a, b);
}

}  // namespace
}  // namespace kvoffload::common
