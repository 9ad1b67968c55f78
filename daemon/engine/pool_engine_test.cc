// Pools through the registry and real engines (pools), host backend: a key one
// member stored is a byte-exact load for another, across segments; states hold across members;
// a member killed mid-store or dropped keeps the rows the others use; isolation (a non-member,
// another uid, another model identity, another pool, a private engine) with exact statuses.
#include <unistd.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "daemon/copy/testing/fault_copy_backend.h"
#include "daemon/copy/testing/shm_memory.h"
#include "daemon/engine/registry.h"
#include "daemon/engine/testing/engine_test_env.h"
#include "daemon/index/testing/slot_index_invariants.h"
#include "daemon/restart/durability.h"
#include "daemon/restart/fd_store.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace kvoffload::daemon {
namespace {

using ::testing::ElementsAre;
using testing::EngineTestEnv;
using ::testing::HasSubstr;
using testing::kLayers;
using testing::kNumRows;
using testing::kPageBytes;
using testing::kWorkerBlocks;
using testing::PerRankSpec;
using testing::RecordingListener;
using KS = SlotIndex::KeyState;
using Fault = FaultCopyBackend::Fault;

constexpr char kModel[] = "Qwen/Qwen3-8B rev=main dtype=bf16 kv=bf16 block=16";

common::EngineSpec Member(const std::string& engine_id, const std::string& pool = "qwen") {
  common::EngineSpec spec = PerRankSpec(1, engine_id);
  spec.pool = pool;
  spec.model_identity = kModel;
  return spec;
}

Caller Uid(uint32_t uid) { return Caller{getpid(), uid, 100, {}}; }

std::vector<std::string> Keys(int first, int count) {
  std::vector<std::string> keys;
  for (int i = first; i < first + count; ++i) keys.push_back("block-hash-" + std::to_string(i));
  return keys;
}

// One engine of the pool with one worker.
struct Replica {
  std::shared_ptr<Engine> engine;
  std::unique_ptr<ShmWorkerMemory> memory;
  RecordingListener listener;
  uint64_t session = 0;
  uint64_t next_job = 1;
};

class PoolEngineTest : public ::testing::Test {
 protected:
  PoolEngineTest() {
    RegistryOptions options;
    options.idle_engine_ttl = absl::ZeroDuration();
    options.pools.max_members = 4;
    options.pools.member_floor = 0;
    registry_ = std::make_unique<EngineRegistry>(env_.deps(), options);
  }
  ~PoolEngineTest() override {
    env_.Settle();
    replicas_.clear();
    registry_.reset();
  }

  Replica& Open(const common::EngineSpec& spec, uint64_t seed) {
    auto replica = std::make_unique<Replica>();
    const Caller me = Uid(geteuid());
    auto opened = registry_->Open(spec, 0, &me);
    EXPECT_TRUE(opened.ok()) << opened.status();
    replica->engine = opened->engine;
    auto memory = ShmWorkerMemory::Create(kLayers, kWorkerBlocks, kPageBytes, seed);
    EXPECT_TRUE(memory.ok());
    replica->memory = *std::move(memory);
    auto opened_memory = env_.backend().OpenWorker(replica->memory->Registration());
    EXPECT_TRUE(opened_memory.ok()) << opened_memory.status();
    auto info = replica->engine->Attach(0, replica->memory->Registration(),
                                        *std::move(opened_memory), &replica->listener);
    EXPECT_TRUE(info.ok()) << info.status();
    replica->session = info->session_id;
    replicas_.push_back(std::move(replica));
    return *replicas_.back();
  }

