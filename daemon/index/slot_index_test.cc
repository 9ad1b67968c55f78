#include "daemon/index/slot_index.h"

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <list>
#include <map>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "daemon/index/testing/row_lists.h"
#include "daemon/index/testing/slot_index_invariants.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace kvoffload::daemon {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::UnorderedElementsAre;
using Code = absl::StatusCode;
using KeyState = SlotIndex::KeyState;
using Keys = std::vector<std::string>;
using Rows = std::vector<uint64_t>;

constexpr KeyState kMiss = KeyState::kMiss;
constexpr KeyState kHit = KeyState::kHit;
constexpr KeyState kPending = KeyState::kHitPending;

std::unique_ptr<SlotIndex> MakeIndex(uint64_t num_rows) {
  absl::StatusOr<std::unique_ptr<SlotIndex>> index = SlotIndex::Create(num_rows);
  EXPECT_TRUE(index.ok()) << index.status();
  return std::move(index).value();
}

// The row-side counters of an index (not the Lookup counters, which Lookup itself moves).
struct RowCounts {
  uint64_t free, quarantined, writing, ready, reading, evictable, copies, evictions;
  bool operator==(const RowCounts& o) const {
    return free == o.free && quarantined == o.quarantined && writing == o.writing &&
           ready == o.ready && reading == o.reading && evictable == o.evictable &&
           copies == o.copies && evictions == o.evictions;
  }
};

std::ostream& operator<<(std::ostream& os, const RowCounts& c) {
  return os << "{free " << c.free << " quarantined " << c.quarantined << " writing " << c.writing
            << " ready " << c.ready << " reading " << c.reading << " evictable " << c.evictable
            << " copies " << c.copies << " evictions " << c.evictions << "}";
}

RowCounts GetRowCounts(const SlotIndex& index) {
  SlotIndex::Counts c = index.counts();
  return {c.rows_free,    c.rows_quarantined, c.rows_writing,     c.rows_ready,
          c.rows_reading, c.rows_evictable,   c.copies_in_flight, c.evictions};
}

// What a rejected call must leave untouched: row counters and the state of every key.
struct Snapshot {
  RowCounts counts;
  std::vector<KeyState> states;
  bool operator==(const Snapshot& o) const { return counts == o.counts && states == o.states; }
};

Snapshot Take(SlotIndex& index, const Keys& keys) {
  Snapshot s{GetRowCounts(index), index.Lookup(keys)};
  EXPECT_TRUE(CheckSlotIndexInvariants(index).ok()) << CheckSlotIndexInvariants(index);
  return s;
}

// What the job engine does for a store job that succeeded on `rows`: a copy, then its end.
void Write(SlotIndex& index, const Rows& rows) {
  EXPECT_TRUE(BeginCopy(index, CopyDirection::kStore, rows).ok());
  EXPECT_TRUE(EndStoreCopy(index, rows, true).ok());
}

// Stores `keys` (PrepareStore, a store job, CompleteStore(true)); returns their rows.
Rows Store(SlotIndex& index, const Keys& keys) {
  absl::StatusOr<SlotIndex::PrepareStoreResult> prepared = index.PrepareStore(keys);
  EXPECT_TRUE(prepared.ok()) << prepared.status();
  if (!prepared.ok()) return {};
  Write(index, prepared->rows);
  EXPECT_TRUE(index.CompleteStore(prepared->keys, true).ok());
  return prepared->rows;
}

// Keys evicted by storing one new key, `fresh`.
Keys EvictedByStoring(SlotIndex& index, const std::string& fresh) {
  absl::StatusOr<SlotIndex::PrepareStoreResult> prepared = index.PrepareStore({fresh});
  EXPECT_TRUE(prepared.ok()) << prepared.status();
  if (!prepared.ok()) return {};
  Write(index, prepared->rows);
  EXPECT_TRUE(index.CompleteStore({fresh}, true).ok());
  return prepared->evicted_keys;
}

// ---- Creation --------------------------------------------------------------------------------

// The usage example at the top of slot_index.h, as it is written there (keep the two equal): a
// store as the scheduler and the job engine make it, then a load. The rows it stored read back.
absl::Status HeaderUsageExample(const std::vector<std::string>& keys, bool job_ok,
                                std::vector<SlotIndex::KeyState>* after) {
  ASSIGN_OR_RETURN(std::unique_ptr<SlotIndex> index, SlotIndex::Create(8));

  // Scheduler: store the keys that are not there yet.
  ASSIGN_OR_RETURN(SlotIndex::PrepareStoreResult store, index->PrepareStore(keys));
  // ... job engine, once per store job (every worker's part is one job):
  std::vector<RowRun> runs;
  for (uint64_t row : store.rows) AppendRows(&runs, RowRun{row, 1, store.ticket});
  RETURN_IF_ERROR(index->copies().Begin(CopyDirection::kStore, runs));
  // ... copy GPU → rows; when the job has ended on this node (every copy really finished):
  RETURN_IF_ERROR(index->copies().EndStore(runs, job_ok));
  // ... scheduler, when the request's store is done (before or after the job ends):
  RETURN_IF_ERROR(index->CompleteStore(store.keys, job_ok));

  // Scheduler: load what is there.
  std::vector<SlotIndex::KeyState> states = index->Lookup(keys);
  std::vector<std::string> hit_keys;
  for (size_t i = 0; i < keys.size(); ++i) {
    if (states[i] == SlotIndex::KeyState::kHit) hit_keys.push_back(keys[i]);
  }
  std::vector<uint32_t> tickets;
  ASSIGN_OR_RETURN(std::vector<uint64_t> rows, index->PrepareLoad(hit_keys, &tickets));
  std::vector<RowRun> load;  // the rows are pinned now
  for (size_t i = 0; i < rows.size(); ++i) AppendRows(&load, RowRun{rows[i], 1, tickets[i]});
  RETURN_IF_ERROR(index->copies().Begin(CopyDirection::kLoad, load));
  // ... copy rows → GPU ...
  RETURN_IF_ERROR(index->copies().End(load));
  RETURN_IF_ERROR(index->CompleteLoad(hit_keys));  // unpinned

  *after = index->Lookup(keys);
  return CheckSlotIndexInvariants(*index);
}

TEST(SlotIndexTest, TheHeadersUsageExampleRuns) {
  std::vector<SlotIndex::KeyState> after;
  ASSERT_TRUE(HeaderUsageExample({"a", "b"}, /*job_ok=*/true, &after).ok());
  EXPECT_THAT(after, ElementsAre(KeyState::kHit, KeyState::kHit));
  // A failed job's keys are ended with CompleteStore(false): misses, and nothing to load.
  ASSERT_TRUE(HeaderUsageExample({"a", "b"}, /*job_ok=*/false, &after).ok());
  EXPECT_THAT(after, ElementsAre(KeyState::kMiss, KeyState::kMiss));
}

TEST(SlotIndexTest, CreateValidatesNumRows) {
  EXPECT_EQ(SlotIndex::Create(0).status().code(), Code::kInvalidArgument);
  EXPECT_EQ(SlotIndex::Create(SlotIndex::kMaxRows + 1).status().code(), Code::kInvalidArgument);
  std::unique_ptr<SlotIndex> index = MakeIndex(3);
  SlotIndex::Counts c = index->counts();
  EXPECT_EQ(c.num_rows, 3);
  EXPECT_EQ(c.rows_free, 3);
  EXPECT_EQ(c.rows_writing + c.rows_ready + c.rows_reading + c.rows_quarantined, 0);
  EXPECT_EQ(index->num_rows(), 3);
  EXPECT_TRUE(CheckSlotIndexInvariants(*index).ok());
}

TEST(SlotIndexTest, MetadataIsSmallPerRow) {
  std::unique_ptr<SlotIndex> index = MakeIndex(1 << 20);
  // A 64-byte row plus the hash table reserved up front.
  const uint64_t empty = index->MemoryBytes();
  EXPECT_LE(empty, uint64_t{80} << 20);
  // Keys that fit in the row cost nothing more; longer ones exactly their bytes.
  Store(*index, {std::string(SlotIndex::kInlineKeyBytes, 'a')});
  EXPECT_EQ(index->MemoryBytes(), empty);
  Store(*index, {std::string(SlotIndex::kInlineKeyBytes + 1, 'b')});
  EXPECT_EQ(index->MemoryBytes(), empty + SlotIndex::kInlineKeyBytes + 1);
  index->Reset();
  EXPECT_EQ(index->MemoryBytes(), empty);
}

// ---- Lookup ----------------------------------------------------------------------------------

TEST(SlotIndexTest, LookupReportsStatesAndCountsPerKey) {
  std::unique_ptr<SlotIndex> index = MakeIndex(4);
  Store(*index, {"ready", "reading"});
  ASSERT_TRUE(index->PrepareLoad({"reading"}).ok());
  ASSERT_TRUE(index->PrepareStore({"writing"}).ok());
  EXPECT_THAT(index->Lookup({"ready", "reading", "writing", "absent", "", std::string(300, 'x')}),
              ElementsAre(kHit, kHit, kPending, kMiss, kMiss, kMiss));
  SlotIndex::Counts c = index->counts();
  EXPECT_EQ(c.hits, 2);
  EXPECT_EQ(c.hits_pending, 1);
  EXPECT_EQ(c.misses, 3);
}

