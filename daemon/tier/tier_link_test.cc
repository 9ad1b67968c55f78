// TierLink/TierManager over a SlotIndex and a region in memory: spill on READY, promote on a
// Lookup's miss (byte-exact), the prefix rule, namespaces, failures and the promotion bound —
// against an in-memory store whose completions the test controls, and the real DiskTier.
#include "daemon/tier/tier_link.h"

#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "daemon/index/testing/row_lists.h"
#include "daemon/tier/aligned_buffer.h"
#include "daemon/tier/block_io_factory.h"
#include "daemon/tier/disk_tier.h"
#include "daemon/tier/testing/fault_block_io.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace kvoffload::daemon {
namespace {

using ::testing::ElementsAre;
using KeyState = SlotIndex::KeyState;
using Keys = std::vector<std::string>;
constexpr KeyState kMiss = KeyState::kMiss;
constexpr KeyState kHit = KeyState::kHit;
constexpr KeyState kPending = KeyState::kHitPending;
constexpr uint64_t kRowBytes = 8192;

// A RecordStore in memory. Completions run on its own thread, in order; `hold_reads` keeps read
// completions back until Release(); `corrupt_reads` makes every read DATA_LOSS.
class MemoryStore : public tier::RecordStore {
 public:
  MemoryStore() : thread_([this] { Run(); }) {}
  ~MemoryStore() override {
    Release();
    {
      absl::MutexLock lock(&mu_);
      stop_ = true;
    }
    thread_.join();
  }
  absl::string_view tier_name() const override { return "memory"; }
  uint64_t max_record_bytes() const override { return kRowBytes; }
  absl::Status Write(uint64_t ns, absl::string_view key, const void* payload, uint64_t bytes,
                     WriteDone done) override {
    std::string value(static_cast<const char*>(payload), bytes);
    absl::MutexLock lock(&mu_);
    if (refuse_writes) return absl::ResourceExhaustedError("full");
    auto run = [this, ns, key = std::string(key), value = std::move(value),
                done = std::move(done)]() mutable {
      {
        absl::MutexLock lock(&mu_);
        records_[{ns, key}] = value;
        ++writes;
      }
      done(absl::OkStatus());
    };
    if (hold_writes) {
      held_.push_back(std::move(run));
    } else {
      queue_.push_back(std::move(run));
    }
    return absl::OkStatus();
  }
  absl::Status Read(uint64_t ns, absl::string_view key, void* dst, uint64_t capacity,
                    ReadDone done) override {
    absl::MutexLock lock(&mu_);
    auto it = records_.find({ns, std::string(key)});
    if (it == records_.end()) return absl::NotFoundError("no record");
    std::string value = it->second;
    auto run = [this, dst, capacity, value = std::move(value), done = std::move(done)]() {
      bool corrupt;
      {
        absl::MutexLock lock(&mu_);
        corrupt = corrupt_reads;
      }
      if (corrupt) {
        std::memset(dst, 0xEE, capacity);  // a failed read may leave garbage behind
        done(absl::DataLossError("checksum mismatch"));
        return;
      }
      std::memcpy(dst, value.data(), value.size());
      done(value.size());
    };
    if (hold_reads) {
      held_.push_back(std::move(run));
    } else {
      queue_.push_back(std::move(run));
    }
    return absl::OkStatus();
  }
  std::vector<bool> ContainsAll(uint64_t ns, const std::vector<std::string>& keys) override {
    absl::MutexLock lock(&mu_);
    ++contains_calls_;
    mu_.Await(absl::Condition(+[](bool* hold) { return !*hold; }, &hold_contains));
    std::vector<bool> out;
    for (const std::string& k : keys) out.push_back(records_.count({ns, k}) != 0);
    return out;
  }
  absl::Status DropNamespace(uint64_t ns) override {
    absl::MutexLock lock(&mu_);
    for (auto it = records_.begin(); it != records_.end();) {
      it = it->first.first == ns ? records_.erase(it) : std::next(it);
    }
    return absl::OkStatus();
  }
  tier::RecordStoreStats record_stats() const override {
    absl::MutexLock lock(&mu_);
    tier::RecordStoreStats s;
    s.records = records_.size();
    s.writes_ok = writes;
    return s;
  }
  void Release() {
    absl::MutexLock lock(&mu_);
    hold_reads = hold_writes = hold_contains = false;
    for (auto& f : held_) queue_.push_back(std::move(f));
    held_.clear();
  }
  void Set(bool* flag, bool value) {
    absl::MutexLock lock(&mu_);
    *flag = value;
  }
  size_t records() const {
    absl::MutexLock lock(&mu_);
    return records_.size();
  }
  std::string record(uint64_t ns, const std::string& key) const {
    absl::MutexLock lock(&mu_);
    auto it = records_.find({ns, key});
    return it == records_.end() ? "" : it->second;
  }
  uint64_t contains_calls() const {
    absl::MutexLock lock(&mu_);
    return contains_calls_;
  }
  // Waits until ContainsAll has been called `n` times (the last call may be held).
  void AwaitContainsCalls(uint64_t n) const {
    using Calls = std::pair<const uint64_t*, uint64_t>;
    Calls calls(&contains_calls_, n);
    absl::MutexLock lock(&mu_);
    mu_.Await(absl::Condition(+[](Calls* c) { return *c->first >= c->second; }, &calls));
  }

