// The one validator of a job part: every rule with its exact status code, against a geometry of
// 8 rows of 2 blocks and a worker of 16 blocks and 4 events; and the runs it makes.
#include "daemon/engine/job_part.h"

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_format.h"
#include "common/error_info.h"
#include "common/refusals.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace kvoffload::daemon {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using Code = absl::StatusCode;

common::Geometry TwoBlockRows() {
  common::Geometry g;
  g.blocks_per_row = 2;
  g.num_rows = 8;
  return g;
}

constexpr PartBounds kBounds{/*region_epoch=*/42, /*worker_blocks=*/16, /*worker_events=*/4,
                             /*max_blocks_per_job=*/6};

uint64_t Handle(uint32_t ticket, uint64_t row) { return (uint64_t{ticket} << 32) | row; }

JobPart Store(std::vector<uint64_t> gpu_blocks, std::vector<uint64_t> rows) {
  JobPart p;
  p.job_id = 1;
  p.gpu_blocks = std::move(gpu_blocks);
  p.rows = std::move(rows);
  return p;
}

// Whole rows [row, row + num_rows) from gpu_block.
PartRun Rows(uint64_t gpu_block, uint64_t row, uint64_t num_rows) {
  return PartRun{gpu_block, row, num_rows, 0, 0};
}
// num_blocks blocks from block first_block of row.
PartRun Range(uint64_t gpu_block, uint64_t row, uint32_t first_block, uint64_t num_blocks) {
  return PartRun{gpu_block, row, 0, first_block, num_blocks};
}

JobPart Part(CopyDirection direction, std::vector<PartRun> runs) {
  JobPart p;
  p.job_id = 2;
  p.direction = direction;
  p.runs = std::move(runs);
  return p;
}

absl::StatusOr<ValidPart> Check(const JobPart& part, PartBounds bounds = kBounds) {
  return ValidatePart(part, TwoBlockRows(), bounds, "job");
}

TEST(JobPartTest, ValidPartsPass) {
  EXPECT_TRUE(Check(Store({0, 1, 14, 15}, {0, 7})).ok());
  EXPECT_TRUE(Check(Part(CopyDirection::kLoad, {Range(3, 0, 1, 3)})).ok());
  JobPart p = Store({0, 1}, {3});
  p.event_index = 3;
  p.region_epoch = 42;
  EXPECT_TRUE(Check(p).ok());
}

// Lists become one-row runs (entries consecutive on both sides merge); runs of rows and ranges
// stay one run each, however many blocks; rows carry their handles' tickets.
TEST(JobPartTest, ListsAndRunsBecomeRuns) {
  JobPart p = Store({4, 5, 6, 7, 9, 3}, {Handle(5, 1), Handle(5, 2), Handle(5, 6)});
  p.runs = {Rows(10, Handle(6, 3), 2)};
  auto valid = Check(p, PartBounds{42, 16, 4, 100});
  ASSERT_TRUE(valid.ok()) << valid.status();
  EXPECT_THAT(valid->runs, ElementsAre(CopyRun{4, 2, 4}, CopyRun{9, 12, 1}, CopyRun{3, 13, 1},
                                       CopyRun{10, 6, 4}));
  EXPECT_THAT(valid->rows, ElementsAre(RowRun{1, 2, 5}, RowRun{6, 1, 5}, RowRun{3, 2, 6}));
  EXPECT_EQ(valid->num_blocks, 10u);

  // A load: a whole row, then the tail of row 3 and the head of row 4 (region blocks 7..9).
  JobPart load = Part(CopyDirection::kLoad, {Rows(0, 1, 1), Range(10, Handle(7, 3), 1, 3)});
  valid = Check(load);
  ASSERT_TRUE(valid.ok()) << valid.status();
  EXPECT_THAT(valid->runs, ElementsAre(CopyRun{0, 2, 2}, CopyRun{10, 7, 3}));
  EXPECT_THAT(valid->rows, ElementsAre(RowRun{1, 1, 0}, RowRun{3, 2, 7}));

  // Ranges that share a row list it once (the first ticket kept), as the rows they lie in.
  load = Part(CopyDirection::kLoad, {Range(0, Handle(1, 2), 0, 1), Range(8, Handle(2, 2), 1, 2)});
  valid = Check(load);
  ASSERT_TRUE(valid.ok()) << valid.status();
  EXPECT_THAT(valid->runs, ElementsAre(CopyRun{0, 4, 1}, CopyRun{8, 5, 2}));
  EXPECT_THAT(valid->rows, ElementsAre(RowRun{2, 1, 1}, RowRun{3, 1, 2}));

  // Without ranges a row listed twice counts twice (a load may read a row twice).
  valid = Check(Store({0, 1, 2, 3}, {5, 5}));
  ASSERT_TRUE(valid.ok()) << valid.status();
  EXPECT_THAT(valid->rows, ElementsAre(RowRun{5, 1, 0}, RowRun{5, 1, 0}));
}

