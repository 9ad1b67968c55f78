// Pool: who may join, what members must agree on, segments joining and draining.
#include "daemon/pool/pool.h"

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "common/geometry.h"
#include "daemon/index/testing/row_lists.h"
#include "daemon/pool/pool_table.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace kvoffload::daemon {
namespace {

using ::testing::HasSubstr;

common::EngineSpec Spec(const std::string& engine_id, uint32_t dp_rank = 0) {
  common::EngineSpec spec;
  spec.engine_id = engine_id;
  spec.dp_rank = dp_rank;
  spec.page_bytes = 4096;
  spec.budget_bytes = 8 * 4096;  // 8 rows
  spec.pool = "qwen";
  spec.model_identity = "Qwen/Qwen3-8B@main bf16 kv=bf16 block=16";
  return spec;
}

common::Geometry GeometryOf(const common::EngineSpec& spec) {
  auto g = common::ComputeGeometry(spec);
  EXPECT_TRUE(g.ok()) << g.status();
  return *g;
}

Caller Uid(uint32_t uid, uint32_t gid = 100) { return Caller{4242, uid, gid, {}}; }

class PoolTest : public ::testing::Test {
 protected:
  MemoryBudget budget_{UINT64_MAX};
  DeferredRelease release_;
  PoolTable table_{PoolOptions{}, &budget_, &release_};
  std::vector<uint8_t> region_a_ = std::vector<uint8_t>(8 * 4096);
  std::vector<uint8_t> region_b_ = std::vector<uint8_t>(8 * 4096);
};

TEST_F(PoolTest, TheCreatorsListsSayWhoMayJoinAndOthersLearnNothing) {
  common::EngineSpec a = Spec("a");
  a.member_uids = {2000};
  a.member_gids = {300};
  const Caller owner = Uid(1000);
  auto joined = table_.Join(&owner, a, GeometryOf(a), 1000, std::make_shared<int>(1),
                            region_a_.data());
  ASSERT_TRUE(joined.ok()) << joined.status();
  EXPECT_TRUE(joined->created);
  EXPECT_EQ(joined->member, 0u);
  common::EngineSpec b = Spec("b");
  // A stranger with a different model identity hears PERMISSION_DENIED, not the mismatch.
  b.model_identity = "something else";
  const Caller stranger = Uid(3000);
  absl::Status denied = table_.Check(&stranger, b, GeometryOf(b));
  EXPECT_EQ(denied.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(denied.message(), HasSubstr("uid 3000"));
  EXPECT_THAT(std::string(denied.message()), ::testing::Not(HasSubstr("Qwen")));
  EXPECT_EQ(table_.Join(&stranger, b, GeometryOf(b), 3000, std::make_shared<int>(2),
                        region_b_.data())
                .status()
                .code(),
            absl::StatusCode::kPermissionDenied);
  // A listed uid and a listed group get to the comparison.
  const Caller listed = Uid(2000);
  EXPECT_EQ(table_.Check(&listed, b, GeometryOf(b)).code(),
            absl::StatusCode::kFailedPrecondition);
  Caller in_group = Uid(3001, 999);
  in_group.groups = {300};
  EXPECT_EQ(table_.Check(&in_group, b, GeometryOf(b)).code(),
            absl::StatusCode::kFailedPrecondition);
  b.model_identity = a.model_identity;
  EXPECT_TRUE(table_.Check(&in_group, b, GeometryOf(b)).ok());
  EXPECT_TRUE(table_.Check(nullptr, b, GeometryOf(b)).ok());  // in-process: not checked
}

TEST_F(PoolTest, MembersMustAgreeOnEveryFieldOfTheFingerprint) {
  common::EngineSpec a = Spec("a");
  ASSERT_TRUE(table_.Join(nullptr, a, GeometryOf(a), 0, std::make_shared<int>(1),
                          region_a_.data())
                  .ok());
  auto expect_field = [&](common::EngineSpec b, const std::string& field) {
    absl::Status s = table_.Check(nullptr, b, GeometryOf(b));
    EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << field;
    EXPECT_THAT(s.message(), HasSubstr(field + " differs")) << s;
  };
  common::EngineSpec b = Spec("b");
  b.model_identity = "Qwen/Qwen3-8B@main fp16";
  expect_field(b, "model_identity");
  b = Spec("b");
  b.budget_bytes = 16 * 4096;
  expect_field(b, "num_rows");
  b = Spec("b");
  b.page_bytes = 8192;
  b.budget_bytes = 8 * 8192;
  expect_field(b, "worker_bytes_per_block");
  b = Spec("b");
  b.blocks_per_row = 2;
  b.budget_bytes = 8 * 8192;
  expect_field(b, "blocks_per_row");
  b = Spec("b");
  b.world_size = b.tp = 2;
  b.budget_bytes = 8 * 8192;
  expect_field(b, "num_copies");
  b = Spec("b");
  b.pool = "bad name!";
  EXPECT_EQ(table_.Check(nullptr, b, GeometryOf(b)).code(), absl::StatusCode::kInvalidArgument);
  b = Spec("b");
  b.model_identity.clear();
  EXPECT_EQ(table_.Check(nullptr, b, GeometryOf(b)).code(), absl::StatusCode::kInvalidArgument);
  b = Spec("b");
  b.rows_assigned_by_engine = true;
  EXPECT_EQ(table_.Check(nullptr, b, GeometryOf(b)).code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(PoolTest, CapacityGrowsWithMembersAndALeavingSegmentIsReleasedOnceDrained) {
  common::EngineSpec a = Spec("a"), b = Spec("b");
  std::shared_ptr<int> keep_a = std::make_shared<int>(1), keep_b = std::make_shared<int>(2);
  auto ja = table_.Join(nullptr, a, GeometryOf(a), 0, keep_a, region_a_.data());
  ASSERT_TRUE(ja.ok());
  auto jb = table_.Join(nullptr, b, GeometryOf(b), 0, keep_b, region_b_.data());
  ASSERT_TRUE(jb.ok());
  EXPECT_FALSE(jb->created);
  EXPECT_EQ(ja->pool, jb->pool);
  Pool& pool = *ja->pool;
  EXPECT_EQ(pool.Snapshot().rows_online, 16u);
  EXPECT_EQ(pool.Snapshot().members.size(), 2u);
  std::shared_ptr<void> held;
  EXPECT_EQ(pool.SegmentBase(jb->member, &held), region_b_.data());
  // B's member stores into B's segment (it is handed out first), and A reads it.
  auto store = pool.index().PrepareStore({std::string(32, 'k')}, jb->member);
  ASSERT_TRUE(store.ok());
  ASSERT_TRUE(BeginCopy(pool.index(), CopyDirection::kStore, store->rows).ok());
  ASSERT_TRUE(EndStoreCopy(pool.index(), store->rows, true).ok());
  ASSERT_TRUE(pool.index().CompleteStore(store->keys, true).ok());
  auto rows = pool.index().PrepareLoad(store->keys, nullptr, ja->member);
  ASSERT_TRUE(rows.ok());
  const uint32_t segment =
      static_cast<uint32_t>((*rows)[0] / pool.index().segments().segment_rows());
  // The segment's member leaves while A reads its row: its region stays.
  const uint32_t leaving = segment;
  pool.Leave(leaving);
  pool.Leave(leaving);  // idempotent
  table_.Maintain();
  EXPECT_EQ(pool.Snapshot().members.size(), 2u);
  EXPECT_EQ(pool.SegmentBase(leaving, &held), leaving == ja->member ? region_a_.data()
                                                                    : region_b_.data());
  ASSERT_TRUE(pool.index().CompleteLoad(store->keys).ok());
  table_.Maintain();
  EXPECT_EQ(pool.Snapshot().members.size(), 1u);
  EXPECT_EQ(pool.Snapshot().rows_online, 8u);
  EXPECT_THAT(pool.index().Lookup(store->keys, ja->member),
              ::testing::ElementsAre(SlotIndex::KeyState::kMiss));
  // The other member leaves too: the pool is forgotten, a new one may take its name.
  pool.Leave(leaving == ja->member ? jb->member : ja->member);
  table_.Maintain();
  EXPECT_TRUE(table_.List().empty());
  release_.Flush();
}

TEST_F(PoolTest, ThePoolsIndexIsChargedToTheNodeCap) {
  common::EngineSpec a = Spec("a");
  MemoryBudget small(1024);
  PoolTable table(PoolOptions{}, &small, &release_);
  auto joined = table.Join(nullptr, a, GeometryOf(a), 0, std::make_shared<int>(1),
                           region_a_.data());
  EXPECT_EQ(joined.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_TRUE(table.List().empty());
  EXPECT_EQ(small.reserved(), 0u);
}

TEST_F(PoolTest, AFullPoolRefusesAnotherMember) {
  PoolOptions two;
  two.max_members = 2;
  PoolTable table(two, &budget_, &release_);
  for (uint32_t i = 0; i < 2; ++i) {
    common::EngineSpec s = Spec("m", i);
    ASSERT_TRUE(table.Join(nullptr, s, GeometryOf(s), 0, std::make_shared<int>(1),
                           region_a_.data())
                    .ok());
  }
  common::EngineSpec third = Spec("m", 2);
  EXPECT_EQ(table.Check(nullptr, third, GeometryOf(third)).code(),
            absl::StatusCode::kResourceExhausted);
}

TEST_F(PoolTest, WorkersOfAllMembersShareOnePageLayout) {
  common::EngineSpec a = Spec("a");
  auto joined = table_.Join(nullptr, a, GeometryOf(a), 0, std::make_shared<int>(1),
                            region_a_.data());
  ASSERT_TRUE(joined.ok());
  EXPECT_TRUE(joined->pool->CheckLayout({2048, 2048}).ok());
  EXPECT_TRUE(joined->pool->CheckLayout({2048, 2048}).ok());
  absl::Status other = joined->pool->CheckLayout({4096});
  EXPECT_EQ(other.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(other.message(), HasSubstr("page layout"));
}

TEST(PoolSpecTest, PoolFieldsAreComparedAndPrinted) {
  common::EngineSpec a = Spec("a"), b = Spec("a");
  EXPECT_TRUE(a == b);
  b.pool = "other";
  EXPECT_FALSE(a == b);
  b = a;
  b.model_identity = "other";
  EXPECT_FALSE(a == b);
  EXPECT_THAT(a.DebugString(), HasSubstr(" pool=qwen model_identity=Qwen/Qwen3-8B@main"));
  EXPECT_THAT(common::EngineSpec().DebugString(), ::testing::EndsWith(" pool= model_identity="));
}

}  // namespace
}  // namespace kvoffload::daemon