  bool hold_reads = false;     // guarded by mu_ (Set)
  bool corrupt_reads = false;  // guarded by mu_ (Set)
  bool refuse_writes = false;  // guarded by mu_ (Set)
  bool hold_writes = false;    // guarded by mu_ (Set): write completions wait for Release()
  bool hold_contains = false;  // guarded by mu_ (Set): ContainsAll waits for Release()
  uint64_t writes = 0;

 private:
  void Run() {
    for (;;) {
      std::function<void()> f;
      {
        absl::MutexLock lock(&mu_);
        mu_.Await(absl::Condition(
            +[](MemoryStore* s) { return s->stop_ || !s->queue_.empty(); }, this));
        if (queue_.empty()) return;
        f = std::move(queue_.front());
        queue_.pop_front();
      }
      f();
    }
  }
  mutable absl::Mutex mu_;
  std::map<std::pair<uint64_t, std::string>, std::string> records_;
  std::deque<std::function<void()>> queue_;
  std::vector<std::function<void()>> held_;
  uint64_t contains_calls_ = 0;
  bool stop_ = false;
  std::thread thread_;
};

// One engine's worth: an index over a region in memory, linked to the manager's store.
struct Node {
  Node(std::shared_ptr<TierManager> manager, uint64_t rows, uint64_t ns)
      : region(rows * kRowBytes), owner(std::make_shared<int>(0)) {
    index = std::move(SlotIndex::Create(rows)).value();
    TierTarget target;
    target.index = index.get();
    target.row_bytes = kRowBytes;
    target.namespace_id = ns;
    target.label = "test";
    std::weak_ptr<int> weak = owner;
    target.lock_owner = [weak]() -> std::shared_ptr<void> { return weak.lock(); };
    target.row_memory = [this](uint64_t row, std::shared_ptr<void>*) {
      return region.data() + row * kRowBytes;
    };
    link = manager->Link(std::move(target));
  }
  // Stores `key` with bytes `fill` as an engine would: PrepareStore, the copy, the commit.
  void Store(const std::string& key, uint8_t fill) {
    absl::StatusOr<SlotIndex::PrepareStoreResult> p = index->PrepareStore({key});
    ASSERT_TRUE(p.ok()) << p.status();
    ASSERT_EQ(p->rows.size(), 1u);
    std::memset(region.data() + p->rows[0] * kRowBytes, fill, kRowBytes);
    ASSERT_TRUE(BeginCopy(*index, CopyDirection::kStore, p->rows).ok());
    ASSERT_TRUE(EndStoreCopy(*index, p->rows, true).ok());
    ASSERT_TRUE(index->CompleteStore({key}, true).ok());
  }
  std::vector<KeyState> Lookup(const Keys& keys) {
    std::vector<KeyState> states = index->Lookup(keys);
    link->Promote(keys, 0, &states);
    return states;
  }
  // The bytes of a READY key's row, read as a load would.
  std::string Load(const std::string& key) {
    absl::StatusOr<std::vector<uint64_t>> rows = index->PrepareLoad({key});
    EXPECT_TRUE(rows.ok()) << rows.status();
    if (!rows.ok()) return "";
    std::string bytes(reinterpret_cast<const char*>(region.data() + (*rows)[0] * kRowBytes),
                      kRowBytes);
    EXPECT_TRUE(index->CompleteLoad({key}).ok());
    return bytes;
  }

