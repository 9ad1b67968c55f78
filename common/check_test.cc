#include "common/check.h"

#include "gtest/gtest.h"

namespace kvoffload::common {
namespace {

TEST(CheckDeathTest, AFailedCheckAbortsWithItsStateInEveryBuild) {
  const int rows = 3;
  EXPECT_DEATH(KVO_CHECK(rows == 4, "counted ", rows, " rows"),
               "check failed: rows == 4: counted 3 rows");
  KVO_CHECK(rows == 3, "never printed");
}

}  // namespace
}  // namespace kvoffload::common
