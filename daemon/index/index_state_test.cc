#include "daemon/index/index_state.h"

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace kvoffload::daemon {
namespace {

using ::testing::ElementsAre;

// Records the journal calls as text.
class Recorder : public RowJournal {
 public:
  void OnFree(uint32_t row) override { calls.push_back(absl::StrCat("free ", row)); }
  void OnReady(uint32_t row, absl::string_view key, uint32_t) override {
    calls.push_back(absl::StrCat("ready ", row, " ", key));
  }
  void OnTouch(uint32_t row) override { calls.push_back(absl::StrCat("touch ", row)); }
  void OnTicketsReserved(uint32_t) override {}
  std::vector<std::string> calls;
};

SegmentMap::Shape Private(uint32_t rows) { return SegmentMap::Shape{rows, 1, 0}; }

std::vector<uint32_t> Lru(const IndexState& s) {
  std::vector<uint32_t> out;
  for (uint32_t r = s.rows.least_recent(); r != s.rows.sentinel(); r = s.rows[r].next) {
    out.push_back(r);
  }
  return out;
}

// A private state of `num_rows` rows, its journal, and a store cursor.
struct Fixture {
  explicit Fixture(uint32_t num_rows)
      : s(num_rows, &journal, UINT64_MAX, Private(num_rows), /*pool=*/false),
        cursor(s.rows.least_recent()) {}
  // A store of `key` on a fresh row, written by its job, not committed yet.
  uint32_t Written(const std::string& key) {
    const uint32_t row = s.TakeRow(0, &cursor, &evicted);
    s.AssignKey(row, key, /*ticket=*/7, /*member=*/0);
    s.rows[row].written = true;
    return row;
  }
  // Written and committed: READY, the most recent.
  uint32_t Ready(const std::string& key) {
    const uint32_t row = Written(key);
    s.Commit({row}, absl::UnixEpoch());
    return row;
  }

  Recorder journal;
  IndexState s;
  uint32_t cursor;
  std::vector<std::string> evicted;
};

TEST(IndexStateTest, APrivateStateListsItsReadyRowsFreeInAscendingOrder) {
  IndexState s(4, nullptr, /*ready_rows=*/3, Private(4), /*pool=*/false);
  EXPECT_EQ(s.rows.rows_free(), 3u);
  EXPECT_EQ(s.rows.PopFree(), 0u);
  EXPECT_EQ(s.NotReadyRows(), 1u);
  IndexState pool(4, nullptr, 4, SegmentMap::Shape{2, 2, 0}, /*pool=*/true);
  EXPECT_EQ(pool.rows.rows_free(), 0u);  // every segment offline
  EXPECT_EQ(pool.segments.rows_parked(), 4u);
}

TEST(IndexStateTest, CommitMakesWrittenRowsReadyInStoreOrderAndRecordsTheOthers) {
  Fixture f(4);
  IndexState& s = f.s;
  const uint32_t a = f.Written("a");
  const uint32_t b = f.Written("b");
  const uint32_t c = s.TakeRow(0, &f.cursor, &f.evicted);
  s.AssignKey(c, "c", 7, 0);  // not written yet
  EXPECT_EQ(s.rows.tally().writing, 3u);
  s.Commit({b, a, c}, absl::FromUnixSeconds(5));
  // a was prepared first: the most recent of the two.
  EXPECT_THAT(Lru(s), ElementsAre(b, a));
  EXPECT_THAT(f.journal.calls, ElementsAre("ready 1 b", "touch 1", "ready 0 a", "touch 0"));
  EXPECT_EQ(s.rows[c].state, RowState::kWriting);
  EXPECT_TRUE(s.rows[c].committed);
  EXPECT_EQ(s.segments.member(0).counts.rows_held, 2u);
  EXPECT_EQ(s.rows.tally().ready, 2u);
  EXPECT_EQ(s.rows.tally().writing, 1u);
  EXPECT_EQ(s.commits.pending(), 1u);
}

TEST(IndexStateTest, TakeRowEvictsTheLeastRecentUnmarkedRowWhenNoneIsFree) {
  Fixture f(2);
  IndexState& s = f.s;
  const uint32_t a = f.Ready("a");
  const uint32_t b = f.Ready("b");  // LRU: a, b
  s.rows[a].marked = true;          // part of the request: never evicted by it
  f.journal.calls.clear();
  f.cursor = s.rows.least_recent();
  EXPECT_EQ(s.TakeRow(0, &f.cursor, &f.evicted), b);
  s.rows[a].marked = false;
  EXPECT_THAT(f.evicted, ElementsAre("b"));
  EXPECT_THAT(f.journal.calls, ElementsAre("free 1"));
  EXPECT_EQ(s.keys.Find("b"), RowTable::kNil);
  EXPECT_EQ(s.evictions, 1u);
  EXPECT_EQ(s.segments.member(0).counts.evicted, 1u);
}

TEST(IndexStateTest, AWritingRowWithACopyInFlightIsQuarantinedWhenItsKeyIsDropped) {
  Fixture f(2);
  const uint32_t row = f.Written("k");
  f.s.rows[row].copies = 1;
  EXPECT_EQ(f.s.DropWritingKey(row), "k");
  EXPECT_EQ(f.s.rows[row].state, RowState::kFree);
  EXPECT_EQ(f.s.rows.tally().quarantined, 1u);
  EXPECT_EQ(f.s.rows.rows_free(), 1u);  // the other row only
  EXPECT_EQ(f.s.keys.Find("k"), RowTable::kNil);
}

TEST(IndexStateTest, TheLastReaderMakesARowReadyAndMostRecentAgain) {
  Fixture f(2);
  IndexState& s = f.s;
  const uint32_t a = f.Ready("a");
  const uint32_t b = f.Ready("b");  // LRU: a, b
  s.AddReader(a, 0);
  s.AddReader(a, 0);
  EXPECT_EQ(s.rows[a].state, RowState::kReading);
  EXPECT_THAT(Lru(s), ElementsAre(b));
  s.DropReader(a);
  EXPECT_EQ(s.rows[a].state, RowState::kReading);
  s.DropReader(a);
  EXPECT_EQ(s.rows[a].state, RowState::kReady);
  EXPECT_THAT(Lru(s), ElementsAre(b, a));
}

TEST(IndexStateTest, AdoptedRowsAboveTheWatermarkWaitParkedAndComeBackLeastRecent) {
  IndexState s(4, nullptr, /*ready_rows=*/2, Private(4), false);
  const IndexState::Adopted adopted = s.AdoptRestored(
      {RestoredRow{0, "x", 3, 1}, RestoredRow{3, "y", 4, 2}, RestoredRow{9, "bad", 5, 3}});
  EXPECT_EQ(adopted.restored, 1u);
  EXPECT_EQ(adopted.dropped, 1u);
  EXPECT_EQ(s.keys.Find("y"), RowTable::kNil);  // parked: a miss
  EXPECT_THAT(Lru(s), ElementsAre(0));
  EXPECT_EQ(s.rows.rows_free(), 1u);  // row 1
  EXPECT_EQ(s.RaiseReadiness(4), 1u);
  EXPECT_EQ(s.keys.Find("y"), 3u);
  EXPECT_THAT(Lru(s), ElementsAre(3, 0));
  EXPECT_EQ(s.rows.rows_free(), 2u);  // rows 1 and 2
}

}  // namespace
}  // namespace kvoffload::daemon
