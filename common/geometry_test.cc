// Tests for ComputeGeometry, SlotOf, IsStoreWriter, the replicated-MLA gate and layout
// fingerprints, on the cases of seeds 000 and 001 (exact numbers, no rounding surprises).
#include "common/geometry.h"

#include <string>

#include "absl/status/status.h"
#include "common/engine_spec.h"
#include "gtest/gtest.h"

namespace kvoffload::common {
namespace {

constexpr uint64_t kKiB = uint64_t{1} << 10;
constexpr uint64_t kMiB = uint64_t{1} << 20;
constexpr uint64_t kGiB = uint64_t{1} << 30;

// Llama-like MHA TP8: 32 layers of 16 KiB pages per worker and block (512 KiB per block).
EngineSpec Tp8Mha() {
  EngineSpec spec;
  spec.engine_id = "llama";
  spec.world_size = 8;
  spec.tp = 8;
  spec.num_layers = 32;
  spec.page_bytes = 16 * kKiB;
  spec.budget_bytes = 8 * kGiB;
  return spec;
}

// DeepSeek-like MLA TP8 on one node: 61 layers of 18432-byte latent pages.
EngineSpec DeepSeekTp8() {
  EngineSpec spec;
  spec.engine_id = "deepseek";
  spec.world_size = 8;
  spec.tp = 8;
  spec.attention = Attention::kMla;
  spec.num_layers = 61;
  spec.page_bytes = 18432;
  spec.budget_bytes = 64 * kGiB;
  return spec;
}

// One worker, one layer: row size follows page_bytes directly.
EngineSpec SingleWorker(uint64_t page_bytes, uint64_t budget_bytes) {
  EngineSpec spec;
  spec.page_bytes = page_bytes;
  spec.budget_bytes = budget_bytes;
  return spec;
}

Geometry MustCompute(const EngineSpec& spec) {
  absl::StatusOr<Geometry> g = ComputeGeometry(spec);
  EXPECT_TRUE(g.ok()) << g.status();
  return g.ok() ? *g : Geometry();
}

uint32_t MustSlot(const EngineSpec& spec, const Geometry& g, uint32_t mp_rank) {
  absl::StatusOr<uint32_t> slot = SlotOf(spec, g, mp_rank);
  EXPECT_TRUE(slot.ok()) << slot.status();
  return slot.ok() ? *slot : ~0u;
}

// --- Seed 000: node-local sizing -------------------------------------------------------------

TEST(GeometryTest, Tp8OverTwoNodesSizesFourCopiesPerRow) {
  EngineSpec spec = Tp8Mha();
  spec.local_world_size = 4;
  Geometry g = MustCompute(spec);
  EXPECT_FALSE(g.replicated);
  EXPECT_EQ(g.local_world_size, 4u);
  EXPECT_EQ(g.num_copies, 4u);
  EXPECT_EQ(g.worker_bytes_per_block, 512 * kKiB);
  EXPECT_EQ(g.slot_bytes, 512 * kKiB);
  EXPECT_EQ(g.row_bytes, 2 * kMiB);
  EXPECT_EQ(g.num_rows, 4096u);  // the whole budget is this node's
  EXPECT_EQ(g.capacity_bytes, 8 * kGiB);
}

TEST(GeometryTest, Tp8OverTwoNodesHoldsTwiceTheRowsOfGlobalSizing) {
  EngineSpec local = Tp8Mha();
  local.local_world_size = 4;
  EngineSpec single_node = Tp8Mha();  // all eight on one node: eight copies per row
  Geometry g4 = MustCompute(local);
  Geometry g8 = MustCompute(single_node);
  EXPECT_EQ(g8.num_copies, 8u);
  EXPECT_EQ(g8.row_bytes, 4 * kMiB);
  EXPECT_EQ(g8.num_rows, 2048u);
  EXPECT_EQ(g4.num_rows, 2 * g8.num_rows);
}

TEST(GeometryTest, SecondNodeRanksFourToSevenTakeSlotsZeroToThree) {
  EngineSpec spec = Tp8Mha();
  spec.local_world_size = 4;
  Geometry g = MustCompute(spec);
  for (uint32_t rank = 0; rank < 8; ++rank) {
    EXPECT_EQ(MustSlot(spec, g, rank), rank % 4) << rank;
    EXPECT_TRUE(IsStoreWriter(g, rank)) << rank;
  }
  EXPECT_EQ(MustSlot(spec, g, 4), 0u);
  EXPECT_EQ(MustSlot(spec, g, 5), 1u);
  EXPECT_EQ(MustSlot(spec, g, 7), 3u);
}

TEST(GeometryTest, WorkersOnDevicesZeroAndTwoTakeSlotsZeroAndOne) {
  // TP2 on CUDA devices 0 and 2: the slot comes from mp_rank (0, 1), never the device.
  EngineSpec spec = Tp8Mha();
  spec.world_size = 2;
  spec.tp = 2;
  Geometry g = MustCompute(spec);
  EXPECT_EQ(g.num_copies, 2u);
  EXPECT_EQ(MustSlot(spec, g, 0), 0u);
  EXPECT_EQ(MustSlot(spec, g, 1), 1u);
}

TEST(GeometryTest, SecondNodeTp4RanksTwoAndThreeTakeSlotsZeroAndOne) {
  EngineSpec spec = Tp8Mha();
  spec.world_size = 4;
  spec.tp = 4;
  spec.local_world_size = 2;
  Geometry g = MustCompute(spec);
  EXPECT_EQ(g.num_copies, 2u);
  EXPECT_EQ(MustSlot(spec, g, 2), 0u);
  EXPECT_EQ(MustSlot(spec, g, 3), 1u);
}

TEST(GeometryTest, DpReplicasGetSeparateRegionsWithTheFullBudgetEach) {
  EngineSpec replica0;
  replica0.engine_id = "qwen";
  replica0.world_size = 2;
  replica0.tp = 2;
  replica0.num_layers = 28;
  replica0.page_bytes = 16 * kKiB;
  replica0.budget_bytes = 4 * kGiB;
  EngineSpec replica1 = replica0;
  replica1.dp_rank = 1;

  EXPECT_EQ(replica0.Key(), "qwen/0");
  EXPECT_EQ(replica1.Key(), "qwen/1");
  Geometry g0 = MustCompute(replica0);
  Geometry g1 = MustCompute(replica1);
  EXPECT_EQ(g0.num_copies, 2u);
  EXPECT_EQ(g0.row_bytes, 917504u);
  EXPECT_EQ(g0.num_rows, 4681u);
  EXPECT_EQ(g0.capacity_bytes, 4294836224u);
  EXPECT_EQ(g0.DebugString(), g1.DebugString());
  EXPECT_EQ(g0.Fingerprint(), g1.Fingerprint());
}

TEST(GeometryTest, MpRankOutsideWorldRejected) {
  EngineSpec spec = Tp8Mha();
  Geometry g = MustCompute(spec);
  absl::StatusOr<uint32_t> slot = SlotOf(spec, g, 8);
  EXPECT_EQ(slot.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(slot.status().message(),
            "rule mp_rank_in_world: mp_rank 8 must be less than world_size 8");
  EXPECT_EQ(MustSlot(spec, g, 7), 7u);
}

// --- No hidden rounding ----------------------------------------------------------------------

TEST(GeometryTest, NoPowerOfTwoRoundingOfTheBudget) {
  // 80 GiB with 20 KiB rows (not a power of two) is exactly 80 GiB, not 128 GiB.
  Geometry g = MustCompute(SingleWorker(20 * kKiB, 80 * kGiB));
  EXPECT_EQ(g.row_bytes, 20480u);
  EXPECT_EQ(g.num_rows, 4194304u);
  EXPECT_EQ(g.capacity_bytes, 80 * kGiB);

  Geometry g2 = MustCompute(SingleWorker(2 * kMiB, 80 * kGiB));
  EXPECT_EQ(g2.num_rows, 40960u);
  EXPECT_EQ(g2.capacity_bytes, 80 * kGiB);
}

TEST(GeometryTest, RowRoundsUpToTheNextPageOnly) {
  EXPECT_EQ(MustCompute(SingleWorker(3 * 4096 + 1, kGiB)).row_bytes, 4 * 4096u);
  EXPECT_EQ(MustCompute(SingleWorker(5 * 4096 + 1, kGiB)).row_bytes, 6 * 4096u);
  EXPECT_EQ(MustCompute(SingleWorker(4096, kGiB)).row_bytes, 4096u);
  EXPECT_EQ(MustCompute(SingleWorker(1, kGiB)).row_bytes, 4096u);
}

TEST(GeometryTest, RowRoundsCopiesTogetherNotEachSlot) {
  EngineSpec spec = SingleWorker(1000, kGiB);
  spec.world_size = 4;
  spec.tp = 4;
  spec.blocks_per_row = 3;
  Geometry g = MustCompute(spec);
  EXPECT_EQ(g.slot_bytes, 3000u);
  EXPECT_EQ(g.row_bytes, 12288u);  // round_up(4 x 3000) = 12288, not 4 x 4096
  EXPECT_EQ(g.SlotOffset(2, 3), 2 * 12288u + 3 * 3000u);
}

TEST(GeometryTest, ExplicitWorkerBytesPerBlockIsUsed) {
  EngineSpec spec = SingleWorker(4096, kGiB);
  spec.worker_bytes_per_block = 3 * 4096;
  spec.blocks_per_row = 2;
  Geometry g = MustCompute(spec);
  EXPECT_EQ(g.worker_bytes_per_block, 3 * 4096u);
  EXPECT_EQ(g.slot_bytes, 6 * 4096u);
  EXPECT_EQ(g.row_bytes, 6 * 4096u);
}

TEST(GeometryTest, BudgetTooSmallForOneRow) {
  EngineSpec spec = Tp8Mha();  // rows of 4 MiB
  spec.budget_bytes = 4 * kMiB - 1;
  absl::StatusOr<Geometry> g = ComputeGeometry(spec);
  EXPECT_EQ(g.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(g.status().message(),
            "rule budget_holds_a_row: budget_bytes 4194303 holds no row of 4194304 bytes "
            "(8 copies x 524288 slot bytes, rounded up to 4096)");
  spec.budget_bytes = 4 * kMiB;
  EXPECT_EQ(MustCompute(spec).num_rows, 1u);
}

TEST(GeometryTest, SlotBytesOverflowRejected) {
  EngineSpec spec = SingleWorker(4096, kGiB);
  spec.worker_bytes_per_block = uint64_t{1} << 62;
  spec.blocks_per_row = 4;
  absl::StatusOr<Geometry> g = ComputeGeometry(spec);
  EXPECT_EQ(g.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(g.status().message(),
            "rule sizes_fit_in_64_bits: blocks_per_row 4 x worker_bytes_per_block "
            "4611686018427387904 overflows 64 bits");
}

TEST(GeometryTest, RowBytesOverflowRejected) {
  EngineSpec spec = SingleWorker(4096, kGiB);
  spec.world_size = 8;
  spec.tp = 8;
  spec.worker_bytes_per_block = uint64_t{1} << 62;
  absl::StatusOr<Geometry> g = ComputeGeometry(spec);
  EXPECT_EQ(g.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(g.status().message(),
            "rule sizes_fit_in_64_bits: num_copies 8 x slot_bytes 4611686018427387904 "
            "overflows 64 bits");

  // Rounding up to 4096 must not wrap either.
  spec = SingleWorker(4096, kGiB);
  spec.worker_bytes_per_block = ~uint64_t{0} - 100;
  EXPECT_EQ(ComputeGeometry(spec).status().code(), absl::StatusCode::kInvalidArgument);
}

// --- Seed 001: replicated MLA layout ---------------------------------------------------------

TEST(ReplicatedLayoutTest, DeepSeekTp8StoresOneCopy) {
  EngineSpec spec = DeepSeekTp8();
  std::string why_not = "stale";
  EXPECT_TRUE(ReplicatedLayoutEligible(spec, &why_not));
  EXPECT_EQ(why_not, "");

  Geometry g = MustCompute(spec);
  EXPECT_TRUE(g.replicated);
  EXPECT_EQ(g.num_copies, 1u);
  EXPECT_EQ(g.local_world_size, 8u);
  EXPECT_EQ(g.worker_bytes_per_block, 1124352u);  // 18432 x 61
  EXPECT_EQ(g.row_bytes, 1126400u);
  EXPECT_EQ(g.num_rows, 61008u);
  EXPECT_EQ(g.capacity_bytes, 68719411200u);

  // The same bytes per rank without the gate: eight copies per row.
  spec.attention = Attention::kMha;
  Geometry per_rank = MustCompute(spec);
  EXPECT_FALSE(per_rank.replicated);
  EXPECT_EQ(per_rank.num_copies, 8u);
  EXPECT_EQ(per_rank.row_bytes, 8994816u);
  EXPECT_EQ(per_rank.num_rows, 7639u);
}

TEST(ReplicatedLayoutTest, CapacityIsTpTimesPerRankWhenSlotsAreAligned) {
  EngineSpec spec = DeepSeekTp8();
  spec.blocks_per_row = 8;  // 8 x 1124352 is a multiple of 4096
  spec.budget_bytes = 71958528000;
  Geometry replicated = MustCompute(spec);
  spec.num_kv_groups = 2;
  Geometry per_rank = MustCompute(spec);
  EXPECT_EQ(replicated.row_bytes, 8994816u);
  EXPECT_EQ(per_rank.row_bytes, 71958528u);
  EXPECT_EQ(replicated.num_rows, 8000u);
  EXPECT_EQ(per_rank.num_rows, 1000u);
  EXPECT_EQ(replicated.capacity_bytes, per_rank.capacity_bytes);
}

TEST(ReplicatedLayoutTest, EveryWorkerUsesSlotZeroAndOnlyRankZeroWrites) {
  EngineSpec spec = DeepSeekTp8();
  Geometry g = MustCompute(spec);
  for (uint32_t rank = 0; rank < 8; ++rank) {
    EXPECT_EQ(MustSlot(spec, g, rank), 0u) << rank;
    EXPECT_EQ(IsStoreWriter(g, rank), rank == 0) << rank;
  }
  EXPECT_EQ(SlotOf(spec, g, 8).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(ReplicatedLayoutTest, ExplicitMatchingWorkerBytesStillEligible) {
  EngineSpec spec = DeepSeekTp8();
  spec.worker_bytes_per_block = 18432 * 61;
  EXPECT_TRUE(ReplicatedLayoutEligible(spec));
}

// One test per clause of the gate: each fails closed to the per-rank layout.
void ExpectPerRank(const EngineSpec& spec, const std::string& why, bool valid_topology = true) {
  std::string why_not;
  EXPECT_FALSE(ReplicatedLayoutEligible(spec, &why_not));
  EXPECT_EQ(why_not, why);
  EXPECT_FALSE(ReplicatedLayoutEligible(spec));  // why_not is optional
  if (!valid_topology) return;
  absl::StatusOr<Geometry> g = ComputeGeometry(spec);
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_FALSE(g->replicated);
  EXPECT_EQ(g->num_copies, g->local_world_size);
}

TEST(ReplicatedGateTest, MhaFailsClosed) {
  EngineSpec spec = DeepSeekTp8();
  spec.attention = Attention::kMha;
  ExpectPerRank(spec, "single bare MLA group: attention=mha num_kv_groups=1");
}

TEST(ReplicatedGateTest, SeveralKvGroupsFailClosed) {
  EngineSpec spec = DeepSeekTp8();
  spec.num_kv_groups = 2;
  ExpectPerRank(spec, "single bare MLA group: attention=mla num_kv_groups=2");
}

TEST(ReplicatedGateTest, MismatchedWorkerBytesFailClosed) {
  EngineSpec spec = DeepSeekTp8();
  spec.worker_bytes_per_block = 2 * 18432 * 61;
  ExpectPerRank(spec,
                "worker_bytes_per_block == page_bytes * num_layers: "
                "worker_bytes_per_block=2248704 page_bytes=18432 num_layers=61");
}

TEST(ReplicatedGateTest, Tp1FailsClosed) {
  EngineSpec spec = DeepSeekTp8();
  spec.world_size = 1;
  spec.tp = 1;
  ExpectPerRank(spec, "tp > 1: tp=1");
}

TEST(ReplicatedGateTest, DcpFailsClosed) {
  EngineSpec spec = DeepSeekTp8();
  spec.dcp = 2;
  ExpectPerRank(spec, "pp == pcp == dcp == 1: pp=1 pcp=1 dcp=2");
}

TEST(ReplicatedGateTest, PpAndPcpFailClosed) {
  // These topologies are rejected by ValidateTopology; the gate alone still says no.
  EngineSpec spec = DeepSeekTp8();
  spec.world_size = 16;
  spec.pp = 2;
  ExpectPerRank(spec, "pp == pcp == dcp == 1: pp=2 pcp=1 dcp=1", /*valid_topology=*/false);
  spec.pp = 1;
  spec.pcp = 2;
  ExpectPerRank(spec, "pp == pcp == dcp == 1: pp=1 pcp=2 dcp=1", /*valid_topology=*/false);
}

TEST(ReplicatedGateTest, WorldLargerThanTpFailsClosed) {
  EngineSpec spec = DeepSeekTp8();
  spec.world_size = 16;
  ExpectPerRank(spec, "world_size == tp: world_size=16 tp=8");
}

TEST(ReplicatedGateTest, ReplicaSpanningNodesFailsClosed) {
  EngineSpec spec = DeepSeekTp8();
  spec.local_world_size = 4;
  ExpectPerRank(spec, "node-local replica: local_world_size=4 world_size=8");
}

TEST(ReplicatedGateTest, UndeclaredLauncherTopologyFailsClosed) {
  EngineSpec spec = DeepSeekTp8();
  spec.executor = Executor::kRay;
  ExpectPerRank(spec, "node-local replica: local_world_size=0 world_size=8",
                /*valid_topology=*/false);
  spec.local_world_size = 8;  // declared node-local: eligible
  EXPECT_TRUE(ReplicatedLayoutEligible(spec));
  EXPECT_TRUE(MustCompute(spec).replicated);
}

// --- Layout identity -------------------------------------------------------------------------

TEST(FingerprintTest, SameRowSizeDifferentLayoutsDiffer) {
  EngineSpec two_blocks = SingleWorker(24 * kKiB, kGiB);
  two_blocks.blocks_per_row = 2;
  EngineSpec four_blocks = SingleWorker(12 * kKiB, kGiB);
  four_blocks.blocks_per_row = 4;
  Geometry a = MustCompute(two_blocks);
  Geometry b = MustCompute(four_blocks);
  EXPECT_EQ(a.row_bytes, 48 * kKiB);
  EXPECT_EQ(a.row_bytes, b.row_bytes);
  EXPECT_EQ(a.capacity_bytes, b.capacity_bytes);
  EXPECT_NE(a.Fingerprint(), b.Fingerprint());
  EXPECT_EQ(a.Fingerprint(),
            "replicated=0 copies=1 blocks_per_row=2 worker_bytes_per_block=24576 "
            "row_bytes=49152 pages=[]");
  EXPECT_EQ(b.Fingerprint(),
            "replicated=0 copies=1 blocks_per_row=4 worker_bytes_per_block=12288 "
            "row_bytes=49152 pages=[]");
}

TEST(FingerprintTest, PageListIsPartOfTheIdentity) {
  Geometry g = MustCompute(SingleWorker(24 * kKiB, kGiB));
  EXPECT_EQ(LayoutFingerprint(g, {12288, 12288}),
            "replicated=0 copies=1 blocks_per_row=1 worker_bytes_per_block=24576 "
            "row_bytes=24576 pages=[12288,12288]");
  EXPECT_NE(LayoutFingerprint(g, {24576}), LayoutFingerprint(g, {12288, 12288}));
  EXPECT_EQ(LayoutFingerprint(g, {}), g.Fingerprint());
}

TEST(FingerprintTest, ReplicatedAndPerRankWithSameRowDiffer) {
  Geometry replicated;
  replicated.replicated = true;
  replicated.num_copies = 1;
  replicated.blocks_per_row = 2;
  replicated.worker_bytes_per_block = 8192;
  replicated.row_bytes = 16384;
  Geometry per_rank = replicated;
  per_rank.replicated = false;
  per_rank.num_copies = 2;
  per_rank.blocks_per_row = 1;
  EXPECT_NE(replicated.Fingerprint(), per_rank.Fingerprint());
}

TEST(GeometryTest, DebugStringNamesEveryField) {
  EngineSpec spec = Tp8Mha();
  spec.local_world_size = 4;
  EXPECT_EQ(MustCompute(spec).DebugString(),
            "replicated=0 num_copies=4 local_world_size=4 blocks_per_row=1 "
            "worker_bytes_per_block=524288 slot_bytes=524288 row_bytes=2097152 num_rows=4096 "
            "capacity_bytes=8589934592");
}

}  // namespace
}  // namespace kvoffload::common
