// SlotIndex's RowJournal hook and Restore: the journal hears READY exactly when a row
// is written and committed, FREE before a row is handed to another key, recency on every LRU
// move; an index restored from what it recorded serves the same keys in the same rows, in the
// same LRU order, with tickets that never repeat one handed out before.
#include <algorithm>
#include <cstdint>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "daemon/index/slot_index.h"
#include "daemon/index/testing/row_lists.h"
#include "daemon/index/testing/slot_index_invariants.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace kvoffload::daemon {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;
using Keys = std::vector<std::string>;
using Rows = std::vector<uint64_t>;

// Keeps what a durable journal would: the READY rows with key, ticket and recency.
class ModelJournal : public RowJournal {
 public:
  struct Entry {
    std::string key;
    uint32_t ticket = 0;
    uint64_t seq = 0;
  };
  void OnFree(uint32_t row) override {
    events.push_back(absl::StrCat("free ", row));
    ready.erase(row);
  }
  void OnReady(uint32_t row, absl::string_view key, uint32_t ticket) override {
    events.push_back(absl::StrCat("ready ", row, " ", key));
    EXPECT_EQ(ready.count(row), 0u) << "row " << row << " published twice without a free";
    ready[row] = Entry{std::string(key), ticket, ++seq};
  }
  void OnTouch(uint32_t row) override {
    auto it = ready.find(row);
    ASSERT_NE(it, ready.end()) << "touch of row " << row << " that is not READY";
    it->second.seq = ++seq;
  }
  void OnTicketsReserved(uint32_t end) override { reserved.push_back(end); }

  std::vector<RestoredRow> Rows() const {
    std::vector<RestoredRow> out;
    for (const auto& [row, e] : ready) out.push_back(RestoredRow{row, e.key, e.ticket, e.seq});
    return out;
  }

  std::map<uint32_t, Entry> ready;
  std::vector<std::string> events;
  std::vector<uint32_t> reserved;
  uint64_t seq = 0;
};

// The index owns its journal; the test keeps the model and hands the index a forwarder.
class Forward : public RowJournal {
 public:
  explicit Forward(RowJournal* to) : to_(to) {}
  void OnFree(uint32_t row) override { to_->OnFree(row); }
  void OnReady(uint32_t row, absl::string_view key, uint32_t ticket) override {
    to_->OnReady(row, key, ticket);
  }
  void OnTouch(uint32_t row) override { to_->OnTouch(row); }
  void OnTicketsReserved(uint32_t end) override { to_->OnTicketsReserved(end); }

 private:
  RowJournal* const to_;
};

std::unique_ptr<RowJournal> To(RowJournal* model) {
  return model == nullptr ? nullptr : std::make_unique<Forward>(model);
}

std::unique_ptr<SlotIndex> MakeIndex(uint64_t num_rows, RowJournal* journal) {
  auto index = SlotIndex::Create(num_rows, To(journal));
  EXPECT_TRUE(index.ok()) << index.status();
  return std::move(index).value();
}

// Prepare, copy and commit `keys`; returns their rows.
Rows Store(SlotIndex& index, const Keys& keys) {
  auto prepared = index.PrepareStore(keys);
  EXPECT_TRUE(prepared.ok()) << prepared.status();
  EXPECT_TRUE(BeginCopy(index, CopyDirection::kStore, prepared->rows).ok());
  EXPECT_TRUE(EndStoreCopy(index, prepared->rows, true).ok());
  EXPECT_TRUE(index.CompleteStore(prepared->keys, true).ok());
  return prepared->rows;
}