  // Submits one job of `gpu_blocks` ↔ row handles; returns its id.
  static uint64_t Submit(Replica& r, CopyDirection direction, std::vector<uint64_t> gpu_blocks,
                         std::vector<uint64_t> handles) {
    JobPart part;
    part.job_id = r.next_job++;
    part.direction = direction;
    part.gpu_blocks = std::move(gpu_blocks);
    part.rows = std::move(handles);
    absl::Status submitted = r.engine->Submit(r.session, part);
    EXPECT_TRUE(submitted.ok()) << submitted;
    return part.job_id;
  }
  static absl::Status Wait(Replica& r, uint64_t job) {
    for (int i = 0; i < 10000; ++i) {
      std::vector<JobResult> results = r.listener.ResultsFor(job);
      if (!results.empty()) return results[0].status;
      absl::SleepFor(absl::Milliseconds(1));
    }
    return absl::DeadlineExceededError("no verdict");
  }
  static std::vector<uint64_t> Blocks(uint64_t first, size_t n) {
    std::vector<uint64_t> blocks(n);
    for (size_t i = 0; i < n; ++i) blocks[i] = first + i;
    return blocks;
  }
  static std::vector<uint64_t> Handles(const std::vector<uint64_t>& rows,
                                       const std::vector<uint32_t>& tickets) {
    std::vector<uint64_t> handles;
    for (size_t i = 0; i < rows.size(); ++i) {
      handles.push_back(StoreHandle(tickets[i], rows[i]));
    }
    return handles;
  }
  // Stores `keys` from GPU blocks [first_block, ...) of `r` to READY.
  static std::vector<uint64_t> Store(Replica& r, const std::vector<std::string>& keys,
                                     uint64_t first_block) {
    SlotIndex& index = r.engine->index();
    auto store = index.PrepareStore(keys, r.engine->index_member());
    EXPECT_TRUE(store.ok()) << store.status();
    const std::vector<uint32_t> tickets(store->rows.size(), store->ticket);
    const uint64_t job = Submit(r, CopyDirection::kStore, Blocks(first_block, keys.size()),
                                Handles(store->rows, tickets));
    EXPECT_TRUE(Wait(r, job).ok());
    EXPECT_TRUE(index.CompleteStore(store->keys, true).ok());
    return store->rows;
  }
  // Loads `keys` into GPU blocks [first_block, ...) of `r`; the job's status.
  static absl::Status Load(Replica& r, const std::vector<std::string>& keys, uint64_t first_block) {
    SlotIndex& index = r.engine->index();
    std::vector<uint32_t> tickets;
    auto rows = index.PrepareLoad(keys, &tickets, r.engine->index_member());
    if (!rows.ok()) return rows.status();
    const uint64_t job =
        Submit(r, CopyDirection::kLoad, Blocks(first_block, keys.size()), Handles(*rows, tickets));
    absl::Status status = Wait(r, job);
    EXPECT_TRUE(index.CompleteLoad(keys).ok());
    return status;
  }

  // The last member goes: the pool, its index and everything charged for them are released.
  void DropLastMember(Replica& r, const std::string& engine_id) {
    r.engine->Detach(r.session);
    ASSERT_TRUE(registry_->Drop(engine_id, 0, /*force=*/true).ok());
    r.engine.reset();
    registry_->Maintain(absl::Now());
    ASSERT_TRUE(env_.Settle());
    EXPECT_TRUE(registry_->ListPools().empty());
    EXPECT_EQ(env_.budget().reserved(), 0u);
  }

