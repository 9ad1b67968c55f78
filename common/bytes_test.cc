#include "common/bytes.h"

#include "gtest/gtest.h"

namespace kvoffload::common {
namespace {

TEST(BytesTest, ParsesBinaryAndDecimalUnits) {
  EXPECT_EQ(*ParseBytes("4096"), 4096u);
  EXPECT_EQ(*ParseBytes("64KiB"), 65536u);
  EXPECT_EQ(*ParseBytes("80GiB"), uint64_t{80} << 30);
  EXPECT_EQ(*ParseBytes("1 TiB"), uint64_t{1} << 40);
  EXPECT_EQ(*ParseBytes("2MB"), 2000000u);
  EXPECT_EQ(*ParseBytes("0"), 0u);
}

TEST(BytesTest, RejectsBadInput) {
  for (const char* bad :
       {"", "-1", "abc", "12XB", "1.5GiB", "99999999999999999999", "20000000TiB"}) {
    auto parsed = ParseBytes(bad);
    EXPECT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument) << bad;
  }
}

TEST(BytesTest, Formats) {
  EXPECT_EQ(FormatBytes(uint64_t{80} << 30), "80 GiB");
  EXPECT_EQ(FormatBytes(18432), "18 KiB");
  EXPECT_EQ(FormatBytes(4097), "4097 B");
  EXPECT_EQ(FormatBytes(0), "0 B");
}

}  // namespace
}  // namespace kvoffload::common