  tier::AlignedBuffer region;
  std::shared_ptr<int> owner;
  std::unique_ptr<SlotIndex> index;
  std::shared_ptr<TierLink> link;
};

std::vector<std::unique_ptr<tier::RecordStore>> One(std::unique_ptr<tier::RecordStore> store) {
  std::vector<std::unique_ptr<tier::RecordStore>> stores;
  stores.push_back(std::move(store));
  return stores;
}

// Two stores in memory, fastest first (as disk and cluster).
std::vector<std::unique_ptr<tier::RecordStore>> Two(MemoryStore** fast, MemoryStore** slow) {
  std::vector<std::unique_ptr<tier::RecordStore>> stores;
  for (MemoryStore** store : {fast, slow}) {
    auto s = std::make_unique<MemoryStore>();
    *store = s.get();
    stores.push_back(std::move(s));
  }
  return stores;
}

class TierLinkTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto store = std::make_unique<MemoryStore>();
    store_ = store.get();
    TierOptions options;
    options.promote_timeout = absl::Milliseconds(50);
    manager_ = TierManager::Create(One(std::move(store)), &release_, options);
  }
  void TearDown() override { manager_->Shutdown(); }
  void Idle() { ASSERT_TRUE(manager_->WaitIdle(absl::Seconds(10))); }
  TierCounters Links() const { return manager_->stats()[0].links; }

  DeferredRelease release_;
  MemoryStore* store_ = nullptr;
  std::shared_ptr<TierManager> manager_;
};

std::string Bytes(uint8_t fill) { return std::string(kRowBytes, static_cast<char>(fill)); }

TEST_F(TierLinkTest, ReadyRowsAreSpilledAndAnEvictedPrefixIsPromotedByteExact) {
  Node node(manager_, 4, /*ns=*/7);
  node.Store("a", 0xA1);
  node.Store("b", 0xB2);
  Idle();
  EXPECT_EQ(store_->records(), 2u);
  EXPECT_EQ(Links().spills_ok, 2u);
  EXPECT_EQ(Links().spill_bytes, 2 * kRowBytes);
  // Four more keys evict a and b from the region.
  for (int i = 0; i < 4; ++i) node.Store("x" + std::to_string(i), static_cast<uint8_t>(i));
  Idle();
  EXPECT_THAT(node.index->Lookup({"a", "b"}), ElementsAre(kMiss, kMiss));
  // The Lookup finds them in the tier: pending, then READY with their own bytes.
  EXPECT_THAT(node.Lookup({"a", "b"}), ElementsAre(kPending, kPending));
  Idle();
  EXPECT_THAT(node.Lookup({"a", "b"}), ElementsAre(kHit, kHit));
  EXPECT_EQ(node.Load("a"), Bytes(0xA1));
  EXPECT_EQ(node.Load("b"), Bytes(0xB2));
  const TierCounters s = Links();
  EXPECT_EQ(s.lookup_tier_hits, 2u);
  EXPECT_EQ(s.promotions_ok, 2u);
  EXPECT_EQ(s.promotion_bytes, 2 * kRowBytes);
  EXPECT_EQ(s.promotions_failed, 0u);
  // A promoted row is READY like any: it is not written to the tier again.
  EXPECT_EQ(s.spills_ok, 6u);
  EXPECT_GE(s.spills_already_held, 2u);
}

TEST_F(TierLinkTest, OnlyThePrefixUpToTheFirstKeyHeldNowhereIsPromoted) {
  Node node(manager_, 8, 7);
  node.Store("a", 1);
  node.Store("c", 3);
  Idle();
  ASSERT_EQ(node.index->Reset(), 2u);  // the region forgets both; the tier keeps them
  EXPECT_THAT(node.Lookup({"a", "b", "c"}), ElementsAre(kPending, kMiss, kMiss));
  Idle();
  EXPECT_THAT(node.index->Lookup({"a", "b", "c"}), ElementsAre(kHit, kMiss, kMiss));
}