TEST(SlotIndexTest, InlineAndHeapKeysSurviveEvictionAndReuse) {
  std::unique_ptr<SlotIndex> index = MakeIndex(2);
  const std::string inline_key(SlotIndex::kInlineKeyBytes, 'i');
  const std::string heap_a(SlotIndex::kInlineKeyBytes + 1, 'a');
  const std::string heap_b(SlotIndex::kInlineKeyBytes + 1, 'b');  // same size as heap_a
  const std::string heap_c(200, 'c');
  Store(*index, {heap_a});
  Store(*index, {inline_key});
  EXPECT_THAT(EvictedByStoring(*index, heap_b), ElementsAre(heap_a));      // heap block reused
  EXPECT_THAT(EvictedByStoring(*index, heap_c), ElementsAre(inline_key));  // inline → heap
  EXPECT_THAT(EvictedByStoring(*index, inline_key), ElementsAre(heap_b));  // heap → inline
  EXPECT_THAT(EvictedByStoring(*index, heap_a), ElementsAre(heap_c));      // heap, other size
  EXPECT_THAT(index->Lookup({heap_a, heap_b, heap_c, inline_key}),
              ElementsAre(kHit, kMiss, kMiss, kHit));
  EXPECT_TRUE(CheckSlotIndexInvariants(*index).ok()) << CheckSlotIndexInvariants(*index);
  EXPECT_EQ(index->Reset(), 2);
  EXPECT_TRUE(CheckSlotIndexInvariants(*index).ok()) << CheckSlotIndexInvariants(*index);
}

TEST(SlotIndexTest, KeysAreOpaqueBytes) {
  std::unique_ptr<SlotIndex> index = MakeIndex(4);
  const std::string nul_key("a\0b", 3);
  const std::string other("a\0c", 3);
  const std::string longest(SlotIndex::kMaxKeyBytes, '\xff');
  Store(*index, {nul_key, longest});
  EXPECT_THAT(index->Lookup({nul_key, other, longest, "a"}), ElementsAre(kHit, kMiss, kHit, kMiss));
}

// ---- PrepareStore ----------------------------------------------------------------------------

TEST(SlotIndexTest, PrepareStoreAllocatesFreeRowsInOrder) {
  std::unique_ptr<SlotIndex> index = MakeIndex(4);
  absl::StatusOr<SlotIndex::PrepareStoreResult> r = index->PrepareStore({"a", "b", "c"});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_THAT(r->keys, ElementsAre("a", "b", "c"));
  EXPECT_THAT(r->rows, ElementsAre(0, 1, 2));
  EXPECT_THAT(r->evicted_keys, IsEmpty());
  EXPECT_THAT(index->Lookup({"a", "b", "c"}), ElementsAre(kPending, kPending, kPending));
  EXPECT_EQ(GetRowCounts(*index), (RowCounts{1, 0, 3, 0, 0, 0, 0, 0}));
  EXPECT_TRUE(CheckSlotIndexInvariants(*index).ok());
}

TEST(SlotIndexTest, PrepareStoreSkipsKeysPresentInAnyState) {
  std::unique_ptr<SlotIndex> index = MakeIndex(8);
  Store(*index, {"ready", "reading"});
  ASSERT_TRUE(index->PrepareLoad({"reading"}).ok());
  ASSERT_TRUE(index->PrepareStore({"writing"}).ok());
  absl::StatusOr<SlotIndex::PrepareStoreResult> r =
      index->PrepareStore({"new1", "ready", "writing", "new2", "reading"});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_THAT(r->keys, ElementsAre("new1", "new2"));
  EXPECT_THAT(r->rows, ElementsAre(3, 4));
  EXPECT_THAT(r->evicted_keys, IsEmpty());
  // Nothing new at all: an empty result, nothing changed.
  Snapshot before = Take(*index, {"ready", "reading", "writing", "new1", "new2"});
  r = index->PrepareStore({"ready", "new1"});
  ASSERT_TRUE(r.ok());
  EXPECT_THAT(r->keys, IsEmpty());
  EXPECT_EQ(Take(*index, {"ready", "reading", "writing", "new1", "new2"}), before);
}

TEST(SlotIndexTest, PrepareStoreRejectsBadKeysWithNothingChanged) {
  std::unique_ptr<SlotIndex> index = MakeIndex(8);
  Store(*index, {"p", "q"});
  const Keys probe = {"p", "q", "a", "b"};
  Snapshot before = Take(*index, probe);
  struct Case {
    Keys keys;
    Code code;
  };
  const std::vector<Case> cases = {
      {{"a", ""}, Code::kInvalidArgument},
      {{"a", std::string(SlotIndex::kMaxKeyBytes + 1, 'k')}, Code::kInvalidArgument},
      {{"a", "b", "a"}, Code::kInvalidArgument},  // duplicate new key
      {{"a", "p", "p"}, Code::kInvalidArgument},  // duplicate present key
      {{"p", "a", "p", "b"}, Code::kInvalidArgument},
  };
  for (const Case& c : cases) {
    absl::StatusOr<SlotIndex::PrepareStoreResult> r = index->PrepareStore(c.keys);
    EXPECT_EQ(r.status().code(), c.code) << r.status();
    EXPECT_EQ(Take(*index, probe), before);
  }
  EXPECT_THAT(index->PrepareStore({"a", "a"}).status().message(), HasSubstr("61"));  // hex
}

TEST(SlotIndexTest, PrepareStoreUsesFreeRowsBeforeEvicting) {
  std::unique_ptr<SlotIndex> index = MakeIndex(3);
  Store(*index, {"a", "b"});
  absl::StatusOr<SlotIndex::PrepareStoreResult> r = index->PrepareStore({"c"});
  ASSERT_TRUE(r.ok());
  EXPECT_THAT(r->rows, ElementsAre(2));
  EXPECT_THAT(r->evicted_keys, IsEmpty());
  EXPECT_EQ(index->counts().evictions, 0);
}

TEST(SlotIndexTest, EvictionReusesTheEvictedRow) {
  std::unique_ptr<SlotIndex> index = MakeIndex(2);
  Rows rows = Store(*index, {"a"});
  Store(*index, {"b"});
  absl::StatusOr<SlotIndex::PrepareStoreResult> r = index->PrepareStore({"c"});
  ASSERT_TRUE(r.ok());
  EXPECT_THAT(r->evicted_keys, ElementsAre("a"));
  EXPECT_EQ(r->rows, rows);
  EXPECT_THAT(index->Lookup({"a", "b", "c"}), ElementsAre(kMiss, kHit, kPending));
  EXPECT_EQ(index->counts().evictions, 1);
  EXPECT_TRUE(CheckSlotIndexInvariants(*index).ok());
}

TEST(SlotIndexTest, EvictionIsLeastRecentlyUsedFirst) {
  std::unique_ptr<SlotIndex> index = MakeIndex(4);
  for (const char* k : {"a", "b", "c", "d"}) Store(*index, {k});  // LRU: a b c d
  absl::StatusOr<SlotIndex::PrepareStoreResult> r = index->PrepareStore({"x", "y"});
  ASSERT_TRUE(r.ok());
  EXPECT_THAT(r->evicted_keys, ElementsAre("a", "b"));
  EXPECT_THAT(r->rows, ElementsAre(0, 1));
}

TEST(SlotIndexTest, TouchMakesKeysMostRecentFirstKeyLast) {
  std::unique_ptr<SlotIndex> index = MakeIndex(4);
  for (const char* k : {"a", "b", "c", "d"}) Store(*index, {k});  // LRU: a b c d
  // Unknown keys are ignored; keys[0] ends most recent: c d b a.
  ASSERT_TRUE(index->Touch({"a", "unknown", "b"}).ok());
  EXPECT_THAT(EvictedByStoring(*index, "x"), ElementsAre("c"));
  EXPECT_THAT(EvictedByStoring(*index, "y"), ElementsAre("d"));
  EXPECT_THAT(EvictedByStoring(*index, "z"), ElementsAre("b"));
  EXPECT_THAT(EvictedByStoring(*index, "w"), ElementsAre("a"));
}

TEST(SlotIndexTest, TouchRejectsBadKeysAndTouchesNothing) {
  std::unique_ptr<SlotIndex> index = MakeIndex(2);
  Store(*index, {"a"});
  Store(*index, {"b"});
  EXPECT_EQ(index->Touch({"a", ""}).code(), Code::kInvalidArgument);
  EXPECT_EQ(index->Touch({"a", std::string(257, 'a')}).code(), Code::kInvalidArgument);
  EXPECT_THAT(EvictedByStoring(*index, "x"), ElementsAre("a"));  // a was not touched
}

TEST(SlotIndexTest, TouchIgnoresWritingAndPinnedKeys) {
  std::unique_ptr<SlotIndex> index = MakeIndex(3);
  Store(*index, {"a"});
  Store(*index, {"b"});
  ASSERT_TRUE(index->PrepareStore({"w"}).ok());
  ASSERT_TRUE(index->PrepareLoad({"b"}).ok());
  const RowCounts before = GetRowCounts(*index);
  ASSERT_TRUE(index->Touch({"w", "b"}).ok());
  EXPECT_EQ(GetRowCounts(*index), before);
  EXPECT_THAT(index->Lookup({"w", "b"}), ElementsAre(kPending, kHit));
  EXPECT_TRUE(CheckSlotIndexInvariants(*index).ok());
}

TEST(SlotIndexTest, CompleteStoreMakesKeysMostRecentFirstKeyLast) {
  std::unique_ptr<SlotIndex> index = MakeIndex(4);
  Store(*index, {"old"});
  absl::StatusOr<SlotIndex::PrepareStoreResult> r = index->PrepareStore({"a", "b", "c"});
  ASSERT_TRUE(r.ok());
  Write(*index, r->rows);
  ASSERT_TRUE(index->CompleteStore({"c"}, true).ok());       // LRU: old c
  ASSERT_TRUE(index->CompleteStore({"b", "a"}, true).ok());  // LRU: old c b a (store order)
  EXPECT_THAT(EvictedByStoring(*index, "x"), ElementsAre("old"));
  EXPECT_THAT(EvictedByStoring(*index, "y"), ElementsAre("c"));
  EXPECT_THAT(EvictedByStoring(*index, "z"), ElementsAre("b"));
  EXPECT_THAT(EvictedByStoring(*index, "w"), ElementsAre("a"));
}

