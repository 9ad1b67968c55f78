// The Submit edge: the wire's lists and runs become one JobPart as sent, nothing expanded (the
// rules are ValidatePart's, engine/job_part_test.cc); EngineStats' row states add up.
#include "daemon/service/convert.h"

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace kvoffload::daemon {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

TEST(ConvertSubmitTest, ListsAndRunsAreCopiedAsSent) {
  v1::Submit s;
  s.set_job_id(9);
  s.set_direction(v1::DIRECTION_LOAD);
  s.add_gpu_blocks(0);
  s.add_gpu_blocks(1);
  s.add_rows(7);
  v1::BlockRun* rows = s.add_runs();
  rows->set_gpu_block(10);
  rows->set_row(4);
  rows->set_num_rows(1u << 20);  // a million rows stay one run
  v1::BlockRun* range = s.add_runs();
  range->set_gpu_block(20);
  range->set_row(3);
  range->set_first_block(2);
  range->set_num_blocks(3);
  s.set_event_index(2);
  s.set_region_epoch(77);
  auto part = FromProto(s);
  ASSERT_TRUE(part.ok()) << part.status();
  EXPECT_EQ(part->job_id, 9u);
  EXPECT_EQ(part->direction, CopyDirection::kLoad);
  EXPECT_THAT(part->gpu_blocks, ElementsAre(0, 1));
  EXPECT_THAT(part->rows, ElementsAre(7));
  ASSERT_EQ(part->runs.size(), 2u);
  EXPECT_EQ(part->runs[0].gpu_block, 10u);
  EXPECT_EQ(part->runs[0].row, 4u);
  EXPECT_EQ(part->runs[0].num_rows, 1u << 20);
  EXPECT_EQ(part->runs[1].first_block, 2u);
  EXPECT_EQ(part->runs[1].num_blocks, 3u);
  EXPECT_EQ(part->event_index, 2);
  EXPECT_EQ(part->region_epoch, 77u);
}

TEST(ConvertSubmitTest, DirectionMustBeStoreOrLoad) {
  v1::Submit s;
  s.set_job_id(3);
  auto part = FromProto(s);
  EXPECT_EQ(part.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(part.status().message(), HasSubstr("direction"));
}

// EngineStats' states add up to num_rows: for a pool member, the pool's rows online (its
// members' regions, rows still being pinned among them), not the pool's maximum capacity.
TEST(ConvertStatsTest, RowStatesAddUpToNumRows) {
  struct Case {
    const char* what;
    SlotIndex::Counts counts;
    uint64_t num_rows;
  };
  auto counts = [](uint64_t num_rows, uint64_t offline, uint64_t not_ready) {
    SlotIndex::Counts c;
    c.num_rows = num_rows;
    c.rows_offline = offline;
    c.rows_not_ready = not_ready;
    c.rows_free = 3;
    c.rows_quarantined = 1;
    c.rows_writing = 2;
    c.rows_ready = 4;
    c.rows_reading = 1;
    c.rows_free += num_rows - offline - not_ready - 11;
    return c;
  };
  const Case cases[] = {
      {"a private engine", counts(64, 0, 0), 64},
      {"a private engine being pinned", counts(64, 0, 40), 64},
      {"a pool of 2 of 8 members, one being pinned", counts(8 * 16, 6 * 16, 10), 32},
  };
  for (const Case& c : cases) {
    EngineSnapshot snap;
    snap.index = c.counts;
    v1::EngineStats stats;
    ToProto(snap, &stats);
    EXPECT_EQ(stats.num_rows(), c.num_rows) << c.what;
    EXPECT_EQ(stats.rows_free() + stats.rows_quarantined() + stats.rows_writing() +
                  stats.rows_ready() + stats.rows_reading() + stats.rows_not_ready(),
              stats.num_rows())
        << c.what;
  }
}

}  // namespace
}  // namespace kvoffload::daemon
