// Tests for the JSON writer: string escaping (control characters, quotes, UTF-8 kept, invalid
// UTF-8 replaced), numbers that read back exactly, and key order.
#include "client/ctl/json_writer.h"

#include <cmath>
#include <limits>
#include <string>

#include "gtest/gtest.h"

namespace kvoffload::client::ctl {
namespace {

TEST(JsonQuoteTest, PlainText) { EXPECT_EQ(JsonQuote("llama-3.1_8b"), "\"llama-3.1_8b\""); }

TEST(JsonQuoteTest, EscapesQuoteBackslashAndShortControls) {
  EXPECT_EQ(JsonQuote("a\"b\\c/d"), "\"a\\\"b\\\\c/d\"");
  EXPECT_EQ(JsonQuote("\n\r\t\b\f"), "\"\\n\\r\\t\\b\\f\"");
}

TEST(JsonQuoteTest, EscapesOtherControlsAsUnicode) {
  EXPECT_EQ(JsonQuote(std::string("\x01\x1f", 2)), "\"\\u0001\\u001f\"");
  EXPECT_EQ(JsonQuote(std::string("a\0b", 3)), "\"a\\u0000b\"");
  EXPECT_EQ(JsonQuote("\x7f"), "\"\x7f\"");  // DEL needs no escape
}

TEST(JsonQuoteTest, KeepsValidUtf8) {
  EXPECT_EQ(JsonQuote("µs"), "\"µs\"");                  // 2 bytes
  EXPECT_EQ(JsonQuote("\xE2\x82\xAC"), "\"\xE2\x82\xAC\"");  // € (3 bytes)
  EXPECT_EQ(JsonQuote("\xF0\x9F\x98\x80"), "\"\xF0\x9F\x98\x80\"");  // U+1F600 (4 bytes)
}

TEST(JsonQuoteTest, ReplacesInvalidUtf8) {
  EXPECT_EQ(JsonQuote("a\xFFz"), "\"a\\ufffdz\"");            // never valid
  EXPECT_EQ(JsonQuote("\xC3"), "\"\\ufffd\"");                // truncated at the end
  EXPECT_EQ(JsonQuote("\xC3(x"), "\"\\ufffd(x\"");            // bad continuation
  EXPECT_EQ(JsonQuote("\xC0\xAF"), "\"\\ufffd\\ufffd\"");     // overlong '/'
  EXPECT_EQ(JsonQuote("\xED\xA0\x80"), "\"\\ufffd\\ufffd\\ufffd\"");  // surrogate D800
  EXPECT_EQ(JsonQuote("\xF4\x90\x80\x80"), "\"\\ufffd\\ufffd\\ufffd\\ufffd\"");  // > U+10FFFF
}

TEST(JsonDoubleTest, ShortestThatReadsBack) {
  EXPECT_EQ(JsonDouble(0), "0");
  EXPECT_EQ(JsonDouble(1.5), "1.5");
  EXPECT_EQ(JsonDouble(0.1), "0.1");
  EXPECT_EQ(JsonDouble(123456.789), "123456.789");
  EXPECT_EQ(JsonDouble(1e300), "1e+300");
  const double third = 1.0 / 3;
  EXPECT_EQ(std::stod(JsonDouble(third)), third);
}

TEST(JsonDoubleTest, NonFiniteIsNull) {
  EXPECT_EQ(JsonDouble(std::nan("")), "null");
  EXPECT_EQ(JsonDouble(std::numeric_limits<double>::infinity()), "null");
  EXPECT_EQ(JsonDouble(-std::numeric_limits<double>::infinity()), "null");
}

TEST(JsonObjectWriterTest, KeysInOrderWithEveryKind) {
  JsonObjectWriter inner;
  inner.Uint("0", 7);
  JsonObjectWriter json;
  json.String("s", "x\"y");
  json.Uint("u", 18446744073709551615ull);
  json.Int("i", -3);
  json.Double("d", 2.25);
  json.Bool("t", true);
  json.Bool("f", false);
  json.Raw("o", std::move(inner).Close());
  json.Raw("a", JsonArray({"1", "{}"}));
  json.Raw("e", JsonArray({}));
  EXPECT_EQ(std::move(json).Close(),
            "{\"s\":\"x\\\"y\",\"u\":18446744073709551615,\"i\":-3,\"d\":2.25,\"t\":true,"
            "\"f\":false,\"o\":{\"0\":7},\"a\":[1,{}],\"e\":[]}");
}

TEST(JsonObjectWriterTest, EmptyObjectAndEscapedKey) {
  EXPECT_EQ(JsonObjectWriter().Close(), "{}");
  JsonObjectWriter json;
  json.Uint("a\nb", 1);
  EXPECT_EQ(std::move(json).Close(), "{\"a\\nb\":1}");
}

}  // namespace
}  // namespace kvoffload::client::ctl