TEST(SlotIndexTest, PrepareStoreNeverEvictsKeysOfTheSameRequest) {
  std::unique_ptr<SlotIndex> index = MakeIndex(3);
  for (const char* k : {"a", "b", "c"}) Store(*index, {k});  // LRU: a b c
  absl::StatusOr<SlotIndex::PrepareStoreResult> r = index->PrepareStore({"a", "x", "c"});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_THAT(r->evicted_keys, ElementsAre("b"));
  EXPECT_THAT(r->keys, ElementsAre("x"));
  Write(*index, r->rows);
  ASSERT_TRUE(index->CompleteStore({"x"}, true).ok());
  // Every evictable row is part of the request: exhausted, nothing evicted.
  const Keys probe = {"a", "c", "x"};
  Snapshot before = Take(*index, probe);
  EXPECT_EQ(index->PrepareStore({"a", "c", "x", "y"}).status().code(), Code::kResourceExhausted);
  EXPECT_EQ(Take(*index, probe), before);
}

TEST(SlotIndexTest, ExhaustionEvictsNothing) {
  std::unique_ptr<SlotIndex> index = MakeIndex(4);
  for (const char* k : {"a", "b", "c", "d"}) Store(*index, {k});
  ASSERT_TRUE(index->PrepareLoad({"a", "b"}).ok());  // pinned
  const Keys probe = {"a", "b", "c", "d", "x", "y", "z"};
  Snapshot before = Take(*index, probe);
  absl::StatusOr<SlotIndex::PrepareStoreResult> r = index->PrepareStore({"x", "y", "z"});
  EXPECT_EQ(r.status().code(), Code::kResourceExhausted);
  EXPECT_THAT(r.status().message(), HasSubstr("3 new keys"));
  EXPECT_EQ(Take(*index, probe), before);
  EXPECT_EQ(index->counts().evictions, 0);
  // The LRU order survived too: c then d go first.
  r = index->PrepareStore({"x", "y"});
  ASSERT_TRUE(r.ok());
  EXPECT_THAT(r->evicted_keys, ElementsAre("c", "d"));
}

TEST(SlotIndexTest, ExhaustedWhenEveryRowIsWriting) {
  std::unique_ptr<SlotIndex> index = MakeIndex(2);
  ASSERT_TRUE(index->PrepareStore({"a", "b"}).ok());
  EXPECT_EQ(index->PrepareStore({"c"}).status().code(), Code::kResourceExhausted);
  EXPECT_THAT(index->Lookup({"a", "b", "c"}), ElementsAre(kPending, kPending, kMiss));
}

TEST(SlotIndexTest, PinnedRowsAreNeverEvicted) {
  std::unique_ptr<SlotIndex> index = MakeIndex(3);
  for (const char* k : {"a", "b", "c"}) Store(*index, {k});  // LRU: a b c
  ASSERT_TRUE(index->PrepareLoad({"a"}).ok());
  EXPECT_THAT(EvictedByStoring(*index, "x"), ElementsAre("b"));
  EXPECT_THAT(EvictedByStoring(*index, "y"), ElementsAre("c"));
  EXPECT_THAT(EvictedByStoring(*index, "z"), ElementsAre("x"));
  EXPECT_THAT(index->Lookup({"a"}), ElementsAre(kHit));
  // When the last reader leaves, a is most recently used.
  ASSERT_TRUE(index->CompleteLoad({"a"}).ok());
  EXPECT_THAT(EvictedByStoring(*index, "w"), ElementsAre("y"));
  EXPECT_THAT(EvictedByStoring(*index, "v"), ElementsAre("z"));
  EXPECT_THAT(EvictedByStoring(*index, "u"), ElementsAre("a"));
}

// ---- CompleteStore ---------------------------------------------------------------------------

TEST(SlotIndexTest, CompleteStoreSuccessMakesKeysReady) {
  std::unique_ptr<SlotIndex> index = MakeIndex(4);
  absl::StatusOr<SlotIndex::PrepareStoreResult> r = index->PrepareStore({"a", "b"});
  ASSERT_TRUE(r.ok());
  Write(*index, r->rows);
  ASSERT_TRUE(index->CompleteStore({"b", "a"}, true).ok());
  EXPECT_THAT(index->Lookup({"a", "b"}), ElementsAre(kHit, kHit));
  EXPECT_EQ(GetRowCounts(*index), (RowCounts{2, 0, 0, 2, 0, 2, 0, 0}));
}

TEST(SlotIndexTest, CompleteStoreFailureFreesRows) {
  std::unique_ptr<SlotIndex> index = MakeIndex(2);
  absl::StatusOr<SlotIndex::PrepareStoreResult> r = index->PrepareStore({"a", "b"});
  ASSERT_TRUE(r.ok());
  ASSERT_TRUE(index->CompleteStore({"a"}, false).ok());
  EXPECT_THAT(index->Lookup({"a", "b"}), ElementsAre(kMiss, kPending));
  EXPECT_EQ(GetRowCounts(*index), (RowCounts{1, 0, 1, 0, 0, 0, 0, 0}));
  absl::StatusOr<SlotIndex::PrepareStoreResult> again = index->PrepareStore({"c"});
  ASSERT_TRUE(again.ok());
  EXPECT_THAT(again->rows, ElementsAre(r->rows[0]));
  EXPECT_THAT(again->evicted_keys, IsEmpty());
  EXPECT_TRUE(CheckSlotIndexInvariants(*index).ok());
}

TEST(SlotIndexTest, CompleteStoreErrorsChangeNothing) {
  std::unique_ptr<SlotIndex> index = MakeIndex(8);
  Store(*index, {"ready", "reading"});
  ASSERT_TRUE(index->PrepareLoad({"reading"}).ok());
  ASSERT_TRUE(index->PrepareStore({"w1", "w2"}).ok());
  const Keys probe = {"ready", "reading", "w1", "w2", "unknown"};
  Snapshot before = Take(*index, probe);
  struct Case {
    Keys keys;
    Code code;
    std::string message;
  };
  const std::vector<Case> cases = {
      {{"w1", "unknown"}, Code::kNotFound, "is not in the index"},
      {{"w1", "ready"}, Code::kFailedPrecondition, "(7265616479) is READY, not WRITING"},
      {{"w1", "reading"}, Code::kFailedPrecondition, "is READING, not WRITING"},
      {{"w1", "w2", "w1"}, Code::kInvalidArgument, "more than once"},
      {{"w1", ""}, Code::kInvalidArgument, "0 bytes"},
  };
  for (bool success : {true, false}) {
    for (const Case& c : cases) {
      absl::Status s = index->CompleteStore(c.keys, success);
      EXPECT_EQ(s.code(), c.code) << s;
      EXPECT_THAT(s.message(), HasSubstr(c.message));
      EXPECT_EQ(Take(*index, probe), before);
    }
  }
  // "ready" in hex, with the position of the key in the request.
  EXPECT_THAT(index->CompleteStore({"w1", "ready"}, true).message(),
              HasSubstr("key #1 (7265616479)"));
}

TEST(SlotIndexTest, LongKeysAreShortenedInMessages) {
  std::unique_ptr<SlotIndex> index = MakeIndex(2);
  const std::string key(200, 'A');
  absl::Status s = index->CompleteStore({key}, true);
  EXPECT_EQ(s.code(), Code::kNotFound);
  EXPECT_THAT(s.message(), HasSubstr("...(200 bytes)"));
  EXPECT_LT(s.message().size(), 200);
}

// ---- PrepareLoad / CompleteLoad --------------------------------------------------------------

TEST(SlotIndexTest, LoadPinsAndUnpinsWithReaderCounts) {
  std::unique_ptr<SlotIndex> index = MakeIndex(4);
  Rows rows = Store(*index, {"a", "b", "c"});
  absl::StatusOr<Rows> loaded = index->PrepareLoad({"c", "a"});
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_THAT(*loaded, ElementsAre(rows[2], rows[0]));
  EXPECT_EQ(GetRowCounts(*index), (RowCounts{1, 0, 0, 1, 2, 1, 0, 0}));
  // A second reader of a (READING → READING).
  ASSERT_TRUE(index->PrepareLoad({"a"}).ok());
  EXPECT_EQ(GetRowCounts(*index), (RowCounts{1, 0, 0, 1, 2, 1, 0, 0}));
  ASSERT_TRUE(index->CompleteLoad({"a", "c"}).ok());
  EXPECT_EQ(GetRowCounts(*index), (RowCounts{1, 0, 0, 2, 1, 2, 0, 0}));
  ASSERT_TRUE(index->CompleteLoad({"a"}).ok());
  EXPECT_EQ(GetRowCounts(*index), (RowCounts{1, 0, 0, 3, 0, 3, 0, 0}));
  EXPECT_THAT(index->Lookup({"a", "b", "c"}), ElementsAre(kHit, kHit, kHit));
  EXPECT_TRUE(CheckSlotIndexInvariants(*index).ok());
}

TEST(SlotIndexTest, PrepareLoadErrorsChangeNothing) {
  std::unique_ptr<SlotIndex> index = MakeIndex(8);
  Store(*index, {"a", "b"});
  ASSERT_TRUE(index->PrepareStore({"w"}).ok());
  const Keys probe = {"a", "b", "w", "unknown"};
  Snapshot before = Take(*index, probe);
  struct Case {
    Keys keys;
    Code code;
  };
  const std::vector<Case> cases = {
      {{"a", "unknown"}, Code::kNotFound},
      {{"a", "w"}, Code::kFailedPrecondition},
      {{"a", "b", "a"}, Code::kInvalidArgument},
      {{"a", std::string(257, 'a')}, Code::kInvalidArgument},
  };
  for (const Case& c : cases) {
    absl::StatusOr<Rows> r = index->PrepareLoad(c.keys);
    EXPECT_EQ(r.status().code(), c.code) << r.status();
    EXPECT_EQ(Take(*index, probe), before);
  }
  EXPECT_THAT(index->PrepareLoad({"w"}).status().message(), HasSubstr("is WRITING"));
}