TEST_F(TierLinkTest, APromotionNeverEvictsTheHitsOfItsOwnLookup) {
  Node node(manager_, 4, 7);
  for (int i = 0; i < 4; ++i) node.Store("p" + std::to_string(i), static_cast<uint8_t>(i + 1));
  Idle();
  node.Store("o0", 0xF0);  // evicts p0, then p1: the prefix's head stays, its tail goes ...
  node.Store("o1", 0xF1);
  Idle();
  ASSERT_THAT(node.index->Lookup({"p0", "p1", "p2", "p3"}),
              ElementsAre(kMiss, kMiss, kHit, kHit));
  // ... here the other way round: the head p0, p1 left; the tail p2, p3 is the oldest data.
  // Promoting the head must evict o0 and o1, never p2 or p3, which the lookup calls hits.
  EXPECT_THAT(node.Lookup({"p0", "p1", "p2", "p3"}), ElementsAre(kPending, kPending, kHit, kHit));
  EXPECT_EQ(node.Load("p2"), Bytes(3));
  EXPECT_EQ(node.Load("p3"), Bytes(4));
  Idle();
  EXPECT_THAT(node.index->Lookup({"p0", "p1", "p2", "p3", "o0", "o1"}),
              ElementsAre(kHit, kHit, kHit, kHit, kMiss, kMiss));
  EXPECT_EQ(node.Load("p0"), Bytes(1));
  EXPECT_EQ(node.Load("p1"), Bytes(2));
}

TEST_F(TierLinkTest, AnotherNamespaceNeverSeesTheRecords) {
  Node mine(manager_, 4, 1);
  Node theirs(manager_, 4, 2);
  mine.Store("k", 9);
  Idle();
  EXPECT_THAT(theirs.Lookup({"k"}), ElementsAre(kMiss));
  Idle();
  EXPECT_THAT(theirs.index->Lookup({"k"}), ElementsAre(kMiss));
  EXPECT_EQ(Links().promotions_started, 0u);
}

TEST_F(TierLinkTest, ACorruptRecordIsAMissAndItsRowIsFreed) {
  Node node(manager_, 4, 7);
  node.Store("a", 1);
  Idle();
  ASSERT_EQ(node.index->Reset(), 1u);
  store_->Set(&store_->corrupt_reads, true);
  EXPECT_THAT(node.Lookup({"a"}), ElementsAre(kPending));
  Idle();
  EXPECT_THAT(node.index->Lookup({"a"}), ElementsAre(kMiss));
  EXPECT_EQ(node.index->counts().rows_free, 4u);
  EXPECT_EQ(Links().promotions_failed, 1u);
  EXPECT_EQ(Links().promotions_ok, 0u);
}

TEST_F(TierLinkTest, APromotionPastItsBoundLooksUpAsAMissAndStillLands) {
  Node node(manager_, 4, 7);
  node.Store("a", 0x5A);
  Idle();
  ASSERT_EQ(node.index->Reset(), 1u);
  store_->Set(&store_->hold_reads, true);
  EXPECT_THAT(node.Lookup({"a"}), ElementsAre(kPending));
  EXPECT_THAT(node.Lookup({"a"}), ElementsAre(kPending));  // within the bound
  absl::SleepFor(absl::Milliseconds(60));                  // past promote_timeout (50 ms)
  EXPECT_THAT(node.Lookup({"a"}), ElementsAre(kMiss));
  EXPECT_EQ(Links().promotions_timed_out, 1u);
  // The engine's own store of the key is skipped (the key is there) ...
  absl::StatusOr<SlotIndex::PrepareStoreResult> p = node.index->PrepareStore({"a"});
  ASSERT_TRUE(p.ok());
  EXPECT_TRUE(p->keys.empty());
  // ... and the promotion lands.
  store_->Release();
  Idle();
  EXPECT_THAT(node.Lookup({"a"}), ElementsAre(kHit));
  EXPECT_EQ(node.Load("a"), Bytes(0x5A));
}

TEST_F(TierLinkTest, NothingHappensForAnOwnerThatIsGone) {
  Node node(manager_, 4, 7);
  node.Store("a", 1);
  Idle();
  ASSERT_EQ(node.index->Reset(), 1u);
  node.owner.reset();
  release_.Flush();  // the spill's reference to the owner, handed over when it ended
  EXPECT_THAT(node.Lookup({"a"}), ElementsAre(kMiss));
  node.Store("b", 2);
  Idle();
  EXPECT_EQ(store_->records(), 1u);
  EXPECT_EQ(Links().spills_gone, 1u);
}

