// Tests for TextTable: widths in code points, alignment, no trailing spaces.
#include "client/ctl/text_table.h"

#include "gtest/gtest.h"

namespace kvoffload::client::ctl {
namespace {

TEST(TextTableTest, AlignsTextLeftAndNumbersRight) {
  TextTable table({{"engine", Align::kLeft}, {"rows"}, {"note", Align::kLeft}});
  table.AddRow({"llama/0", "4096", "x"});
  table.AddRow({"a/12", "7", ""});
  EXPECT_EQ(table.Render(),
            "engine   rows  note\n"
            "llama/0  4096  x\n"
            "a/12        7\n");
}

TEST(TextTableTest, CountsUtf8CodePoints) {
  TextTable table({{"p50/p99 µs"}});
  table.AddRow({"1/2"});
  EXPECT_EQ(table.Render(),
            "p50/p99 µs\n"
            "       1/2\n");
}

TEST(TextTableTest, WithoutHeaderAndShortRows) {
  TextTable table({{"", Align::kLeft}, {"", Align::kLeft}});
  table.AddRow({"backend", "host"});
  table.AddRow({"uptime"});
  EXPECT_EQ(table.Render(/*with_header=*/false),
            "backend  host\n"
            "uptime\n");
}

}  // namespace
}  // namespace kvoffload::client::ctl