TEST(SlotIndexTest, CompleteLoadErrorsChangeNothing) {
  std::unique_ptr<SlotIndex> index = MakeIndex(8);
  Store(*index, {"a", "b"});
  ASSERT_TRUE(index->PrepareLoad({"a"}).ok());
  ASSERT_TRUE(index->PrepareStore({"w"}).ok());
  const Keys probe = {"a", "b", "w", "unknown"};
  Snapshot before = Take(*index, probe);
  struct Case {
    Keys keys;
    Code code;
  };
  const std::vector<Case> cases = {
      {{"a", "unknown"}, Code::kNotFound},
      {{"a", "b"}, Code::kFailedPrecondition},  // READY: no reader
      {{"a", "w"}, Code::kFailedPrecondition},
      {{"a", "a"}, Code::kInvalidArgument},
      {{"a", ""}, Code::kInvalidArgument},
  };
  for (const Case& c : cases) {
    absl::Status s = index->CompleteLoad(c.keys);
    EXPECT_EQ(s.code(), c.code) << s;
    EXPECT_EQ(Take(*index, probe), before);
  }
  EXPECT_THAT(index->CompleteLoad({"b"}).message(), HasSubstr("is READY, not READING"));
}

TEST(SlotIndexTest, EmptyRequestsAreNoOps) {
  std::unique_ptr<SlotIndex> index = MakeIndex(2);
  EXPECT_TRUE(index->Lookup({}).empty());
  absl::StatusOr<SlotIndex::PrepareStoreResult> r = index->PrepareStore({});
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->keys.empty());
  EXPECT_TRUE(index->CompleteStore({}, true).ok());
  EXPECT_TRUE(index->PrepareLoad({}).ok());
  EXPECT_TRUE(index->CompleteLoad({}).ok());
  EXPECT_TRUE(index->Touch({}).ok());
  EXPECT_TRUE(CheckRows(*index, CopyDirection::kStore, {}).ok());
  EXPECT_TRUE(BeginCopy(*index, CopyDirection::kLoad, {}).ok());
  EXPECT_TRUE(EndCopy(*index, {}).ok());
  EXPECT_EQ(GetRowCounts(*index), (RowCounts{2, 0, 0, 0, 0, 0, 0, 0}));
}

// ---- Copy guards -----------------------------------------------------------------------------

TEST(SlotIndexTest, CheckRowsMatchesDirectionAndState) {
  std::unique_ptr<SlotIndex> index = MakeIndex(4);
  Rows ready = Store(*index, {"r"});
  absl::StatusOr<Rows> reading = index->PrepareLoad({"r"});
  ASSERT_TRUE(reading.ok());
  absl::StatusOr<SlotIndex::PrepareStoreResult> writing = index->PrepareStore({"w"});
  ASSERT_TRUE(writing.ok());
  Store(*index, {"idle"});
  const uint64_t w = writing->rows[0], rd = (*reading)[0];

  EXPECT_TRUE(CheckRows(*index, CopyDirection::kStore, {w}).ok());
  EXPECT_TRUE(CheckRows(*index, CopyDirection::kLoad, {rd}).ok());
  absl::Status s = CheckRows(*index, CopyDirection::kStore, {w, rd});
  EXPECT_EQ(s.code(), Code::kFailedPrecondition);
  EXPECT_THAT(s.message(), HasSubstr(absl::StrCat("row ", rd, " is READING, not WRITING")));
  s = CheckRows(*index, CopyDirection::kLoad, {rd, w});
  EXPECT_EQ(s.code(), Code::kFailedPrecondition);
  EXPECT_THAT(s.message(), HasSubstr(absl::StrCat("row ", w, " is WRITING, not READING")));
  EXPECT_EQ(CheckRows(*index, CopyDirection::kLoad, {3}).code(), Code::kFailedPrecondition);
  s = CheckRows(*index, CopyDirection::kLoad, {rd, 4});
  EXPECT_EQ(s.code(), Code::kOutOfRange);
  EXPECT_THAT(s.message(), HasSubstr("row 4"));
  EXPECT_EQ(CheckRows(*index, CopyDirection::kStore, {~uint64_t{0}}).code(), Code::kOutOfRange);
}

TEST(SlotIndexTest, BeginAndEndCopyAreAllOrNothing) {
  std::unique_ptr<SlotIndex> index = MakeIndex(4);
  absl::StatusOr<SlotIndex::PrepareStoreResult> w = index->PrepareStore({"a", "b"});
  ASSERT_TRUE(w.ok());
  const uint64_t a = w->rows[0], b = w->rows[1];
  const Keys probe = {"a", "b"};
  Snapshot empty = Take(*index, probe);
  EXPECT_EQ(BeginCopy(*index, CopyDirection::kStore, {a, 2}).code(), Code::kFailedPrecondition);
  EXPECT_EQ(BeginCopy(*index, CopyDirection::kStore, {a, 9}).code(), Code::kOutOfRange);
  EXPECT_EQ(BeginCopy(*index, CopyDirection::kLoad, {a}).code(), Code::kFailedPrecondition);
  EXPECT_EQ(Take(*index, probe), empty);

  ASSERT_TRUE(BeginCopy(*index, CopyDirection::kStore, {a, b, a}).ok());  // rows may repeat
  EXPECT_EQ(index->counts().copies_in_flight, 3);
  Snapshot busy = Take(*index, probe);
  EXPECT_EQ(EndCopy(*index, {a, 9}).code(), Code::kOutOfRange);
  EXPECT_EQ(EndCopy(*index, {a, 2}).code(), Code::kFailedPrecondition);  // no copy on row 2
  EXPECT_EQ(EndCopy(*index, {b, b}).code(), Code::kFailedPrecondition);  // b has one copy only
  EXPECT_EQ(Take(*index, probe), busy);
  ASSERT_TRUE(EndCopy(*index, {a, b, a}).ok());
  EXPECT_EQ(Take(*index, probe), empty);
  EXPECT_THAT(EndCopy(*index, {a}).message(), HasSubstr("has no copy in flight"));
}

// vLLM 0.20 commits a preempted request's store before any worker submitted it (DESIGN.md §7):
// the commit is recorded, and the row becomes READY only when its store job has written it.
TEST(SlotIndexTest, CommitBeforeTheStoreIsRecordedAndReadyOnlyOnceWritten) {
  std::unique_ptr<SlotIndex> index = MakeIndex(4);
  absl::StatusOr<SlotIndex::PrepareStoreResult> w = index->PrepareStore({"a", "b"});
  ASSERT_TRUE(w.ok());
  ASSERT_TRUE(index->CompleteStore({"b", "a"}, true).ok());  // no job yet
  EXPECT_THAT(index->Lookup({"a", "b"}), ElementsAre(kPending, kPending));
  EXPECT_EQ(index->PrepareLoad({"a"}).status().code(), Code::kFailedPrecondition);
  EXPECT_EQ(index->counts().commits_pending, 2);
  EXPECT_TRUE(index->CompleteStore({"a"}, true).ok());  // a second commit changes nothing
  EXPECT_EQ(index->counts().commits_pending, 2);
  // The store job starts and is still copying: still pending.
  ASSERT_TRUE(BeginCopy(*index, CopyDirection::kStore, w->rows).ok());
  EXPECT_THAT(index->Lookup({"a", "b"}), ElementsAre(kPending, kPending));
  EXPECT_EQ(index->PrepareLoad({"b"}).status().code(), Code::kFailedPrecondition);
  // It finished: READY, and the key prepared first is the most recent.
  ASSERT_TRUE(EndStoreCopy(*index, w->rows, true).ok());
  EXPECT_THAT(index->Lookup({"a", "b"}), ElementsAre(kHit, kHit));
  EXPECT_EQ(index->counts().commits_pending, 0);
  EXPECT_EQ(GetRowCounts(*index), (RowCounts{2, 0, 0, 2, 0, 2, 0, 0}));
  Store(*index, {"c", "d"});
  EXPECT_THAT(EvictedByStoring(*index, "x"), ElementsAre("b"));
  EXPECT_THAT(EvictedByStoring(*index, "y"), ElementsAre("a"));
  EXPECT_TRUE(CheckSlotIndexInvariants(*index).ok());
}

// The other order, the usual one: the job first, then the commit.
TEST(SlotIndexTest, WrittenRowsWaitForTheCommit) {
  std::unique_ptr<SlotIndex> index = MakeIndex(2);
  absl::StatusOr<SlotIndex::PrepareStoreResult> w = index->PrepareStore({"a"});
  ASSERT_TRUE(w.ok());
  Write(*index, w->rows);
  EXPECT_THAT(index->Lookup({"a"}), ElementsAre(kPending));  // written, not committed
  EXPECT_EQ(index->PrepareLoad({"a"}).status().code(), Code::kFailedPrecondition);
  ASSERT_TRUE(index->CompleteStore({"a"}, true).ok());
  EXPECT_THAT(index->Lookup({"a"}), ElementsAre(kHit));
  EXPECT_TRUE(index->PrepareLoad({"a"}).ok());
}

// A committed store whose job fails is dropped: never READY, never WRITING for ever.
TEST(SlotIndexTest, CommittedStoreWhoseJobFailsIsDropped) {
  std::unique_ptr<SlotIndex> index = MakeIndex(2);
  absl::StatusOr<SlotIndex::PrepareStoreResult> w = index->PrepareStore({"a", "b"});
  ASSERT_TRUE(w.ok());
  ASSERT_TRUE(index->CompleteStore({"a"}, true).ok());
  ASSERT_TRUE(BeginCopy(*index, CopyDirection::kStore, w->rows).ok());
  ASSERT_TRUE(EndStoreCopy(*index, w->rows, false).ok());
  EXPECT_THAT(index->Lookup({"a", "b"}), ElementsAre(kMiss, kPending));
  EXPECT_EQ(index->counts().commits_dropped, 1);
  // b was not committed: its commit is refused, its failure accepted.
  EXPECT_EQ(index->CompleteStore({"b"}, true).code(), Code::kFailedPrecondition);
  ASSERT_TRUE(index->CompleteStore({"b"}, false).ok());
  EXPECT_EQ(GetRowCounts(*index), (RowCounts{2, 0, 0, 0, 0, 0, 0, 0}));
  // With the copy still in flight, the dropped row is quarantined until it ends.
  w = index->PrepareStore({"c"});
  ASSERT_TRUE(w.ok());
  ASSERT_TRUE(BeginCopy(*index, CopyDirection::kStore, w->rows).ok());
  ASSERT_TRUE(index->CompleteStore({"c"}, true).ok());
  ASSERT_TRUE(MarkStoreFailed(*index, w->rows).ok());
  EXPECT_THAT(index->Lookup({"c"}), ElementsAre(kMiss));
  EXPECT_EQ(index->counts().rows_quarantined, 1);
  ASSERT_TRUE(EndCopy(*index, w->rows).ok());
  EXPECT_EQ(index->counts().rows_quarantined, 0);
  EXPECT_TRUE(CheckSlotIndexInvariants(*index).ok());
}