// Engines that assign rows themselves: rows are plain values, a ticket in one is out of range.
TEST(JobPartTest, PlainRowsWhereTheEngineAssignsThem) {
  PartBounds plain = kBounds;
  plain.row_handles = false;
  auto valid = Check(Store({0, 1}, {3}), plain);
  ASSERT_TRUE(valid.ok()) << valid.status();
  EXPECT_THAT(valid->rows, ElementsAre(RowRun{3, 1, 0}));
  EXPECT_EQ(Check(Store({0, 1}, {Handle(1, 3)}), plain).status().code(), Code::kOutOfRange);
  EXPECT_EQ(Check(Part(CopyDirection::kLoad, {Range(0, Handle(1, 3), 0, 1)}), plain)
                .status()
                .code(),
            Code::kOutOfRange);
}

TEST(JobPartTest, EveryRuleHasItsCode) {
  struct Case {
    JobPart part;
    Code code;
    const char* message;
  };
  std::vector<Case> cases;
  auto add = [&](JobPart p, Code code, const char* message) {
    cases.push_back({std::move(p), code, message});
  };
  const CopyDirection kLoad = CopyDirection::kLoad;
  // Shape: from the part alone.
  add(Part(kLoad, {Range(0, 1, 2, 1)}), Code::kInvalidArgument, "first_block");  // past the row
  add(Part(kLoad, {PartRun{0, 1, 1, 0, 2}}), Code::kInvalidArgument, "num_rows 0");  // both
  add(Part(kLoad, {PartRun{0, 1, 1, 1, 0}}), Code::kInvalidArgument, "first_block 0");
  add(Part(kLoad, {PartRun{0, 1, 0, 0, 0}}), Code::kInvalidArgument, "num_rows >= 1");  // none
  add(Part(kLoad, {Range(1, 0, 0, UINT64_MAX)}), Code::kInvalidArgument, "overflow");
  add(Part(kLoad, {Rows(0, UINT64_MAX, 2)}), Code::kInvalidArgument, "overflow");
  add(Part(kLoad, {Rows(0, 0, UINT64_MAX / 2 + 1)}), Code::kInvalidArgument, "overflow");
  add(Store({0, 1, 2, 3, 4, 5, 6, 7}, {0, 1, 2, 3}), Code::kInvalidArgument, "exceed the limit");
  add(Part(kLoad, {Rows(0, 0, 2), Range(0, 4, 0, 3)}), Code::kInvalidArgument, "exceed the limit");
  add(Part(CopyDirection::kStore, {Range(0, 1, 0, 2)}), Code::kInvalidArgument, "whole rows");
  // The region.
  JobPart epoch = Store({0, 1}, {0});
  epoch.region_epoch = 41;
  add(epoch, Code::kFailedPrecondition, "region epoch");
  // Lists.
  add(Store({}, {}), Code::kInvalidArgument, "no rows");
  add(Store({0, 1, 2}, {0}), Code::kInvalidArgument, "want 2");
  // Bounds.
  add(Store({0, 16}, {0}), Code::kOutOfRange, "gpu block 16");
  add(Part(kLoad, {Rows(15, 0, 1)}), Code::kOutOfRange, "gpu block 16");
  add(Part(kLoad, {Range(14, 0, 0, 3)}), Code::kOutOfRange, "gpu block 16");
  add(Store({0, 1}, {8}), Code::kOutOfRange, "row 8");
  add(Store({0, 1}, {Handle(3, 8)}), Code::kOutOfRange, "row 8");
  add(Part(kLoad, {Rows(0, 7, 2)}), Code::kOutOfRange, "row 8");
  add(Part(kLoad, {Range(0, 8, 0, 1)}), Code::kOutOfRange, "region block 16");
  add(Part(kLoad, {Range(0, 7, 1, 2)}), Code::kOutOfRange, "region block 16");
  // The event pool.
  JobPart event = Store({0, 1}, {0});
  event.event_index = 4;
  add(event, Code::kInvalidArgument, "event index 4");
  event.event_index = -2;
  add(event, Code::kInvalidArgument, "event index -2");
  for (const Case& c : cases) {
    const absl::Status s = Check(c.part).status();
    EXPECT_EQ(s.code(), c.code) << s;
    EXPECT_THAT(s.message(), HasSubstr(c.message)) << s;
  }
}

// The epoch rule is common::CheckRegionEpoch's: its reason and both epochs reach the worker.
TEST(JobPartTest, AnotherRegionEpochIsRefusedWithItsReason) {
  JobPart part = Store({0, 1}, {0});
  part.region_epoch = kBounds.region_epoch + 1;
  const absl::Status s = Check(part).status();
  EXPECT_EQ(s.code(), Code::kFailedPrecondition) << s;
  const common::ErrorInfo info = common::ErrorInfoOf(s);
  EXPECT_EQ(info.reason, common::reason::kRegionEpochMismatch);
  EXPECT_EQ(info.metadata.at("planned_epoch"), absl::StrFormat("%x", part.region_epoch));
  EXPECT_EQ(info.metadata.at("region_epoch"), absl::StrFormat("%x", kBounds.region_epoch));
  part.region_epoch = 0;  // not checked
  EXPECT_TRUE(Check(part).ok());
}