TEST_F(TierLinkTest, ARefusedSpillIsCountedAndTheRowStaysEvictable) {
  Node node(manager_, 1, 7);
  store_->Set(&store_->refuse_writes, true);
  node.Store("a", 1);
  Idle();
  EXPECT_EQ(Links().spills_failed, 1u);
  EXPECT_EQ(node.index->counts().rows_evictable, 1u);
  EXPECT_EQ(node.index->counts().copies_in_flight, 0u);
}

TEST_F(TierLinkTest, DropRecordsForgetsTheNamespace) {
  Node node(manager_, 4, 7);
  Node other(manager_, 4, 8);
  node.Store("a", 1);
  other.Store("a", 2);
  Idle();
  ASSERT_TRUE(node.link->DropRecords().ok());
  ASSERT_EQ(node.index->Reset(), 1u);
  ASSERT_EQ(other.index->Reset(), 1u);
  EXPECT_THAT(node.Lookup({"a"}), ElementsAre(kMiss));
  EXPECT_THAT(other.Lookup({"a"}), ElementsAre(kPending));
  Idle();
  EXPECT_EQ(other.Load("a"), Bytes(2));
}

// Two tiers (a fast one and a slow one, as disk and cluster): a READY row is written to both; a
// miss is read from the first that holds it; each tier counts its own.
TEST(TierLinkTwoTiersTest, SpillsToEveryTierAndPromotesFromTheFirstThatHolds) {
  DeferredRelease release;
  MemoryStore* fast_store = nullptr;
  MemoryStore* slow_store = nullptr;
  std::vector<std::unique_ptr<tier::RecordStore>> stores = Two(&fast_store, &slow_store);
  auto manager = TierManager::Create(std::move(stores), &release, TierOptions{});
  Node node(manager, 4, 7);
  node.Store("a", 0x11);
  node.Store("b", 0x22);
  ASSERT_TRUE(manager->WaitIdle(absl::Seconds(10)));
  EXPECT_EQ(fast_store->records(), 2u);
  EXPECT_EQ(slow_store->records(), 2u);
  ASSERT_TRUE(fast_store->DropNamespace(7).ok());  // e.g. evicted from the disk
  ASSERT_EQ(node.index->Reset(), 2u);
  EXPECT_THAT(node.Lookup({"a", "b"}), ElementsAre(kPending, kPending));
  ASSERT_TRUE(manager->WaitIdle(absl::Seconds(10)));
  EXPECT_EQ(node.Load("a"), Bytes(0x11));
  EXPECT_EQ(node.Load("b"), Bytes(0x22));
  // The promoted rows are READY again: the fast tier gets them back, the slow one has them.
  ASSERT_TRUE(manager->WaitIdle(absl::Seconds(10)));
  EXPECT_EQ(fast_store->records(), 2u);
  const std::vector<TierManager::TierLine> lines = manager->stats();
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(lines[0].name, "memory");
  EXPECT_EQ(lines[0].links.spills_ok, 4u);
  EXPECT_EQ(lines[1].links.spills_ok, 2u);
  EXPECT_EQ(lines[1].links.spills_already_held, 2u);
  EXPECT_EQ(lines[0].links.promotions_ok, 0u);
  EXPECT_EQ(lines[1].links.promotions_ok, 2u);
  EXPECT_EQ(lines[0].links.lookup_tier_hits, 0u);
  EXPECT_EQ(lines[1].links.lookup_tier_hits, 2u);
  manager->Shutdown();
}