// A commit whose store never arrives (the worker died first) is dropped after the cutoff; one
// whose copy is in flight is kept for its job to end.
TEST(SlotIndexTest, StaleCommitsAreDropped) {
  std::unique_ptr<SlotIndex> index = MakeIndex(4);
  absl::StatusOr<SlotIndex::PrepareStoreResult> w = index->PrepareStore({"a", "b", "c"});
  ASSERT_TRUE(w.ok());
  const absl::Time t0 = absl::FromUnixSeconds(1000);
  ASSERT_TRUE(index->CompleteStore({"a", "b"}, true, t0).ok());
  ASSERT_TRUE(index->CompleteStore({"c"}, true, t0 + absl::Seconds(20)).ok());
  ASSERT_TRUE(BeginCopy(*index, CopyDirection::kStore, {w->rows[1]}).ok());
  EXPECT_EQ(index->copies().DropStaleCommits(t0), 0);  // strictly before the cutoff
  EXPECT_EQ(index->copies().DropStaleCommits(t0 + absl::Seconds(10)), 1);
  EXPECT_THAT(index->Lookup({"a", "b", "c"}), ElementsAre(kMiss, kPending, kPending));
  ASSERT_TRUE(EndStoreCopy(*index, {w->rows[1]}, true).ok());
  EXPECT_THAT(index->Lookup({"b"}), ElementsAre(kHit));
  EXPECT_EQ(index->copies().DropStaleCommits(t0 + absl::Seconds(30)), 1);  // c
  EXPECT_EQ(index->counts().commits_dropped, 2);
  EXPECT_EQ(GetRowCounts(*index), (RowCounts{3, 0, 0, 1, 0, 1, 0, 0}));
  EXPECT_TRUE(CheckSlotIndexInvariants(*index).ok());
}

// A store part planned against a row that was freed and handed to another key since (it came
// late, or again after a lost session) is refused by its ticket: it can never make the new key
// READY with the old key's bytes.
TEST(SlotIndexTest, StoreTicketsRefuseAPartForARowReusedSince) {
  std::unique_ptr<SlotIndex> index = MakeIndex(1);
  absl::StatusOr<SlotIndex::PrepareStoreResult> k1 = index->PrepareStore({"k1"});
  ASSERT_TRUE(k1.ok());
  const uint32_t t1 = k1->ticket;
  EXPECT_NE(t1, 0u);
  const absl::Time t0 = absl::FromUnixSeconds(100);
  ASSERT_TRUE(index->CompleteStore({"k1"}, true, t0).ok());      // commit first ...
  EXPECT_EQ(index->copies().DropStaleCommits(t0 + absl::Seconds(1)),
            1);  // ... its store never came
  absl::StatusOr<SlotIndex::PrepareStoreResult> k2 = index->PrepareStore({"k2"});
  ASSERT_TRUE(k2.ok());
  ASSERT_EQ(k2->rows, k1->rows);  // the same row, under a new ticket
  EXPECT_NE(k2->ticket, t1);
  ASSERT_TRUE(index->CompleteStore({"k2"}, true).ok());
  // k1's store arrives now.
  const Keys probe = {"k1", "k2"};
  Snapshot before = Take(*index, probe);
  absl::Status late = BeginCopy(*index, CopyDirection::kStore, k1->rows, {t1});
  EXPECT_EQ(late.code(), Code::kFailedPrecondition) << late;
  EXPECT_THAT(late.message(), HasSubstr("handed to another key"));
  EXPECT_EQ(Take(*index, probe), before);
  EXPECT_THAT(index->Lookup({"k2"}), ElementsAre(kPending));
  // k2's own store is accepted and publishes it.
  ASSERT_TRUE(BeginCopy(*index, CopyDirection::kStore, k2->rows, {k2->ticket}).ok());
  ASSERT_TRUE(EndStoreCopy(*index, k2->rows, true).ok());
  EXPECT_THAT(index->Lookup({"k2"}), ElementsAre(kHit));
  // Handles: ticket << 32 | row, below 2^63.
  EXPECT_EQ(StoreHandle(t1, 5), (uint64_t{t1} << 32) | 5);
  EXPECT_EQ(RowOfHandle(StoreHandle(t1, 5)), 5u);
  EXPECT_EQ(TicketOfHandle(StoreHandle(t1, 5)), t1);
  EXPECT_LT(StoreHandle(SlotIndex::kMaxTicket, SlotIndex::kMaxRows), uint64_t{1} << 63);
  // One ticket per row.
  EXPECT_EQ(CheckRows(*index, CopyDirection::kStore, {0}, {1, 2}).code(), Code::kInvalidArgument);
  EXPECT_TRUE(CheckSlotIndexInvariants(*index).ok());
}

// A row takes one store job: a second one while the first is in flight, or after it wrote the
// row, is refused (its bytes and its failure could not be told apart from the first's).
TEST(SlotIndexTest, OneStoreJobPerRow) {
  std::unique_ptr<SlotIndex> index = MakeIndex(2);
  absl::StatusOr<SlotIndex::PrepareStoreResult> w = index->PrepareStore({"a"});
  ASSERT_TRUE(w.ok());
  ASSERT_TRUE(BeginCopy(*index, CopyDirection::kStore, w->rows).ok());
  absl::Status second = BeginCopy(*index, CopyDirection::kStore, w->rows);
  EXPECT_EQ(second.code(), Code::kFailedPrecondition);
  EXPECT_THAT(second.message(), HasSubstr("in flight"));
  ASSERT_TRUE(EndStoreCopy(*index, w->rows, true).ok());
  second = BeginCopy(*index, CopyDirection::kStore, w->rows);
  EXPECT_EQ(second.code(), Code::kFailedPrecondition);
  EXPECT_THAT(second.message(), HasSubstr("was written"));
  ASSERT_TRUE(index->CompleteStore({"a"}, true).ok());
  EXPECT_THAT(index->Lookup({"a"}), ElementsAre(kHit));
  EXPECT_EQ(index->counts().copies_in_flight, 0u);
}

// vLLM hands CompleteStore a set: recency follows PrepareStore's order, so a prefix loses its
// tail first whatever order the set iterates in.
TEST(SlotIndexTest, RecencyFollowsStoreOrderNotCompletionOrder) {
  for (uint32_t seed = 1; seed <= 6; ++seed) {
    std::unique_ptr<SlotIndex> index = MakeIndex(8);
    Keys prefix = {"p0", "p1", "p2", "p3", "p4", "p5"};
    absl::StatusOr<SlotIndex::PrepareStoreResult> w = index->PrepareStore(prefix);
    ASSERT_TRUE(w.ok());
    Write(*index, w->rows);
    Keys set = prefix;
    std::shuffle(set.begin(), set.end(), std::mt19937(seed));
    ASSERT_TRUE(index->CompleteStore(set, true).ok());
    Store(*index, {"other1", "other2"});  // fills the region
    EXPECT_THAT(EvictedByStoring(*index, "x"), ElementsAre("p5")) << seed;
    EXPECT_THAT(EvictedByStoring(*index, "y"), ElementsAre("p4")) << seed;
  }
}

TEST(SlotIndexTest, FailedStoreWithCopyInFlightQuarantinesRow) {
  std::unique_ptr<SlotIndex> index = MakeIndex(2);
  absl::StatusOr<SlotIndex::PrepareStoreResult> w = index->PrepareStore({"a"});
  ASSERT_TRUE(w.ok());
  const uint64_t row = w->rows[0];
  ASSERT_TRUE(BeginCopy(*index, CopyDirection::kStore, {row}).ok());
  ASSERT_TRUE(index->CompleteStore({"a"}, false).ok());  // the job timed out; DMA still going
  EXPECT_THAT(index->Lookup({"a"}), ElementsAre(kMiss));
  EXPECT_EQ(GetRowCounts(*index), (RowCounts{1, 1, 0, 0, 0, 0, 1, 0}));
  EXPECT_EQ(CheckRows(*index, CopyDirection::kStore, {row}).code(), Code::kFailedPrecondition);

  // The other row is handed out; the quarantined one is not, even under pressure.
  absl::StatusOr<SlotIndex::PrepareStoreResult> b = index->PrepareStore({"b"});
  ASSERT_TRUE(b.ok());
  EXPECT_NE(b->rows[0], row);
  Write(*index, b->rows);
  ASSERT_TRUE(index->CompleteStore({"b"}, true).ok());
  absl::StatusOr<SlotIndex::PrepareStoreResult> c = index->PrepareStore({"c"});
  ASSERT_TRUE(c.ok());
  EXPECT_NE(c->rows[0], row);  // evicted b rather than reusing the quarantined row
  EXPECT_THAT(c->evicted_keys, ElementsAre("b"));
  EXPECT_EQ(index->PrepareStore({"d"}).status().code(), Code::kResourceExhausted);
  EXPECT_EQ(index->Reset(), 0);  // Reset does not free it either
  EXPECT_EQ(index->counts().rows_quarantined, 1);

  ASSERT_TRUE(EndCopy(*index, {row}).ok());
  EXPECT_EQ(GetRowCounts(*index), (RowCounts{1, 0, 1, 0, 0, 0, 0, 1}));
  absl::StatusOr<SlotIndex::PrepareStoreResult> d = index->PrepareStore({"d"});
  ASSERT_TRUE(d.ok());
  EXPECT_THAT(d->rows, ElementsAre(row));
  EXPECT_TRUE(CheckSlotIndexInvariants(*index).ok());
}