  EngineTestEnv env_{256 << 20};
  std::unique_ptr<EngineRegistry> registry_;
  std::vector<std::unique_ptr<Replica>> replicas_;
};

TEST_F(PoolEngineTest, AKeyOneMemberStoredLoadsByteExactIntoAnotherAcrossSegments) {
  Replica& a = Open(Member("a"), 1);
  Replica& b = Open(Member("b"), 2);
  ASSERT_EQ(a.engine->pool(), b.engine->pool());
  ASSERT_NE(a.engine->index_member(), b.engine->index_member());
  EXPECT_EQ(&a.engine->index(), &b.engine->index());
  // More rows than one member's budget: the store spans both segments (two copies, one vote).
  const int n = static_cast<int>(kNumRows) + 4;
  const std::vector<uint64_t> rows = Store(a, Keys(0, n), 0);
  std::vector<bool> segments(2, false);
  for (uint64_t row : rows) segments[row / kNumRows] = true;
  EXPECT_THAT(segments, ElementsAre(true, true));
  EXPECT_THAT(b.engine->index().Lookup(Keys(0, 1), b.engine->index_member()),
              ElementsAre(KS::kHit));
  ASSERT_TRUE(Load(b, Keys(0, n), 5).ok());
  for (int i = 0; i < n; ++i) {
    ASSERT_EQ(b.memory->Block(5 + i), a.memory->Block(i)) << "key " << i;
  }
  const SlotIndex::MemberCounts counts =
      b.engine->index().segments().member_counts(b.engine->index_member());
  EXPECT_EQ(counts.cross_member_hits, 1u);
  EXPECT_EQ(counts.cross_member_loads, static_cast<uint64_t>(n));
  EXPECT_EQ(a.engine->Snapshot().store_bytes, n * testing::kBytesPerBlock);
  EXPECT_EQ(b.engine->Snapshot().load_bytes, n * testing::kBytesPerBlock);
}

TEST_F(PoolEngineTest, ARowBeingWrittenByOneMemberIsNotLoadableByAnother) {
  Replica& a = Open(Member("a"), 1);
  Replica& b = Open(Member("b"), 2);
  SlotIndex& index = a.engine->index();
  env_.backend().AddRule({.fault = Fault::kHold});
  auto store = index.PrepareStore(Keys(0, 1), a.engine->index_member());
  ASSERT_TRUE(store.ok());
  const uint64_t job = Submit(a, CopyDirection::kStore, {0}, Handles(store->rows, {store->ticket}));
  ASSERT_TRUE(env_.backend().WaitForHeld(1, absl::Seconds(10)));
  ASSERT_TRUE(index.CompleteStore(store->keys, true).ok());  // committed before written
  EXPECT_THAT(index.Lookup(Keys(0, 1), b.engine->index_member()), ElementsAre(KS::kHitPending));
  EXPECT_EQ(Load(b, Keys(0, 1), 0).code(), absl::StatusCode::kFailedPrecondition);
  // B's concurrent store of the same key gets nothing to store.
  auto again = index.PrepareStore(Keys(0, 1), b.engine->index_member());
  ASSERT_TRUE(again.ok());
  EXPECT_TRUE(again->keys.empty());
  env_.backend().ReleaseAllHeld();
  ASSERT_TRUE(Wait(a, job).ok());
  ASSERT_TRUE(Load(b, Keys(0, 1), 7).ok());
  EXPECT_EQ(b.memory->Block(7), a.memory->Block(0));
}

TEST_F(PoolEngineTest, AMemberKilledMidStoreFailsOnlyItsRowsWhileAnotherLoads) {
  Replica& a = Open(Member("a"), 1);
  Replica& b = Open(Member("b"), 2);
  SlotIndex& index = a.engine->index();
  Store(a, Keys(0, 4), 0);  // READY rows B will load
  env_.backend().AddRule({.fault = Fault::kHold, .direction = CopyDirection::kStore});
  auto store = index.PrepareStore(Keys(10, 2), a.engine->index_member());
  ASSERT_TRUE(store.ok());
  const std::vector<uint32_t> tickets(2, store->ticket);
  Submit(a, CopyDirection::kStore, {4, 5}, Handles(store->rows, tickets));
  ASSERT_TRUE(env_.backend().WaitForHeld(1, absl::Seconds(10)));
  ASSERT_TRUE(index.CompleteStore(store->keys, true).ok());
  // B loads while A's store is in flight; then A's worker dies (its job fails UNAVAILABLE; the
  // session is gone, so nobody hears it) and the copy ends.
  ASSERT_TRUE(Load(b, Keys(0, 4), 10).ok());
  a.engine->Detach(a.session);
  ASSERT_TRUE(env_.Settle());
  EXPECT_EQ(a.engine->Snapshot().jobs_failed, 1u);
  // A's half-written keys never read as hits for anyone; the rest serve B byte-exact.
  EXPECT_THAT(index.Lookup(Keys(10, 2), b.engine->index_member()),
              ElementsAre(KS::kMiss, KS::kMiss));
  for (int i = 0; i < 4; ++i) EXPECT_EQ(b.memory->Block(10 + i), a.memory->Block(i));
  ASSERT_TRUE(Load(b, Keys(0, 4), 20).ok());
  ASSERT_TRUE(CheckSlotIndexInvariants(index).ok()) << CheckSlotIndexInvariants(index);
}

TEST_F(PoolEngineTest, ADroppedMemberKeepsTheRowsOthersReadThenItsMemoryGoes) {
  Replica& a = Open(Member("a"), 1);
  Replica& b = Open(Member("b"), 2);
  const uint64_t with_both = env_.budget().reserved();
  // A stores into B's segment first (handed out first), then into its own.
  const std::vector<uint64_t> rows = Store(a, Keys(0, static_cast<int>(kNumRows) + 2), 0);
  SlotIndex& index = b.engine->index();
  const uint32_t a_segment = a.engine->index_member();
  // B pins two rows of A's segment, then A is dropped by its operator.
  std::vector<std::string> in_a;
  std::vector<uint64_t> a_blocks;
  for (size_t i = 0; i < rows.size(); ++i) {
    if (rows[i] / kNumRows == a_segment) {
      in_a.push_back(Keys(static_cast<int>(i), 1)[0]);
      a_blocks.push_back(i);
    }
  }
  ASSERT_EQ(in_a.size(), 2u);
  std::vector<uint32_t> tickets;
  auto pinned = index.PrepareLoad(in_a, &tickets, b.engine->index_member());
  ASSERT_TRUE(pinned.ok());
  a.engine->Detach(a.session);
  ASSERT_TRUE(registry_->Drop("a", 0, /*force=*/true).ok());
  a.engine.reset();  // the test's reference
  registry_->Maintain(absl::Now());
  EXPECT_EQ(env_.budget().reserved(), with_both);  // A's region stays while B reads it
  // The rows of B's segment that A stored stay hits; A's idle rows went with A.
  EXPECT_THAT(index.Lookup(Keys(0, 1), b.engine->index_member()), ElementsAre(KS::kHit));
  const uint64_t job = Submit(b, CopyDirection::kLoad, {30, 31}, Handles(*pinned, tickets));
  ASSERT_TRUE(Wait(b, job).ok());
  EXPECT_EQ(b.memory->Block(30), a.memory->Block(a_blocks[0]));
  EXPECT_EQ(b.memory->Block(31), a.memory->Block(a_blocks[1]));
  ASSERT_TRUE(index.CompleteLoad(in_a).ok());
  EXPECT_THAT(index.Lookup(in_a, b.engine->index_member()), ElementsAre(KS::kMiss, KS::kMiss));
  registry_->Maintain(absl::Now());
  ASSERT_TRUE(env_.Settle());
  EXPECT_EQ(env_.budget().reserved(), with_both - testing::ReservedFor(Member("a")));
  ASSERT_EQ(registry_->ListPools().size(), 1u);
  EXPECT_EQ(registry_->ListPools()[0]->Snapshot().members.size(), 1u);
  DropLastMember(b, "b");
}

// A member that leaves with work unfinished — stores prepared and never completed, a store job
// in flight, keys pinned by PrepareLoad and never completed — leaks nothing: its writing keys
// end as CompleteStore(false) would (misses for the others, storable again), its pins are
// dropped, its segment drains, and with the last member the pool, its memory and its name go.
class PoolLeaveTest : public PoolEngineTest {
 protected:
  // What A leaves behind, for every way of leaving: 2 prepared keys never submitted, 2
  // submitted and held in the copy backend (uncommitted), 2 of B's keys pinned.
  void LeaveWorkUnfinished(Replica& a, Replica& b) {
    SlotIndex& index = a.engine->index();
    Store(b, Keys(100, 4), 0);
    auto idle = index.PrepareStore(Keys(0, 2), a.engine->index_member());
    ASSERT_TRUE(idle.ok());
    env_.backend().AddRule({.fault = Fault::kHold, .direction = CopyDirection::kStore});
    auto copying = index.PrepareStore(Keys(2, 2), a.engine->index_member());
    ASSERT_TRUE(copying.ok());
    Submit(a, CopyDirection::kStore, {4, 5},
           Handles(copying->rows, std::vector<uint32_t>(2, copying->ticket)));
    ASSERT_TRUE(env_.backend().WaitForHeld(1, absl::Seconds(10)));
    auto pinned = index.PrepareLoad(Keys(100, 2), nullptr, a.engine->index_member());
    ASSERT_TRUE(pinned.ok());
    EXPECT_THAT(index.Lookup(Keys(0, 4), b.engine->index_member()),
                ElementsAre(KS::kHitPending, KS::kHitPending, KS::kHitPending, KS::kHitPending));
  }
  // After A left: the held copy ends, A's keys are misses and storable by B, B's pinned keys
  // are evictable again, and A's segment drained.
  void ExpectNothingLeft(Replica& b, uint64_t reserved_with_b_only) {
    SlotIndex& index = b.engine->index();
    EXPECT_THAT(index.Lookup(Keys(0, 4), b.engine->index_member()),
                ElementsAre(KS::kMiss, KS::kMiss, KS::kMiss, KS::kMiss));
    env_.backend().ReleaseAllHeld();
    ASSERT_TRUE(env_.Settle());
    registry_->Maintain(absl::Now());
    ASSERT_TRUE(env_.Settle());
    EXPECT_EQ(index.counts().rows_writing, 0u);
    EXPECT_EQ(index.counts().rows_reading, 0u);
    EXPECT_EQ(index.counts().rows_quarantined, 0u);
    EXPECT_EQ(index.counts().copies_in_flight, 0u);
    ASSERT_EQ(registry_->ListPools().size(), 1u);
    EXPECT_EQ(registry_->ListPools()[0]->Snapshot().members.size(), 1u);  // A drained
    EXPECT_EQ(env_.budget().reserved(), reserved_with_b_only);
    auto again = index.PrepareStore(Keys(0, 4), b.engine->index_member());
    ASSERT_TRUE(again.ok()) << again.status();
    EXPECT_EQ(again->keys.size(), 4u);
    ASSERT_TRUE(index.CompleteStore(again->keys, false).ok());
    ASSERT_TRUE(CheckSlotIndexInvariants(index).ok()) << CheckSlotIndexInvariants(index);
    DropLastMember(b, "b");  // the pool's name goes with it too
    common::EngineSpec other = Member("c");
    other.model_identity = "another model";
    auto reused = registry_->Open(other);
    EXPECT_TRUE(reused.ok()) << reused.status();
  }
};

TEST_F(PoolLeaveTest, DroppedWithStoresPreparedCopiesInFlightAndPins) {
  Replica& a = Open(Member("a"), 1);
  Replica& b = Open(Member("b"), 2);
  const uint64_t with_both = env_.budget().reserved();
  LeaveWorkUnfinished(a, b);
  a.engine->Detach(a.session);
  ASSERT_TRUE(registry_->Drop("a", 0, /*force=*/true).ok());
  a.engine.reset();
  ExpectNothingLeft(b, with_both - testing::ReservedFor(Member("a")));
}

// The member's processes are killed instead: nobody drops it; the idle TTL closes it.
TEST_F(PoolLeaveTest, KilledMemberClosedByTheIdleTtl) {
  RegistryOptions options;
  options.idle_engine_ttl = absl::Seconds(30);
  options.pools.max_members = 4;
  options.pools.member_floor = 0;
  registry_ = std::make_unique<EngineRegistry>(env_.deps(), options);
  Replica& a = Open(Member("a"), 1);
  Replica& b = Open(Member("b"), 2);
  const uint64_t with_both = env_.budget().reserved();
  LeaveWorkUnfinished(a, b);
  a.engine->Detach(a.session);  // the worker process died
  a.engine.reset();
  registry_->Maintain(absl::Now() + absl::Seconds(31));
  EXPECT_EQ(registry_->List().size(), 1u);
  ExpectNothingLeft(b, with_both - testing::ReservedFor(Member("a")));
}

TEST_F(PoolEngineTest, NonMembersOtherModelsOtherPoolsAndPrivateEnginesReadNothing) {
  common::EngineSpec creator = Member("a");
  creator.member_uids = {54321};
  const Caller owner = Uid(geteuid());
  auto a = registry_->Open(creator, 0, &owner);
  ASSERT_TRUE(a.ok());
  auto store = a->engine->index().PrepareStore(Keys(0, 1), a->engine->index_member());
  ASSERT_TRUE(store.ok());
  const uint64_t reserved = env_.budget().reserved();
  // Another uid, not listed: PERMISSION_DENIED, nothing allocated, nothing told.
  const Caller stranger = Uid(geteuid() + 12345);
  auto refused = registry_->Open(Member("x"), 0, &stranger);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(std::string(refused.status().message()), ::testing::Not(HasSubstr("Qwen")));
  // Even with a wrong model identity, the stranger hears only PERMISSION_DENIED.
  common::EngineSpec wrong = Member("x");
  wrong.model_identity = "other";
  EXPECT_EQ(registry_->Open(wrong, 0, &stranger).status().code(),
            absl::StatusCode::kPermissionDenied);
  // A listed uid with another model identity: FAILED_PRECONDITION naming the field.
  const Caller listed = Uid(54321);
  auto mismatch = registry_->Open(wrong, 0, &listed);
  EXPECT_EQ(mismatch.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(mismatch.status().message(), HasSubstr("model_identity differs"));
  EXPECT_EQ(env_.budget().reserved(), reserved);
  EXPECT_EQ(registry_->List().size(), 1u);
  // Another pool and a private engine with the same keys see none of them.
  auto other_pool = registry_->Open(Member("y", "other-pool"), 0, &owner);
  ASSERT_TRUE(other_pool.ok());
  auto priv = registry_->Open(PerRankSpec(1, "private"), 0, &owner);
  ASSERT_TRUE(priv.ok());
  EXPECT_NE(&other_pool->engine->index(), &a->engine->index());
  EXPECT_THAT(other_pool->engine->index().Lookup(Keys(0, 1)), ElementsAre(KS::kMiss));
  EXPECT_THAT(priv->engine->index().Lookup(Keys(0, 1)), ElementsAre(KS::kMiss));
  EXPECT_THAT(a->engine->index().Lookup(Keys(0, 1)), ElementsAre(KS::kHitPending));
  // The listed uid with the right identity joins.
  auto joined = registry_->Open(Member("z"), 0, &listed);
  ASSERT_TRUE(joined.ok()) << joined.status();
  EXPECT_EQ(joined->engine->owner_uid(), 54321u);
  EXPECT_EQ(&joined->engine->index(), &a->engine->index());
  ASSERT_TRUE(a->engine->index().CompleteStore(store->keys, false).ok());
}

TEST_F(PoolEngineTest, WorkersOfMembersMustShareAPageLayout) {
  Open(Member("a"), 1);
  auto b = registry_->Open(Member("b"));
  ASSERT_TRUE(b.ok());
  // Same bytes per block split into one tensor of 8 KiB instead of two of 4 KiB.
  auto memory = ShmWorkerMemory::Create(1, kWorkerBlocks, 2 * kPageBytes, 3);
  ASSERT_TRUE(memory.ok());
  auto opened = env_.backend().OpenWorker((*memory)->Registration());
  ASSERT_TRUE(opened.ok());
  RecordingListener listener;
  auto info = b->engine->Attach(0, (*memory)->Registration(), *std::move(opened), &listener);
  EXPECT_EQ(info.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(info.status().message(), HasSubstr("page layout"));
}

TEST(PoolReadinessTest, AMembersRowsComeOnlineAsItsRegionIsPinned) {
  EngineTestEnv env(256 << 20);
  EngineDeps deps = env.deps();
  deps.region_options.ready_chunk_bytes = 4 * testing::kBytesPerBlock;  // 4 rows a chunk
  RegistryOptions options;
  options.idle_engine_ttl = absl::ZeroDuration();
  EngineRegistry registry(deps, options);
  auto a = registry.Open(Member("a"));
  ASSERT_TRUE(a.ok()) << a.status();
  SlotIndex& index = a->engine->index();
  // Never more of the segment online than the member's region has ready.
  const SlotIndex::Counts counts = index.counts();
  EXPECT_LE(counts.rows_online() - counts.rows_not_ready, a->engine->region_ready_rows());
  // The states add up to the rows online (the member's region), not-ready ones included.
  EXPECT_EQ(counts.rows_online(), kNumRows);
  EXPECT_EQ(counts.rows_free + counts.rows_quarantined + counts.rows_writing + counts.rows_ready +
                counts.rows_reading + counts.rows_not_ready,
            kNumRows);
  for (int i = 0; i < 10000 && a->engine->region_ready_rows() < kNumRows; ++i) {
    absl::SleepFor(absl::Milliseconds(1));
  }
  ASSERT_EQ(a->engine->region_ready_rows(), kNumRows);
  registry.Maintain(absl::Now());
  EXPECT_EQ(index.counts().rows_free, kNumRows);
  ASSERT_TRUE(CheckSlotIndexInvariants(index).ok()) << CheckSlotIndexInvariants(index);
  registry.Shutdown(absl::UnavailableError("end"), absl::Seconds(1));
}

// A store that keeps what the registry hands it, as a service manager would across a restart.
class KeepingStore : public FdStore {
 public:
  bool enabled() const override { return true; }
  absl::Status Store(absl::string_view name, int fd) override {
    stored.emplace_back(std::string(name), UniqueFd(dup(fd)));
    return absl::OkStatus();
  }
  absl::Status Remove(absl::string_view name) override {
    for (auto it = stored.begin(); it != stored.end();) {
      it = it->first == name ? stored.erase(it) : it + 1;
    }
    return absl::OkStatus();
  }
  std::string Describe() const override { return "keeping"; }
  std::vector<InheritedFd> Inherit() {
    std::vector<InheritedFd> out;
    for (auto& [name, fd] : stored) out.push_back(InheritedFd{name, UniqueFd(dup(fd.get()))});
    return out;
  }
  std::vector<std::pair<std::string, UniqueFd>> stored;
};

TEST(PoolRestartTest, APoolDoesNotOutliveTheDaemonAndItsMembersAreNeverServedStaleRows) {
  EngineTestEnv env(256 << 20);
  KeepingStore store;
  Durability durability(&store, 64);
  RegistryOptions options;
  options.idle_engine_ttl = absl::ZeroDuration();
  options.durability = &durability;
  uint64_t member_epoch = 0;
  {
    EngineRegistry registry(env.deps(), options);
    auto priv = registry.Open(PerRankSpec(1, "private"));
    ASSERT_TRUE(priv.ok()) << priv.status();
    auto member = registry.Open(Member("a"));
    ASSERT_TRUE(member.ok()) << member.status();
    member_epoch = member->engine->region_epoch();
    auto store_keys = member->engine->index().PrepareStore(Keys(0, 1), 0);
    ASSERT_TRUE(store_keys.ok());
    ASSERT_TRUE(member->engine->index().CompleteStore(store_keys->keys, false).ok());
    // Only the private engine's region and state went to the store.
    ASSERT_EQ(store.stored.size(), 2u);
    for (const auto& [name, fd] : store.stored) {
      EXPECT_THAT(name, ::testing::Not(HasSubstr("a/0"))) << name;
    }
    registry.Shutdown(absl::UnavailableError("restart"), absl::Seconds(1));
  }
  ASSERT_TRUE(env.Settle());
  // The next daemon restores the private engine only; the member's old epoch is refused, and a
  // fresh member starts from an empty pool.
  EngineRegistry registry(env.deps(), options);
  Durability::Collected collected = durability.Collect(store.Inherit());
  ASSERT_EQ(collected.engines.size(), 1u);
  ASSERT_TRUE(registry.Restore(std::move(collected.engines[0])).ok());
  EXPECT_TRUE(registry.Find("private", 0).ok());
  EXPECT_EQ(registry.Find("a", 0).status().code(), absl::StatusCode::kNotFound);
  auto stale = registry.Open(Member("a"), member_epoch);
  EXPECT_EQ(stale.status().code(), absl::StatusCode::kFailedPrecondition);
  auto fresh = registry.Open(Member("a"));
  ASSERT_TRUE(fresh.ok()) << fresh.status();
  EXPECT_NE(fresh->engine->region_epoch(), member_epoch);
  EXPECT_THAT(fresh->engine->index().Lookup(Keys(0, 1)), ElementsAre(KS::kMiss));
  EXPECT_EQ(fresh->engine->index().counts().rows_ready, 0u);
  registry.Shutdown(absl::UnavailableError("end"), absl::Seconds(1));
}

}  // namespace
}  // namespace kvoffload::daemon