// Every wire integer of a part at the extremes (0, 2^32±1, 2^63, 2^64-1 and the bounds' edges):
// a part is refused, or every copy it makes lies inside the worker's blocks and the region. A
// wrapped bound check (gpu_block + 1 == 0 for 2^64-1) used to let such a part through.
TEST(JobPartTest, ExtremeIntegersNeverPassOutOfBounds) {
  const std::vector<uint64_t> extremes = {0,          1,          7,          8,
                                          15,         16,         (1ull << 32) - 1,
                                          1ull << 32, (1ull << 32) + 1,       1ull << 63,
                                          UINT64_MAX - 1, UINT64_MAX};
  const common::Geometry g = TwoBlockRows();
  const uint64_t region_blocks = g.num_rows * g.blocks_per_row;
  int accepted = 0;
  int checked = 0;
  auto expect_in_bounds = [&](const JobPart& p) {
    ++checked;
    absl::StatusOr<ValidPart> v = Check(p, PartBounds{42, 16, 4, 100});
    if (!v.ok()) {
      EXPECT_TRUE(v.status().code() == Code::kInvalidArgument ||
                  v.status().code() == Code::kOutOfRange)
          << v.status();
      return;
    }
    ++accepted;
    for (const CopyRun& r : v->runs) {
      EXPECT_LE(r.num_blocks, 16u);
      EXPECT_LE(r.gpu_block, 16 - r.num_blocks) << r.gpu_block << "+" << r.num_blocks;
      EXPECT_LE(r.num_blocks, region_blocks);
      EXPECT_LE(r.region_block, region_blocks - r.num_blocks);
    }
  };
  for (uint64_t a : extremes) {
    // A listed block, in either position of the row, and a listed row.
    expect_in_bounds(Store({a, 1}, {0}));
    expect_in_bounds(Store({0, a}, {0}));
    expect_in_bounds(Store({0, 1}, {a}));
    for (uint64_t b : extremes) {
      expect_in_bounds(Part(CopyDirection::kLoad, {Rows(a, b, 1)}));
      expect_in_bounds(Part(CopyDirection::kLoad, {Rows(0, a, b)}));
      expect_in_bounds(Part(CopyDirection::kLoad, {Range(a, b, 0, 1)}));
      expect_in_bounds(Part(CopyDirection::kLoad, {Range(a, 0, 1, b)}));
      expect_in_bounds(Part(CopyDirection::kLoad, {Range(0, a, 1, b)}));
      expect_in_bounds(Part(CopyDirection::kStore, {Rows(a, 0, b)}));
    }
    JobPart event = Store({0, 1}, {0});
    event.event_index = static_cast<int64_t>(a);
    expect_in_bounds(event);
  }
  // The exact case: 2^64-1 as a listed block is OUT_OF_RANGE, as 16 is.
  const absl::Status s = Check(Store({UINT64_MAX, 1}, {0})).status();
  EXPECT_EQ(s.code(), Code::kOutOfRange) << s;
  EXPECT_THAT(s.message(), HasSubstr("gpu block 18446744073709551615 >= registered 16"));
  EXPECT_GT(accepted, 10);  // the sweep also reaches parts that are valid
  EXPECT_EQ(checked, 12 * 4 + 12 * 12 * 6);
}

// The shape comes first: a bad run is INVALID_ARGUMENT even in a part of another epoch.
TEST(JobPartTest, ShapeIsCheckedBeforeTheEpoch) {
  JobPart p = Part(CopyDirection::kStore, {Range(0, 1, 0, 1)});
  p.region_epoch = 41;
  EXPECT_EQ(Check(p).status().code(), Code::kInvalidArgument);
}

// A million blocks in one run are one run, checked in O(1).
TEST(JobPartTest, AMillionBlocksAreOneRun) {
  common::Geometry g;
  g.blocks_per_row = 1;
  g.num_rows = 1 << 20;
  auto valid = ValidatePart(Part(CopyDirection::kStore, {Rows(0, 0, 1 << 20)}), g,
                            PartBounds{0, 1 << 20, 0, 1 << 20}, "job");
  ASSERT_TRUE(valid.ok()) << valid.status();
  EXPECT_THAT(valid->runs, ElementsAre(CopyRun{0, 0, 1 << 20}));
  EXPECT_THAT(valid->rows, ElementsAre(RowRun{0, 1 << 20, 0}));
}

}  // namespace
}  // namespace kvoffload::daemon