TEST(SlotIndexTest, ReadyRowWithLoadCopyInFlightIsNotEvicted) {
  std::unique_ptr<SlotIndex> index = MakeIndex(2);
  Store(*index, {"a"});
  Store(*index, {"b"});  // LRU: a b
  absl::StatusOr<Rows> rows = index->PrepareLoad({"a"});
  ASSERT_TRUE(rows.ok());
  ASSERT_TRUE(BeginCopy(*index, CopyDirection::kLoad, *rows).ok());
  ASSERT_TRUE(index->CompleteLoad({"a"}).ok());  // e.g. the job failed on a timeout
  EXPECT_EQ(GetRowCounts(*index), (RowCounts{0, 0, 0, 2, 0, 1, 1, 0}));
  absl::StatusOr<SlotIndex::PrepareStoreResult> x = index->PrepareStore({"x"});
  ASSERT_TRUE(x.ok());
  Write(*index, x->rows);
  EXPECT_THAT(x->evicted_keys, ElementsAre("b"));
  EXPECT_EQ(index->PrepareStore({"y"}).status().code(), Code::kResourceExhausted);
  ASSERT_TRUE(index->Touch({"a"}).ok());  // ignored while the copy runs
  // A still-busy READY row can be read again.
  ASSERT_TRUE(index->PrepareLoad({"a"}).ok());
  ASSERT_TRUE(index->CompleteLoad({"a"}).ok());
  ASSERT_TRUE(index->CompleteStore({"x"}, true).ok());
  ASSERT_TRUE(EndCopy(*index, *rows).ok());  // a is evictable again, most recently used
  EXPECT_EQ(GetRowCounts(*index), (RowCounts{0, 0, 0, 2, 0, 2, 0, 1}));
  EXPECT_THAT(EvictedByStoring(*index, "y"), ElementsAre("x"));
  EXPECT_THAT(EvictedByStoring(*index, "z"), ElementsAre("a"));
}

// ---- Reset -----------------------------------------------------------------------------------

TEST(SlotIndexTest, ResetDropsIdleReadyKeysOnly) {
  std::unique_ptr<SlotIndex> index = MakeIndex(8);
  Store(*index, {"r1", "r2", "reading", "copying"});
  ASSERT_TRUE(index->PrepareLoad({"reading"}).ok());
  absl::StatusOr<Rows> copying = index->PrepareLoad({"copying"});
  ASSERT_TRUE(copying.ok());
  ASSERT_TRUE(BeginCopy(*index, CopyDirection::kLoad, *copying).ok());
  ASSERT_TRUE(index->CompleteLoad({"copying"}).ok());
  absl::StatusOr<SlotIndex::PrepareStoreResult> w = index->PrepareStore({"w"});
  ASSERT_TRUE(w.ok());

  EXPECT_EQ(index->Reset(), 2);
  EXPECT_THAT(index->Lookup({"r1", "r2", "reading", "copying", "w"}),
              ElementsAre(kMiss, kMiss, kHit, kHit, kPending));
  EXPECT_EQ(GetRowCounts(*index), (RowCounts{5, 0, 1, 1, 1, 0, 1, 0}));
  EXPECT_TRUE(CheckSlotIndexInvariants(*index).ok());
  EXPECT_EQ(index->Reset(), 0);
  // What Reset kept still works.
  Write(*index, w->rows);
  EXPECT_TRUE(index->CompleteStore({"w"}, true).ok());
  EXPECT_TRUE(index->CompleteLoad({"reading"}).ok());
  EXPECT_TRUE(EndCopy(*index, *copying).ok());
  EXPECT_EQ(index->Reset(), 3);
  EXPECT_EQ(GetRowCounts(*index), (RowCounts{8, 0, 0, 0, 0, 0, 0, 0}));
  EXPECT_EQ(index->counts().evictions, 0);
  EXPECT_TRUE(CheckSlotIndexInvariants(*index).ok());
}

// ---- Model-based random test -----------------------------------------------------------------

// A slow, obviously correct model of the documented semantics, including LRU order.
class Model {
 public:
  struct Key {
    SlotIndex::RowState state;
    uint32_t readers = 0;
    uint64_t row = 0;
    // WRITING only: the store order, and how far the store got.
    uint64_t seq = 0;
    bool written = false;    // a store job on the row ended OK
    bool committed = false;  // CompleteStore(true) came first
    bool failed = false;     // a store job on the row failed
    int64_t committed_at = 0;
  };

  explicit Model(uint64_t num_rows) : num_rows_(num_rows), copies_(num_rows, 0), owner_(num_rows) {}

  std::map<std::string, Key> keys;

  bool Evictable(const std::string& k) const {
    const Key& key = keys.at(k);
    return key.state == SlotIndex::RowState::kReady && copies_[key.row] == 0;
  }
  bool RowFree(uint64_t row) const { return owner_[row].empty() && copies_[row] == 0; }
  uint64_t FreeRows() const {
    uint64_t n = 0;
    for (uint64_t r = 0; r < num_rows_; ++r) n += RowFree(r);
    return n;
  }
  uint32_t copies(uint64_t row) const { return copies_[row]; }

  void MakeRecent(const std::string& k) {
    lru_.remove(k);
    lru_.push_back(k);
  }
  // WRITING → READY, the key prepared first the most recent.
  void MakeReady(Keys ready) {
    std::sort(ready.begin(), ready.end(), [&](const std::string& a, const std::string& b) {
      return keys.at(a).seq > keys.at(b).seq;
    });
    for (const std::string& k : ready) {
      Key& key = keys.at(k);
      key.state = SlotIndex::RowState::kReady;
      key.written = key.committed = key.failed = false;
      if (copies_[key.row] == 0) MakeRecent(k);
    }
  }
  void Drop(const std::string& k) {
    owner_[keys.at(k).row].clear();
    keys.erase(k);
  }

  Code ExpectPrepareStore(const Keys& req) const {
    std::set<std::string> seen;
    for (const std::string& k : req) {
      if (k.empty() || k.size() > SlotIndex::kMaxKeyBytes) return Code::kInvalidArgument;
      if (!seen.insert(k).second) return Code::kInvalidArgument;
    }
    uint64_t needed = 0, available = FreeRows();
    for (const std::string& k : req) needed += !keys.count(k);
    for (const std::string& k : lru_) available += !seen.count(k);
    return needed > available ? Code::kResourceExhausted : Code::kOk;
  }

  // Checks `result` against the model and applies it.
  void ApplyPrepareStore(const Keys& req, const SlotIndex::PrepareStoreResult& result) {
    Keys expected_new;
    for (const std::string& k : req) {
      if (!keys.count(k)) expected_new.push_back(k);
    }
    ASSERT_EQ(result.keys, expected_new);
    ASSERT_EQ(result.rows.size(), expected_new.size());
    const uint64_t free_rows = FreeRows();
    const uint64_t to_evict = expected_new.size() > free_rows ? expected_new.size() - free_rows : 0;
    Keys expected_evicted;
    for (const std::string& k : lru_) {
      if (expected_evicted.size() == to_evict) break;
      if (std::find(req.begin(), req.end(), k) == req.end()) expected_evicted.push_back(k);
    }
    ASSERT_EQ(result.evicted_keys, expected_evicted);
    for (const std::string& k : expected_evicted) {
      owner_[keys[k].row].clear();
      keys.erase(k);
      lru_.remove(k);
    }
    std::set<uint64_t> rows;
    for (size_t i = 0; i < result.rows.size(); ++i) {
      const uint64_t row = result.rows[i];
      ASSERT_LT(row, num_rows_);
      ASSERT_TRUE(RowFree(row)) << "row " << row << " handed out while in use or quarantined";
      ASSERT_TRUE(rows.insert(row).second);
      owner_[row] = result.keys[i];
      Key key{SlotIndex::RowState::kWriting, 0, row};
      key.seq = next_seq_++;
      keys[result.keys[i]] = key;
    }
  }

  // The code a key-list call must return; `allowed` decides each present key's state.
  template <typename Allowed>
  Code ExpectKeys(const Keys& req, Allowed allowed) const {
    std::set<std::string> seen;
    for (const std::string& k : req) {
      if (k.empty() || k.size() > SlotIndex::kMaxKeyBytes) return Code::kInvalidArgument;
      auto it = keys.find(k);
      if (it == keys.end()) return Code::kNotFound;
      if (!seen.insert(k).second) return Code::kInvalidArgument;
      Code c = allowed(it->second);
      if (c != Code::kOk) return c;
    }
    return Code::kOk;
  }

  Code ExpectCompleteStore(const Keys& req, bool success) const {
    return ExpectKeys(req, [&](const Key& key) {
      if (key.state != SlotIndex::RowState::kWriting) return Code::kFailedPrecondition;
      if (success && key.failed) return Code::kFailedPrecondition;
      return Code::kOk;
    });
  }
  void ApplyCompleteStore(const Keys& req, bool success, int64_t now) {
    Keys ready;
    for (const std::string& k : req) {
      Key& key = keys[k];
      if (!success) {
        Drop(k);
      } else if (key.written) {
        ready.push_back(k);
      } else if (!key.committed) {
        key.committed = true;
        key.committed_at = now;
      }
    }
    MakeReady(ready);
  }
  // The end of a store job on `rows` (EndStoreCopy).
  void ApplyEndStoreCopy(const Rows& rows, bool ok) {
    ApplyEndCopy(rows);
    Keys ready;
    for (uint64_t row : rows) {
      if (owner_[row].empty()) continue;
      const std::string k = owner_[row];
      Key& key = keys.at(k);
      if (key.state != SlotIndex::RowState::kWriting) continue;
      if (!ok) {
        key.failed = true;
        if (key.committed) Drop(k);
      } else if (!key.failed && !key.written && copies_[row] == 0) {
        key.written = true;
        if (key.committed) {
          key.committed = false;
          ready.push_back(k);
        }
      }
    }
    MakeReady(ready);
  }
  uint64_t ApplyDropStaleCommits(int64_t cutoff) {
    Keys stale;
    for (const auto& [k, key] : keys) {
      if (key.committed && key.committed_at < cutoff && copies_[key.row] == 0) stale.push_back(k);
    }
    for (const std::string& k : stale) Drop(k);
    return stale.size();
  }