TEST(SlotIndexJournalTest, ReadyOnlyWhenWrittenAndCommittedInEitherOrder) {
  ModelJournal journal;
  auto index = MakeIndex(4, &journal);
  auto a = index->PrepareStore({"a"});
  ASSERT_TRUE(a.ok());
  ASSERT_TRUE(BeginCopy(*index, CopyDirection::kStore, a->rows).ok());
  EXPECT_THAT(journal.ready, IsEmpty());  // WRITING with a copy in flight
  ASSERT_TRUE(EndStoreCopy(*index, a->rows, true).ok());
  EXPECT_THAT(journal.ready, IsEmpty());  // written, not committed
  ASSERT_TRUE(index->CompleteStore({"a"}, true).ok());
  ASSERT_EQ(journal.ready.count(a->rows[0]), 1u);
  EXPECT_EQ(journal.ready[a->rows[0]].key, "a");
  EXPECT_EQ(journal.ready[a->rows[0]].ticket, a->ticket);

  // Commit first (vLLM 0.20 commits a preempted request's store early), then the copy.
  auto b = index->PrepareStore({"b"});
  ASSERT_TRUE(b.ok());
  ASSERT_TRUE(index->CompleteStore({"b"}, true).ok());
  EXPECT_EQ(journal.ready.count(b->rows[0]), 0u);
  ASSERT_TRUE(BeginCopy(*index, CopyDirection::kStore, b->rows).ok());
  EXPECT_EQ(journal.ready.count(b->rows[0]), 0u);
  ASSERT_TRUE(EndStoreCopy(*index, b->rows, true).ok());
  EXPECT_EQ(journal.ready[b->rows[0]].key, "b");
}

TEST(SlotIndexJournalTest, FailedAndAbandonedStoresAreNeverPublished) {
  ModelJournal journal;
  auto index = MakeIndex(4, &journal);
  auto a = index->PrepareStore({"a", "b", "c"});
  ASSERT_TRUE(a.ok());
  ASSERT_TRUE(BeginCopy(*index, CopyDirection::kStore, {a->rows[0]}).ok());
  ASSERT_TRUE(EndStoreCopy(*index, {a->rows[0]}, false).ok());  // a: copy failed
  EXPECT_EQ(index->CompleteStore({"a"}, true).code(), absl::StatusCode::kFailedPrecondition);
  ASSERT_TRUE(index->CompleteStore({"a", "b"}, false).ok());  // b: the scheduler gave up
  ASSERT_TRUE(index->CompleteStore({"c"}, true).ok());        // c: committed, never written
  EXPECT_EQ(index->copies().DropStaleCommits(absl::InfiniteFuture()), 1u);
  EXPECT_THAT(journal.ready, IsEmpty());
  EXPECT_THAT(journal.events, IsEmpty());
}

TEST(SlotIndexJournalTest, EvictionUnpublishesBeforeTheRowIsHandedOut) {
  ModelJournal journal;
  auto index = MakeIndex(2, &journal);
  Rows first = Store(*index, {"a", "b"});
  journal.events.clear();
  auto c = index->PrepareStore({"c"});
  ASSERT_TRUE(c.ok());
  ASSERT_THAT(c->evicted_keys, ElementsAre("b"));  // a was prepared first: most recent
  // The evicted row is FREE in the journal by the time its new owner may copy into it.
  EXPECT_THAT(journal.events, ElementsAre(absl::StrCat("free ", c->rows[0])));
  EXPECT_EQ(journal.ready.count(c->rows[0]), 0u);
  ASSERT_TRUE(BeginCopy(*index, CopyDirection::kStore, c->rows).ok());
  EXPECT_EQ(index->Reset(), 1u);  // a; c is WRITING and kept
  EXPECT_THAT(journal.ready, IsEmpty());
}

TEST(SlotIndexJournalTest, LoadsKeepRowsPublishedAndTouchesReorder) {
  ModelJournal journal;
  auto index = MakeIndex(3, &journal);
  Rows rows = Store(*index, {"a", "b", "c"});
  auto pinned = index->PrepareLoad({"c"});
  ASSERT_TRUE(pinned.ok());
  EXPECT_EQ(journal.ready.size(), 3u);  // READING is still published
  ASSERT_TRUE(index->CompleteLoad({"c"}).ok());
  ASSERT_TRUE(index->Touch({"b"}).ok());
  // Recency now: b (touch), c (last reader left), a, in that order from the most recent.
  EXPECT_GT(journal.ready[rows[1]].seq, journal.ready[rows[2]].seq);
  EXPECT_GT(journal.ready[rows[2]].seq, journal.ready[rows[0]].seq);
}