// The spill thread takes a link's queue in batches and asks each tier once per batch, not once
// per key (one round trip per batch to a remote tier); every row still lands, byte-exact, in the
// tiers that lack it, and a key a tier holds already is counted and not written again.
TEST(TierLinkBatchTest, EachTierIsAskedOncePerBatchOfQueuedKeys) {
  DeferredRelease release;
  MemoryStore* fast_store = nullptr;
  MemoryStore* slow_store = nullptr;
  std::vector<std::unique_ptr<tier::RecordStore>> stores = Two(&fast_store, &slow_store);
  TierOptions options;
  options.max_spills_in_flight = 64;  // the batch, not the slots, bounds the calls here
  options.max_spill_batch = 8;
  auto manager = TierManager::Create(std::move(stores), &release, options);
  Node node(manager, 128, 7);  // a quarter of it (the most spills pin) holds every key here
  // The slow tier holds two of the keys already.
  for (const char* key : {"k3", "k5"}) {
    const std::string bytes = Bytes(0xCC);
    ASSERT_TRUE(slow_store->Write(7, key, bytes.data(), kRowBytes, [](absl::Status) {}).ok());
  }
  while (slow_store->records() < 2) absl::SleepFor(absl::Milliseconds(1));
  // The spill thread is held in its first ContainsAll (k0's) while 16 more keys are queued.
  fast_store->Set(&fast_store->hold_contains, true);
  node.Store("k0", 0);
  fast_store->AwaitContainsCalls(1);
  constexpr int kQueued = 16;
  for (int i = 1; i <= kQueued; ++i) node.Store("k" + std::to_string(i), static_cast<uint8_t>(i));
  fast_store->Release();
  ASSERT_TRUE(manager->WaitIdle(absl::Seconds(10)));
  // k0 alone, then the 16 queued keys in batches of 8 (one key at a time: 17 calls per tier).
  const uint64_t most = 1 + (kQueued + options.max_spill_batch - 1) / options.max_spill_batch;
  EXPECT_LE(fast_store->contains_calls(), most);
  EXPECT_LE(slow_store->contains_calls(), most);
  EXPECT_EQ(fast_store->records(), kQueued + 1u);
  EXPECT_EQ(slow_store->records(), kQueued + 1u);
  for (int i = 0; i <= kQueued; ++i) {
    const std::string key = "k" + std::to_string(i);
    const std::string want = Bytes(static_cast<uint8_t>(i));
    EXPECT_EQ(fast_store->record(7, key), want) << key;
    if (key != "k3" && key != "k5") {
      EXPECT_EQ(slow_store->record(7, key), want) << key;
    }
  }
  const std::vector<TierManager::TierLine> lines = manager->stats();
  EXPECT_EQ(lines[0].links.spills_ok, kQueued + 1u);
  EXPECT_EQ(lines[0].links.spills_already_held, 0u);
  EXPECT_EQ(lines[1].links.spills_ok, kQueued - 1u);
  EXPECT_EQ(lines[1].links.spills_already_held, 2u);
  EXPECT_EQ(lines[0].links.spills_gone + lines[1].links.spills_gone, 0u);
  EXPECT_EQ(node.index->counts().copies_in_flight, 0u);
  manager->Shutdown();
}

// A batch is no larger than the free spill slots: at most max_spills_in_flight rows are pinned
// while writes are slow; rows reset while their keys wait are counted gone, once each.
TEST(TierLinkBatchTest, BatchesNeverPinMoreThanTheSlotsAndRowsGoneMeanwhileAreCounted) {
  DeferredRelease release;
  auto store = std::make_unique<MemoryStore>();
  MemoryStore* memory = store.get();
  TierOptions options;
  options.max_spills_in_flight = 3;
  options.max_spill_batch = 8;
  auto manager = TierManager::Create(One(std::move(store)), &release, options);
  Node node(manager, 16, 7);
  memory->Set(&memory->hold_writes, true);
  memory->Set(&memory->hold_contains, true);
  node.Store("k0", 0);
  memory->AwaitContainsCalls(1);
  for (int i = 1; i <= 9; ++i) node.Store("k" + std::to_string(i), static_cast<uint8_t>(i));
  memory->Set(&memory->hold_contains, false);
  // k0, then k1 and k2 (the two free slots); the writes are held, so the thread waits there.
  auto depth = [&] { return node.link->stats()[0].spill_queue_depth; };
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (depth() > 7 && absl::Now() < deadline) absl::SleepFor(absl::Milliseconds(1));
  ASSERT_EQ(depth(), 7u);
  absl::SleepFor(absl::Milliseconds(20));
  EXPECT_EQ(depth(), 7u);
  EXPECT_EQ(node.index->counts().copies_in_flight, 3u);
  EXPECT_EQ(memory->contains_calls(), 2u);
  // The waiting keys' rows go (the pinned three stay); their spills find nothing to write.
  EXPECT_EQ(node.index->Reset(), 7u);
  memory->Release();
  ASSERT_TRUE(manager->WaitIdle(absl::Seconds(10)));
  const TierCounters c = manager->stats()[0].links;
  EXPECT_EQ(c.spills_ok, 3u);
  EXPECT_EQ(c.spills_gone, 7u);
  EXPECT_EQ(c.spills_already_held, 0u);
  EXPECT_EQ(memory->records(), 3u);
  EXPECT_EQ(memory->record(7, "k2"), Bytes(2));
  EXPECT_EQ(node.index->counts().copies_in_flight, 0u);
  manager->Shutdown();
}