  Code ExpectPrepareLoad(const Keys& req) const {
    return ExpectKeys(req, [](const Key& key) {
      return key.state == SlotIndex::RowState::kWriting ? Code::kFailedPrecondition : Code::kOk;
    });
  }
  void ApplyPrepareLoad(const Keys& req, const Rows& rows) {
    ASSERT_EQ(rows.size(), req.size());
    for (size_t i = 0; i < req.size(); ++i) {
      Key& key = keys[req[i]];
      ASSERT_EQ(rows[i], key.row);
      key.state = SlotIndex::RowState::kReading;
      ++key.readers;
      lru_.remove(req[i]);
    }
  }

  Code ExpectCompleteLoad(const Keys& req) const {
    return ExpectKeys(req, [](const Key& key) {
      return key.state == SlotIndex::RowState::kReading ? Code::kOk : Code::kFailedPrecondition;
    });
  }
  void ApplyCompleteLoad(const Keys& req) {
    for (auto it = req.rbegin(); it != req.rend(); ++it) {
      Key& key = keys[*it];
      if (--key.readers > 0) continue;
      key.state = SlotIndex::RowState::kReady;
      if (copies_[key.row] == 0) MakeRecent(*it);
    }
  }

  void ApplyTouch(const Keys& req) {
    for (auto it = req.rbegin(); it != req.rend(); ++it) {
      if (keys.count(*it) && Evictable(*it)) MakeRecent(*it);
    }
  }

  Code ExpectCopyRows(CopyDirection direction, const Rows& rows) const {
    for (uint64_t row : rows) {
      if (row >= num_rows_) return Code::kOutOfRange;
      const SlotIndex::RowState wanted = direction == CopyDirection::kStore
                                             ? SlotIndex::RowState::kWriting
                                             : SlotIndex::RowState::kReading;
      if (owner_[row].empty() || keys.at(owner_[row]).state != wanted) {
        return Code::kFailedPrecondition;
      }
      // One store job per row: none in flight, none done (written or failed).
      if (direction == CopyDirection::kStore &&
          (copies_[row] > 0 || keys.at(owner_[row]).written || keys.at(owner_[row]).failed)) {
        return Code::kFailedPrecondition;
      }
    }
    return Code::kOk;
  }
  void ApplyBeginCopy(const Rows& rows) {
    for (uint64_t row : rows) ++copies_[row];
  }

  Code ExpectEndCopy(const Rows& rows) const {
    std::vector<uint32_t> copies = copies_;
    for (uint64_t row : rows) {
      if (row >= num_rows_) return Code::kOutOfRange;
      if (copies[row]-- == 0) return Code::kFailedPrecondition;
    }
    return Code::kOk;
  }
  void ApplyEndCopy(const Rows& rows) {
    for (uint64_t row : rows) --copies_[row];
    std::set<uint64_t> done;
    for (auto it = rows.rbegin(); it != rows.rend(); ++it) {
      if (copies_[*it] > 0 || !done.insert(*it).second) continue;
      if (!owner_[*it].empty() && Evictable(owner_[*it])) MakeRecent(owner_[*it]);
    }
  }

  uint64_t ApplyReset() {
    const uint64_t dropped = lru_.size();
    for (const std::string& k : lru_) {
      owner_[keys[k].row].clear();
      keys.erase(k);
    }
    lru_.clear();
    return dropped;
  }

  RowCounts Counts(uint64_t evictions) const {
    RowCounts c{};
    for (uint64_t r = 0; r < num_rows_; ++r) {
      c.copies += copies_[r];
      if (owner_[r].empty()) {
        (copies_[r] > 0 ? c.quarantined : c.free)++;
        continue;
      }
      switch (keys.at(owner_[r]).state) {
        case SlotIndex::RowState::kWriting:
          ++c.writing;
          break;
        case SlotIndex::RowState::kReady:
          ++c.ready;
          break;
        case SlotIndex::RowState::kReading:
          ++c.reading;
          break;
        case SlotIndex::RowState::kFree:
          break;
      }
    }
    c.evictable = lru_.size();
    c.evictions = evictions;
    return c;
  }

 private:
  uint64_t num_rows_;
  std::vector<uint32_t> copies_;
  std::vector<std::string> owner_;  // key owning each row, empty when FREE
  std::list<std::string> lru_;      // evictable keys, least recent first
  uint64_t next_seq_ = 0;
};

void RunRandomOperations(uint32_t seed) {
  constexpr uint64_t kRows = 12;
  std::mt19937 rng(seed);
  auto uniform = [&](int n) { return static_cast<int>(rng() % n); };
  Keys pool;
  // Short (inline), just-too-long and long (heap) keys.
  for (int i = 0; i < 40; ++i) {
    const std::string name = absl::StrCat("key-", i, "-");
    const size_t size = i % 3 == 0   ? name.size()
                        : i % 3 == 1 ? SlotIndex::kInlineKeyBytes + 1
                                     : 200;
    std::string key = name;
    while (key.size() < size) key += name;
    key.resize(size);
    pool.push_back(key);
  }
  pool.push_back("");  // invalid
  std::unique_ptr<SlotIndex> index = MakeIndex(kRows);
  Model model(kRows);
  uint64_t evictions = 0;
  std::vector<Rows> copies_in_flight;

  auto random_keys = [&](int max) {
    Keys keys;
    const int n = uniform(max + 1);
    for (int i = 0; i < n; ++i) {
      // Mostly valid pool keys; an invalid key rarely.
      keys.push_back(pool[uniform(static_cast<int>(pool.size()) - (uniform(50) ? 1 : 0))]);
    }
    return keys;
  };
  // Keys of the model in a given state, in random order, as a subset.
  auto keys_in = [&](SlotIndex::RowState state) {
    Keys keys;
    for (const auto& [k, key] : model.keys) {
      if (key.state == state && uniform(2)) keys.push_back(k);
    }
    std::shuffle(keys.begin(), keys.end(), rng);
    if (!keys.empty() && uniform(10) == 0) keys.push_back(pool[uniform(40)]);  // maybe wrong
    return keys;
  };

  for (int step = 0; step < 4000; ++step) {
    SCOPED_TRACE(absl::StrCat("seed ", seed, " step ", step));
    switch (uniform(14)) {
      case 0:
      case 1: {
        Keys req = random_keys(5);
        const Code expected = model.ExpectPrepareStore(req);
        absl::StatusOr<SlotIndex::PrepareStoreResult> r = index->PrepareStore(req);
        ASSERT_EQ(r.status().code(), expected) << r.status();
        if (r.ok()) {
          evictions += r->evicted_keys.size();
          model.ApplyPrepareStore(req, *r);
        }
        break;
      }
      case 2:
      case 3:
      case 13: {
        Keys req = keys_in(SlotIndex::RowState::kWriting);
        const bool success = uniform(4) != 0;
        const Code expected = model.ExpectCompleteStore(req, success);
        ASSERT_EQ(index->CompleteStore(req, success, absl::FromUnixSeconds(step)).code(), expected);
        if (expected == Code::kOk) model.ApplyCompleteStore(req, success, step);
        break;
      }
      case 4: {
        Keys req = uniform(2) ? keys_in(SlotIndex::RowState::kReady)
                              : keys_in(SlotIndex::RowState::kReading);
        const Code expected = model.ExpectPrepareLoad(req);
        absl::StatusOr<Rows> r = index->PrepareLoad(req);
        ASSERT_EQ(r.status().code(), expected) << r.status();
        if (r.ok()) model.ApplyPrepareLoad(req, *r);
        break;
      }
      case 5: {
        Keys req = keys_in(SlotIndex::RowState::kReading);
        const Code expected = model.ExpectCompleteLoad(req);
        ASSERT_EQ(index->CompleteLoad(req).code(), expected);
        if (expected == Code::kOk) model.ApplyCompleteLoad(req);
        break;
      }
      case 6:
      case 7: {
        // Mostly READY keys (whose order matters), some others.
        Keys req = keys_in(SlotIndex::RowState::kReady);
        if (req.size() > 4) req.resize(4);
        Keys more = random_keys(2);
        req.insert(req.begin() + uniform(static_cast<int>(req.size()) + 1), more.begin(),
                   more.end());
        const bool valid =
            std::none_of(req.begin(), req.end(), [](const std::string& k) { return k.empty(); });
        ASSERT_EQ(index->Touch(req).ok(), valid);
        if (valid) model.ApplyTouch(req);
        break;
      }
      case 8: {
        const CopyDirection direction = uniform(2) ? CopyDirection::kStore : CopyDirection::kLoad;
        Rows rows;
        const int n = uniform(3) + 1;
        for (int i = 0; i < n; ++i) rows.push_back(uniform(kRows + 1));
        // Bias towards rows that can be copied: one or two of them.
        if (uniform(3)) {
          Keys keys = keys_in(direction == CopyDirection::kStore ? SlotIndex::RowState::kWriting
                                                                 : SlotIndex::RowState::kReading);
          rows.clear();
          for (size_t i = 0; i < keys.size() && i < 2; ++i) {
            auto it = model.keys.find(keys[i]);
            rows.push_back(it == model.keys.end() ? kRows : it->second.row);
          }
        }
        const Code expected = model.ExpectCopyRows(direction, rows);
        ASSERT_EQ(CheckRows(*index, direction, rows).code(), expected);
        ASSERT_EQ(BeginCopy(*index, direction, rows).code(), expected);
        if (expected == Code::kOk) {
          model.ApplyBeginCopy(rows);
          copies_in_flight.push_back(rows);
        }
        break;
      }
      case 9:
      case 10: {
        Rows rows;
        size_t which = 0;
        if (!copies_in_flight.empty() && uniform(5) != 0) {
          which = uniform(static_cast<int>(copies_in_flight.size()));
          rows = copies_in_flight[which];
        } else {
          rows = {static_cast<uint64_t>(uniform(kRows + 1))};
          which = copies_in_flight.size();
        }
        const Code expected = model.ExpectEndCopy(rows);
        // A store job ends with its verdict; any other copy with EndCopy.
        const int how = uniform(3);  // 0: EndCopy, 1: store written, 2: store failed
        ASSERT_EQ((how == 0 ? EndCopy(*index, rows) : EndStoreCopy(*index, rows, how == 1)).code(),
                  expected);
        if (expected == Code::kOk) {
          if (how == 0) {
            model.ApplyEndCopy(rows);
          } else {
            model.ApplyEndStoreCopy(rows, how == 1);
          }
          if (which < copies_in_flight.size()) {
            copies_in_flight.erase(copies_in_flight.begin() + which);
          } else {
            // A stray EndCopy that happened to match: drop one recorded copy of that row.
            for (auto it = copies_in_flight.begin(); it != copies_in_flight.end(); ++it) {
              auto pos = std::find(it->begin(), it->end(), rows[0]);
              if (pos == it->end()) continue;
              it->erase(pos);
              if (it->empty()) copies_in_flight.erase(it);
              break;
            }
          }
        }
        break;
      }
      case 11:
      case 12: {
        if (uniform(20) == 0) {
          ASSERT_EQ(index->Reset(), model.ApplyReset());
        } else if (uniform(10) == 0) {
          const int64_t cutoff = step - uniform(300);
          ASSERT_EQ(index->copies().DropStaleCommits(absl::FromUnixSeconds(cutoff)),
                    model.ApplyDropStaleCommits(cutoff));
        } else {
          Keys probe = random_keys(6);
          std::vector<KeyState> states = index->Lookup(probe);
          for (size_t i = 0; i < probe.size(); ++i) {
            auto it = model.keys.find(probe[i]);
            const KeyState expected = it == model.keys.end()                              ? kMiss
                                      : it->second.state == SlotIndex::RowState::kWriting ? kPending
                                                                                          : kHit;
            ASSERT_EQ(states[i], expected) << probe[i];
          }
        }
        break;
      }
    }
    ASSERT_EQ(GetRowCounts(*index), model.Counts(evictions));
    absl::Status invariants = CheckSlotIndexInvariants(*index);
    ASSERT_TRUE(invariants.ok()) << invariants;
  }
}

