#include "common/refusals.h"

#include <string>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/error_info.h"
#include "gtest/gtest.h"

namespace kvoffload::common {
namespace {

using Metadata = std::map<std::string, std::string>;

TEST(RefusalsTest, RegionEpochCheckPassesUncheckedAndEqualEpochs) {
  EXPECT_TRUE(CheckRegionEpoch("engine e/0", 0, 0x2b).ok());  // 0: not checked
  EXPECT_TRUE(CheckRegionEpoch("engine e/0", 0x2b, 0x2b).ok());
}

TEST(RefusalsTest, RegionEpochMismatchCarriesBothEpochs) {
  absl::Status s = CheckRegionEpoch("engine e/0", 0x2b, 0x2c);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  ErrorInfo info = ErrorInfoOf(s);
  EXPECT_EQ(info.reason, "region_epoch_mismatch");
  EXPECT_EQ(info.metadata, (Metadata{{"planned_epoch", "2b"}, {"region_epoch", "2c"}}));
  EXPECT_TRUE(absl::StartsWith(s.message(), "engine e/0: planned against region epoch 2b, but "))
      << s.message();

  absl::Status gone = CheckRegionEpoch("job 7", 0x2b, 0);  // the region no longer exists
  EXPECT_EQ(gone.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(ErrorInfoOf(gone).metadata,
            (Metadata{{"planned_epoch", "2b"}, {"region_epoch", "0"}}));
}

TEST(RefusalsTest, EachConstructorGivesItsReasonCodeAndMetadata) {
  absl::Status engine = EngineNotFound("e/1", " on this node");
  EXPECT_EQ(engine.code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(engine.message(), "no engine e/1 on this node");
  EXPECT_EQ(ErrorReason(engine), reason::kEngineNotFound);
  EXPECT_EQ(ErrorInfoOf(engine).metadata, (Metadata{{"engine", "e/1"}}));

  absl::Status key = KeyNotInIndex("complete_store", 3, "key #3 (61)");
  EXPECT_EQ(key.code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(key.message(), "complete_store: key #3 (61) is not in the index");
  EXPECT_EQ(ErrorInfoOf(key).metadata,
            (Metadata{{"key_index", "3"}, {"operation", "complete_store"}}));
  EXPECT_EQ(ErrorReason(key), "key_not_in_index");

  absl::Status spec = SpecMismatch("e/0", "existing {a} requested {b}");
  EXPECT_EQ(spec.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(ErrorReason(spec), "spec_mismatch");

  absl::Status rule =
      SpecRule(absl::StatusCode::kFailedPrecondition, "no_pipeline_parallel", "pp 2");
  EXPECT_EQ(rule.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(rule.message(), "rule no_pipeline_parallel: pp 2");
  EXPECT_EQ(ErrorReason(rule), "spec_rule");
  EXPECT_EQ(ErrorInfoOf(rule).metadata, (Metadata{{"rule", "no_pipeline_parallel"}}));
}

TEST(ErrorInfoTest, AnnotatedKeepsCodeAndReason) {
  absl::Status s = EngineNotFound("e/0");
  absl::Status wrapped = Annotated(s, absl::StrCat(s.message(), " (lookup of 3 keys)"));
  EXPECT_EQ(wrapped.code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(wrapped.message(), "no engine e/0 (lookup of 3 keys)");
  EXPECT_EQ(ErrorReason(wrapped), "engine_not_found");
}

TEST(ErrorInfoTest, NoReasonOkAndGarbage) {
  EXPECT_EQ(ErrorReason(absl::InternalError("x")), "");
  EXPECT_TRUE(WithErrorInfo(absl::OkStatus(), {"spec_rule", {}}).ok());
  absl::Status garbage = WithErrorInfoBytes(absl::InternalError("x"), std::string("\xff\xff", 2));
  EXPECT_EQ(ErrorReason(garbage), "");  // a payload that does not parse names no reason
}

TEST(ErrorInfoTest, MetadataTextIsSortedLinesWithoutNewlinesInValues) {
  absl::Status s = WithErrorInfo(absl::InternalError("x"), {"r", {{"b", "2\n3"}, {"a", "1"}}});
  EXPECT_EQ(MetadataText(ErrorInfoOf(s)), "a=1\nb=2 3\n");
}

}  // namespace
}  // namespace kvoffload::common