// Spills pin at most a quarter of an index's rows, whatever the node's spill slots: a small
// region keeps room for its own stores while writes are slow (8 rows: 2 pinned, not 6).
TEST(TierLinkBatchTest, SpillsLeaveASmallIndexRoomForItsStores) {
  DeferredRelease release;
  auto store = std::make_unique<MemoryStore>();
  MemoryStore* memory = store.get();
  TierOptions options;
  options.max_spills_in_flight = 8;
  auto manager = TierManager::Create(One(std::move(store)), &release, options);
  Node node(manager, 8, 7);
  memory->Set(&memory->hold_writes, true);
  for (int i = 0; i < 6; ++i) node.Store("k" + std::to_string(i), static_cast<uint8_t>(i));
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (memory->contains_calls() < 1 && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(1));
  }
  absl::SleepFor(absl::Milliseconds(50));  // room for a thread that would pin more
  EXPECT_EQ(node.index->counts().copies_in_flight, 2u);
  EXPECT_EQ(node.link->stats()[0].spill_queue_depth, 4u);
  // Six new keys: the two free rows and four READY rows that no spill holds.
  absl::StatusOr<SlotIndex::PrepareStoreResult> p =
      node.index->PrepareStore({"n0", "n1", "n2", "n3", "n4", "n5"});
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->rows.size(), 6u);
  memory->Release();
  ASSERT_TRUE(manager->WaitIdle(absl::Seconds(10)));
  const TierCounters c = manager->stats()[0].links;
  EXPECT_EQ(c.spills_ok, 2u);
  EXPECT_EQ(c.spills_gone, 4u);  // evicted for the new keys before their turn
  EXPECT_EQ(memory->record(7, "k0"), Bytes(0));
  EXPECT_EQ(memory->record(7, "k1"), Bytes(1));
  EXPECT_EQ(node.index->counts().copies_in_flight, 0u);
  manager->Shutdown();
}

// Keys that waited for room are spilled once the pinned rows' writes end: the end of the last
// write wakes the spill thread, which may have gone idle meanwhile.
TEST(TierLinkBatchTest, KeysWaitingForRoomAreSpilledWhenItFrees) {
  DeferredRelease release;
  auto store = std::make_unique<MemoryStore>();
  MemoryStore* memory = store.get();
  auto manager = TierManager::Create(One(std::move(store)), &release, TierOptions{});
  Node node(manager, 8, 7);
  memory->Set(&memory->hold_writes, true);
  for (int i = 0; i < 6; ++i) node.Store("k" + std::to_string(i), static_cast<uint8_t>(i));
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (node.index->counts().copies_in_flight < 2 && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(1));
  }
  absl::SleepFor(absl::Milliseconds(50));  // the spill thread finds no room and idles
  memory->Release();
  ASSERT_TRUE(manager->WaitIdle(absl::Seconds(10)));
  for (int i = 0; i < 6; ++i) {
    const std::string key = "k" + std::to_string(i);
    EXPECT_EQ(memory->record(7, key), Bytes(static_cast<uint8_t>(i))) << key;
  }
  EXPECT_EQ(manager->stats()[0].links.spills_ok, 6u);
  EXPECT_EQ(node.link->stats()[0].spill_queue_depth, 0u);
  manager->Shutdown();
}