// Random traffic: at every step the journal's READY rows are exactly the index's readable keys.
TEST(SlotIndexJournalTest, JournalMatchesTheIndexUnderRandomTraffic) {
  ModelJournal journal;
  constexpr uint64_t kRows = 64;
  auto index = MakeIndex(kRows, &journal);
  std::mt19937_64 rng(19);
  struct Pending {
    Keys keys;
    Rows rows;
    bool copied = false;
  };
  std::vector<Pending> pending;
  std::vector<std::string> pinned;
  int next_key = 0;
  for (int step = 0; step < 4000; ++step) {
    const int op = static_cast<int>(rng() % 6);
    if (op <= 1) {
      Keys keys;
      const int n = 1 + static_cast<int>(rng() % 4);
      for (int i = 0; i < n; ++i) {
        keys.push_back(absl::StrCat(rng() % 2 ? "k" : std::string(60, 'L'), next_key++));
      }
      auto p = index->PrepareStore(keys);
      if (p.ok() && !p->rows.empty()) pending.push_back({p->keys, p->rows});
    } else if (op == 2 && !pending.empty()) {
      Pending& p = pending[rng() % pending.size()];
      if (!p.copied) {
        ASSERT_TRUE(BeginCopy(*index, CopyDirection::kStore, p.rows).ok());
        ASSERT_TRUE(EndStoreCopy(*index, p.rows, rng() % 8 != 0).ok());
        p.copied = true;
      }
    } else if (op == 3 && !pending.empty()) {
      const size_t i = rng() % pending.size();
      (void)index->CompleteStore(pending[i].keys, rng() % 4 != 0);
      pending.erase(pending.begin() + i);
    } else if (op == 4) {
      if (!pinned.empty()) {
        ASSERT_TRUE(index->CompleteLoad({pinned.back()}).ok());
        pinned.pop_back();
      } else if (!journal.ready.empty()) {
        auto it = journal.ready.begin();
        std::advance(it, rng() % journal.ready.size());
        const std::string key = it->second.key;
        if (index->PrepareLoad({key}).ok()) pinned.push_back(key);
      }
    } else if (op == 5 && rng() % 50 == 0) {
      index->Reset();
    }
    ASSERT_TRUE(CheckSlotIndexInvariants(*index).ok());
    if (step % 97 != 0) continue;
    // Every published row is readable with its key in that row; no other key is readable.
    std::vector<std::string> keys;
    for (const auto& [row, e] : journal.ready) keys.push_back(e.key);
    for (const std::string& k : keys) {
      auto rows = index->PrepareLoad({k});
      ASSERT_TRUE(rows.ok()) << k << ": " << rows.status();
      EXPECT_EQ(journal.ready.at(static_cast<uint32_t>((*rows)[0])).key, k);
      ASSERT_TRUE(index->CompleteLoad({k}).ok());
    }
    const SlotIndex::Counts c = index->counts();
    EXPECT_EQ(c.rows_ready + c.rows_reading, journal.ready.size());
  }
}

TEST(SlotIndexJournalTest, RestoredIndexServesTheSameRowsInTheSameOrder) {
  ModelJournal journal;
  auto index = MakeIndex(4, &journal);
  Rows rows = Store(*index, {"a", "b", "c", "d"});  // a most recent (prepared first)
  ASSERT_TRUE(index->Touch({"c"}).ok());            // LRU, least recent first: d b a c
  const std::vector<RestoredRow> state = journal.Rows();
  const uint32_t next_ticket = journal.reserved.back();
  index.reset();

  {
    auto restored = SlotIndex::Restore(4, state, next_ticket, To(nullptr));
    ASSERT_TRUE(restored.ok()) << restored.status();
    EXPECT_EQ(restored->rows_restored, 4u);
    EXPECT_EQ(restored->rows_dropped, 0u);
    ASSERT_TRUE(CheckSlotIndexInvariants(*restored->index).ok());
    auto loaded = restored->index->PrepareLoad({"a", "b", "c", "d"});
    ASSERT_TRUE(loaded.ok());
    EXPECT_EQ(*loaded, rows);
  }
  ModelJournal journal2;
  journal2.ready = journal.ready;
  journal2.seq = journal.seq;
  auto restored = SlotIndex::Restore(4, state, next_ticket, To(&journal2));
  ASSERT_TRUE(restored.ok());
  EXPECT_THAT(journal2.events, IsEmpty());  // the journal already holds these rows
  auto evict = restored->index->PrepareStore({"w", "x", "y", "z"});
  ASSERT_TRUE(evict.ok());
  EXPECT_THAT(evict->evicted_keys, ElementsAre("d", "b", "a", "c"));
  EXPECT_EQ(evict->ticket, next_ticket);   // never a ticket handed out before the restart
  EXPECT_THAT(journal2.ready, IsEmpty());  // every evicted row unpublished
}

