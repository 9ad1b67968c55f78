#include "daemon/engine/engine_admission.h"

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "gtest/gtest.h"

namespace kvoffload::daemon {
namespace {

TEST(EngineAdmissionTest, TheEngineCountRefusesAtTheLimitNamingTheFlag) {
  EXPECT_TRUE(CheckEngineCount("e/0", 2, 3).ok());
  const absl::Status refused = CheckEngineCount("e/0", 3, 3);
  EXPECT_EQ(refused.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_TRUE(absl::StrContains(refused.message(), "engine e/0 refused: 3 engines exist"));
  EXPECT_TRUE(absl::StrContains(refused.message(), "--max_engines"));
}

TEST(EngineAdmissionTest, DescriptorsMustStayFreeBelowTheSoftLimit) {
  common::FdUsage fds;
  fds.open = 700;
  fds.soft_limit = 1024;
  EXPECT_TRUE(CheckFdHeadroom("e/0", fds, 324).ok());  // exactly enough stay free
  const absl::Status refused = CheckFdHeadroom("e/0", fds, 325);
  EXPECT_EQ(refused.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_TRUE(absl::StrContains(refused.message(), "700 of 1024 file descriptors"));
  EXPECT_TRUE(absl::StrContains(refused.message(), "--min_free_fds"));
  fds.open = 2000;  // over the limit already (it was lowered)
  EXPECT_EQ(CheckFdHeadroom("e/0", fds, 0).code(), absl::StatusCode::kResourceExhausted);
}

TEST(EngineAdmissionTest, AnUnlimitedSoftLimitNeverRefuses) {
  common::FdUsage fds;
  fds.open = 1 << 20;
  fds.soft_limit = UINT64_MAX;
  EXPECT_TRUE(CheckFdHeadroom("e/0", fds, UINT64_MAX).ok());
}

}  // namespace
}  // namespace kvoffload::daemon