TEST(SlotIndexTest, RandomOperationsMatchModel) {
  for (uint32_t seed = 1; seed <= 8; ++seed) {
    RunRandomOperations(seed);
    if (HasFatalFailure()) return;
  }
}

// ---- Concurrency -----------------------------------------------------------------------------

TEST(SlotIndexTest, ConcurrentSchedulersAndCopiesSmoke) {
  constexpr int kThreads = 8;
  constexpr int kIterations = 3000;
  std::unique_ptr<SlotIndex> index = MakeIndex(128);
  Keys pool;
  for (int i = 0; i < 600; ++i) pool.push_back(absl::StrCat("block-", i));
  std::atomic<int> unexpected{0};
  auto expect = [&](bool ok, const absl::Status& s) {
    if (!ok) {
      ++unexpected;
      ADD_FAILURE() << s;
    }
  };

  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937 rng(t);
      for (int it = 0; it < kIterations && unexpected == 0; ++it) {
        // Distinct keys from the shared pool, so requests have no duplicates.
        Keys keys;
        const int first = static_cast<int>(rng() % pool.size());
        const int n = 1 + static_cast<int>(rng() % 8);
        for (int i = 0; i < n; ++i) keys.push_back(pool[(first + i * 7) % pool.size()]);

        index->Lookup(keys);
        absl::StatusOr<SlotIndex::PrepareStoreResult> store = index->PrepareStore(keys);
        expect(store.ok() || store.status().code() == Code::kResourceExhausted, store.status());
        if (store.ok() && !store->keys.empty()) {
          // Only this thread owns these WRITING rows: every step must succeed.
          // Commit and copy in either order, as vLLM 0.20 does for preempted requests.
          const bool commit_first = rng() % 2 == 0;
          const bool success = rng() % 8 != 0;
          absl::Status s;
          if (commit_first && success) {
            s = index->CompleteStore(store->keys, true);
            expect(s.ok(), s);
          }
          s = BeginCopy(*index, CopyDirection::kStore, store->rows);
          expect(s.ok(), s);
          s = EndStoreCopy(*index, store->rows, success);
          expect(s.ok(), s);
          if (!commit_first || !success) {
            s = index->CompleteStore(store->keys, success);
            expect(s.ok(), s);
          }
        }
        absl::StatusOr<Rows> load = index->PrepareLoad(keys);
        expect(load.ok() || load.status().code() == Code::kNotFound ||
                   load.status().code() == Code::kFailedPrecondition,
               load.status());
        if (load.ok()) {
          absl::Status s = BeginCopy(*index, CopyDirection::kLoad, *load);
          expect(s.ok(), s);
          absl::Status check = CheckRows(*index, CopyDirection::kLoad, *load);
          expect(check.ok(), check);
          s = EndCopy(*index, *load);
          expect(s.ok(), s);
          s = index->CompleteLoad(keys);
          expect(s.ok(), s);
        }
        absl::Status s = index->Touch(keys);
        expect(s.ok(), s);
        if (t == 0 && it % 500 == 0) index->Reset();
      }
    });
  }
  std::thread observer([&] {
    for (int i = 0; i < 200; ++i) {
      SlotIndex::Counts c = index->counts();
      if (c.rows_free + c.rows_quarantined + c.rows_writing + c.rows_ready + c.rows_reading !=
          c.num_rows) {
        ++unexpected;
      }
      std::this_thread::yield();
    }
  });
  for (std::thread& t : threads) t.join();
  observer.join();
  EXPECT_EQ(unexpected, 0);
  absl::Status invariants = CheckSlotIndexInvariants(*index);
  EXPECT_TRUE(invariants.ok()) << invariants;
  SlotIndex::Counts c = index->counts();
  EXPECT_EQ(c.rows_writing, 0);
  EXPECT_EQ(c.rows_reading, 0);
  EXPECT_EQ(c.rows_quarantined, 0);
  EXPECT_EQ(c.copies_in_flight, 0);
  EXPECT_GT(c.evictions, 0);
}

TEST(SlotIndexTest, MetadataBytesForBoundsWhatCreateAllocates) {
  for (uint64_t rows :
       {uint64_t{1}, uint64_t{7}, uint64_t{8}, uint64_t{1000}, uint64_t{65536}, uint64_t{100003}}) {
    auto index = SlotIndex::Create(rows);
    ASSERT_TRUE(index.ok());
    EXPECT_GE(SlotIndex::MetadataBytesFor(rows), (*index)->MemoryBytes()) << rows;
    // Not wildly pessimistic either: under 96 bytes per row plus a constant.
    EXPECT_LE(SlotIndex::MetadataBytesFor(rows), 96 * rows + 4096) << rows;
  }
  // Arithmetic only, saturating: no allocation, no wrap for absurd sizes.
  EXPECT_EQ(SlotIndex::MetadataBytesFor(UINT64_MAX), UINT64_MAX);
  EXPECT_GT(SlotIndex::MetadataBytesFor(SlotIndex::kMaxRows), 64 * SlotIndex::kMaxRows);
}

TEST(SlotIndexTest, FailedStoreIsNeverPublished) {
  auto index = SlotIndex::Create(4);
  ASSERT_TRUE(index.ok());
  SlotIndex& idx = **index;
  auto store = idx.PrepareStore({"a", "b"});
  ASSERT_TRUE(store.ok());
  ASSERT_TRUE(BeginCopy(idx, CopyDirection::kStore, store->rows).ok());
  ASSERT_TRUE(MarkStoreFailed(idx, store->rows).ok());
  ASSERT_TRUE(EndCopy(idx, store->rows).ok());
  const absl::Status published = idx.CompleteStore({"a", "b"}, true);
  EXPECT_EQ(published.code(), absl::StatusCode::kFailedPrecondition) << published;
  EXPECT_NE(published.message().find("failed"), std::string::npos);
  EXPECT_EQ(idx.Lookup({"a", "b"}),
            std::vector<SlotIndex::KeyState>(2, SlotIndex::KeyState::kHitPending));
  // A second store job on a row whose store failed is refused (one store job a row; the proto's
  // "in flight or done"), and changes nothing: the key is ended with CompleteStore(false).
  const absl::Status second = BeginCopy(idx, CopyDirection::kStore, store->rows);
  EXPECT_EQ(second.code(), absl::StatusCode::kFailedPrecondition) << second;
  EXPECT_NE(second.message().find("store job failed"), std::string::npos) << second;
  EXPECT_EQ(idx.counts().copies_in_flight, 0u);
  ASSERT_TRUE(idx.CompleteStore({"a", "b"}, false).ok());
  EXPECT_EQ(idx.Lookup({"a"})[0], SlotIndex::KeyState::kMiss);
  // The mark goes with the failed store: a new store of the same rows can be published.
  auto again = idx.PrepareStore({"a"});
  ASSERT_TRUE(again.ok());
  ASSERT_TRUE(BeginCopy(idx, CopyDirection::kStore, again->rows).ok());
  ASSERT_TRUE(EndStoreCopy(idx, again->rows, true).ok());
  EXPECT_TRUE(idx.CompleteStore({"a"}, true).ok());
  EXPECT_EQ(idx.Lookup({"a"})[0], SlotIndex::KeyState::kHit);
  // Rows no longer WRITING are left alone; out-of-range rows change nothing.
  EXPECT_TRUE(MarkStoreFailed(idx, again->rows).ok());
  EXPECT_EQ(idx.Lookup({"a"})[0], SlotIndex::KeyState::kHit);
  EXPECT_EQ(MarkStoreFailed(idx, {99}).code(), absl::StatusCode::kOutOfRange);
  EXPECT_TRUE(CheckSlotIndexInvariants(idx).ok());
}

}  // namespace
}  // namespace kvoffload::daemon