TEST(SlotIndexJournalTest, RestoreKeepsRecencyWithoutTouches) {
  std::vector<RestoredRow> state = {{0, "old", 5, 10}, {1, "new", 6, 30}, {2, "mid", 7, 20}};
  auto restored = SlotIndex::Restore(3, state, 100, To(nullptr));
  ASSERT_TRUE(restored.ok());
  auto evict = restored->index->PrepareStore({"x", "y", "z"});
  ASSERT_TRUE(evict.ok());
  EXPECT_THAT(evict->evicted_keys, ElementsAre("old", "mid", "new"));
  EXPECT_EQ(evict->ticket, 100u);
}

TEST(SlotIndexJournalTest, RestoreDropsWhatCannotBeRight) {
  ModelJournal journal;
  std::vector<RestoredRow> state = {
      {0, "a", 1, 1},
      {9, "out-of-range", 1, 2},
      {1, "", 1, 3},                     // empty key
      {2, std::string(257, 'k'), 1, 4},  // too long
      {3, "zero-ticket", 0, 5},
      {4, "a", 1, 6},  // key twice: this newer entry wins
      {5, "b", 1, 7},
      {5, "c", 1, 8},  // row twice: c wins
  };
  auto restored = SlotIndex::Restore(8, state, 2, To(&journal));
  ASSERT_TRUE(restored.ok());
  EXPECT_EQ(restored->rows_restored, 2u);
  EXPECT_EQ(restored->rows_dropped, 6u);
  SlotIndex& index = *restored->index;
  ASSERT_TRUE(CheckSlotIndexInvariants(index).ok());
  auto rows = index.PrepareLoad({"a", "c"});
  ASSERT_TRUE(rows.ok());
  EXPECT_THAT(*rows, ElementsAre(4u, 5u));
  EXPECT_EQ(index.Lookup({"b"})[0], SlotIndex::KeyState::kMiss);
  // Rows whose entries were refused and that nobody else holds are unpublished: 0 (the older
  // "a"), 1, 2, 3. Row 5 holds c, so b's refusal must not free it.
  std::vector<std::string> frees = journal.events;
  std::sort(frees.begin(), frees.end());
  EXPECT_THAT(frees, ElementsAre("free 0", "free 1", "free 2", "free 3"));
  const SlotIndex::Counts c = index.counts();
  EXPECT_EQ(c.rows_free, 6u);
  EXPECT_EQ(c.rows_reading, 2u);
  EXPECT_EQ(SlotIndex::Restore(0, {}, 1, To(nullptr)).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(SlotIndexJournalTest, TicketsAreReservedInChunksAndWrap) {
  ModelJournal journal;
  auto restored = SlotIndex::Restore(2, {}, SlotIndex::kMaxTicket, To(&journal));
  ASSERT_TRUE(restored.ok());
  SlotIndex& index = *restored->index;
  auto a = index.PrepareStore({"a"});
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->ticket, SlotIndex::kMaxTicket);
  ASSERT_THAT(journal.reserved, ElementsAre((1u << 16)));  // kMaxTicket, then 1..65535
  auto b = index.PrepareStore({"b"});
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b->ticket, 1u);
  EXPECT_EQ(journal.reserved.size(), 1u);  // still inside the reserved chunk
}

}  // namespace
}  // namespace kvoffload::daemon