// The same path over the real disk tier: spilled rows survive the daemon (a new manager over the
// same files) and come back byte-exact.
TEST(TierLinkDiskTest, RowsSpilledToDiskArePromotedAfterARestart) {
  const std::string dir = ::testing::TempDir() + "/tier_link_disk";
  ASSERT_EQ(system(("rm -rf " + dir + " && mkdir -p " + dir).c_str()), 0);
  tier::DiskTierOptions options;
  options.paths = {dir};
  options.max_payload_bytes = kRowBytes;
  options.capacity_bytes = 64 * (kRowBytes + 4096);
  DeferredRelease release;
  {
    auto io = tier::MakeBlockIo(options.queue_depth);
    ASSERT_TRUE(io.ok()) << io.status();
    auto disk = tier::DiskTier::Open(options, std::move(*io));
    ASSERT_TRUE(disk.ok()) << disk.status();
    auto manager = TierManager::Create(One(std::move(*disk)), &release, TierOptions{});
    Node node(manager, 4, 42);
    for (int i = 0; i < 4; ++i) node.Store("k" + std::to_string(i), static_cast<uint8_t>(i + 1));
    ASSERT_TRUE(manager->WaitIdle(absl::Seconds(10)));
    EXPECT_EQ(manager->stats()[0].store.records, 4u);
    manager->Shutdown();
  }
  auto io = tier::MakeBlockIo(options.queue_depth);
  ASSERT_TRUE(io.ok());
  auto disk = tier::DiskTier::Open(options, std::move(*io));
  ASSERT_TRUE(disk.ok()) << disk.status();
  auto manager = TierManager::Create(One(std::move(*disk)), &release, TierOptions{});
  Node node(manager, 4, 42);  // a new region: empty
  const Keys keys = {"k0", "k1", "k2", "k3"};
  EXPECT_THAT(node.Lookup(keys), ElementsAre(kPending, kPending, kPending, kPending));
  ASSERT_TRUE(manager->WaitIdle(absl::Seconds(10)));
  EXPECT_THAT(node.Lookup(keys), ElementsAre(kHit, kHit, kHit, kHit));
  for (int i = 0; i < 4; ++i) EXPECT_EQ(node.Load(keys[i]), Bytes(static_cast<uint8_t>(i + 1)));
  manager->Shutdown();
}

// Faults of the device under the link (the disk tier over FaultBlockIo): a spill that meets EIO
// or a torn write leaves nothing readable and the row evictable; a promotion that meets EIO, or a
// record torn on the device, frees its row and is a miss — never a row with wrong bytes.
TEST(TierLinkDiskFaultTest, DeviceFaultsAreMissesAndNeverWrongBytes) {
  const std::string dir = ::testing::TempDir() + "/tier_link_faults";
  ASSERT_EQ(system(("rm -rf " + dir + " && mkdir -p " + dir).c_str()), 0);
  tier::DiskTierOptions options;
  options.paths = {dir};
  options.max_payload_bytes = kRowBytes;
  options.capacity_bytes = 64 * (kRowBytes + 4096);
  auto base = tier::MakeBlockIo(options.queue_depth, tier::BlockIoKind::kPosix);
  ASSERT_TRUE(base.ok()) << base.status();
  auto fault_io = std::make_unique<tier::testing::FaultBlockIo>(std::move(*base));
  tier::testing::FaultBlockIo* faults = fault_io.get();
  auto disk = tier::DiskTier::Open(options, std::move(fault_io));
  ASSERT_TRUE(disk.ok()) << disk.status();
  DeferredRelease release;
  auto manager = TierManager::Create(One(std::move(*disk)), &release, TierOptions{});
  Node node(manager, 4, 9);
  auto idle = [&] { ASSERT_TRUE(manager->WaitIdle(absl::Seconds(10))); };

  faults->FailWrites(EIO, 1);
  node.Store("eio", 1);
  idle();
  faults->TearWrites(4096 + 100, 1);  // the header and a sliver of the payload, then EIO
  node.Store("torn", 2);
  idle();
  node.Store("good", 3);
  idle();
  TierCounters c = manager->stats()[0].links;
  EXPECT_EQ(c.spills_failed, 2u);
  EXPECT_EQ(c.spills_ok, 1u);
  EXPECT_EQ(node.index->counts().copies_in_flight, 0u);
  EXPECT_EQ(node.index->counts().rows_evictable, 3u);
  ASSERT_EQ(node.index->Reset(), 3u);
  // Only the good record is there; the failed ones are misses.
  EXPECT_THAT(node.Lookup({"eio"}), ElementsAre(kMiss));
  EXPECT_THAT(node.Lookup({"torn"}), ElementsAre(kMiss));
  // A read that fails is a miss and frees its row.
  faults->FailReads(EIO, 1);
  EXPECT_THAT(node.Lookup({"good"}), ElementsAre(kPending));
  idle();
  EXPECT_THAT(node.index->Lookup({"good"}), ElementsAre(kMiss));
  EXPECT_EQ(node.index->counts().rows_free, 4u);
  EXPECT_EQ(manager->stats()[0].links.promotions_failed, 1u);
  // The record is still there: the next lookup promotes it, byte-exact.
  EXPECT_THAT(node.Lookup({"good"}), ElementsAre(kPending));
  idle();
  EXPECT_EQ(node.Load("good"), Bytes(3));
  manager->Shutdown();
}

}  // namespace
}  // namespace kvoffload::daemon
