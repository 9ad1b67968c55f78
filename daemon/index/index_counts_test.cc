#include "daemon/index/index_counts.h"

#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"

namespace kvoffload::daemon {
namespace {

// A private state of 8 rows, the first `ready` of them ready, with `stored` READY keys.
struct Stored {
  Stored(uint64_t ready, int stored) : s(8, nullptr, ready, SegmentMap::Shape{8, 1, 0}, false) {
    uint32_t cursor = s.rows.least_recent();
    std::vector<std::string> evicted;
    for (int i = 0; i < stored; ++i) {
      const uint32_t row = s.TakeRow(0, &cursor, &evicted);
      s.AssignKey(row, "k" + std::to_string(i), 1, 0);
      s.rows[row].written = true;
      s.Commit({row}, absl::UnixEpoch());
    }
  }
  IndexState s;
};

TEST(IndexCountsTest, RowsAddUpToTheRowsOfTheIndex) {
  Stored stored(/*ready=*/6, /*stored=*/2);
  stored.s.misses = 3;
  const IndexCounts c = CountsOf(stored.s);
  EXPECT_EQ(c.num_rows, 8u);
  EXPECT_EQ(c.rows_not_ready, 2u);
  EXPECT_EQ(c.rows_ready, 2u);
  EXPECT_EQ(c.rows_evictable, 2u);
  EXPECT_EQ(c.rows_free, 4u);
  EXPECT_EQ(c.misses, 3u);
  EXPECT_EQ(c.rows_offline, 0u);
  EXPECT_EQ(c.rows_online(), 8u);
  EXPECT_EQ(c.rows_free + c.rows_quarantined + c.rows_writing + c.rows_ready + c.rows_reading +
                c.rows_not_ready + c.rows_offline,
            c.num_rows);
}

TEST(IndexCountsTest, APoolsOfflineSegmentsCountOfflineNotNotReady) {
  IndexState pool(8, nullptr, 8, SegmentMap::Shape{4, 2, 0}, /*pool=*/true);
  const IndexCounts c = CountsOf(pool);
  EXPECT_EQ(c.rows_offline, 8u);
  EXPECT_EQ(c.rows_not_ready, 0u);
  EXPECT_EQ(c.rows_online(), 0u);
}

TEST(IndexCountsTest, NoRoomSaysWhereTheRowsAreAndWhenNotReadyOnesCome) {
  Stored stored(/*ready=*/4, /*stored=*/4);
  const absl::Status refused = NoRoom(stored.s, "PrepareStore", 6, /*evictable=*/3,
                                      /*protected_evictable=*/1);
  EXPECT_EQ(refused.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_TRUE(absl::StrContains(refused.message(),
                                "PrepareStore: 6 new keys need rows but only 3 can be found "
                                "(0 free, 3 evictable)"));
  EXPECT_TRUE(absl::StrContains(refused.message(), "4 not ready yet"));
  EXPECT_TRUE(absl::StrContains(refused.message(), "retry when Stats' rows_not_ready is 0"));
  Stored all_ready(/*ready=*/8, /*stored=*/8);
  EXPECT_FALSE(absl::StrContains(NoRoom(all_ready.s, "PrepareStore", 9, 8, 0).message(), "retry"));
}

}  // namespace
}  // namespace kvoffload::daemon
