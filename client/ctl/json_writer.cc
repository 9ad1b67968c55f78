#include "client/ctl/json_writer.h"

#include <cmath>
#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"

namespace kvoffload::client::ctl {
namespace {

// Length of the well-formed UTF-8 sequence at the start of `s` (RFC 3629: no overlongs, no
// surrogates, nothing above U+10FFFF), or 0 when it is not one.
size_t Utf8SequenceLength(absl::string_view s) {
  const auto byte = [&](size_t i) { return static_cast<unsigned char>(s[i]); };
  const auto continuation = [&](size_t i) { return i < s.size() && (byte(i) & 0xC0) == 0x80; };
  const unsigned char b0 = byte(0);
  if (b0 < 0x80) return 1;
  if (b0 >= 0xC2 && b0 <= 0xDF) return continuation(1) ? 2 : 0;
  if (b0 >= 0xE0 && b0 <= 0xEF) {
    if (!continuation(1) || !continuation(2)) return 0;
    if (b0 == 0xE0 && byte(1) < 0xA0) return 0;   // overlong
    if (b0 == 0xED && byte(1) >= 0xA0) return 0;  // surrogate
    return 3;
  }
  if (b0 >= 0xF0 && b0 <= 0xF4) {
    if (!continuation(1) || !continuation(2) || !continuation(3)) return 0;
    if (b0 == 0xF0 && byte(1) < 0x90) return 0;   // overlong
    if (b0 == 0xF4 && byte(1) >= 0x90) return 0;  // above U+10FFFF
    return 4;
  }
  return 0;
}

}  // namespace

std::string JsonQuote(absl::string_view text) {
  std::string out = "\"";
  out.reserve(text.size() + 2);
  size_t i = 0;
  while (i < text.size()) {
    const unsigned char c = static_cast<unsigned char>(text[i]);
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      default:
        if (c < 0x20) {
          absl::StrAppendFormat(&out, "\\u%04x", c);
        } else if (c < 0x80) {
          out.push_back(static_cast<char>(c));
        } else {
          const size_t n = Utf8SequenceLength(text.substr(i));
          if (n == 0) {
            out += "\\ufffd";
          } else {
            out.append(text.data() + i, n);
            i += n - 1;
          }
        }
    }
    ++i;
  }
  out.push_back('"');
  return out;
}

std::string JsonDouble(double value) {
  if (!std::isfinite(value)) return "null";
  std::string text = absl::StrFormat("%.15g", value);
  if (std::strtod(text.c_str(), nullptr) != value) text = absl::StrFormat("%.17g", value);
  return text;
}

std::string JsonArray(const std::vector<std::string>& elements) {
  return absl::StrCat("[", absl::StrJoin(elements, ","), "]");
}

void JsonObjectWriter::Key(absl::string_view key) {
  if (json_.size() > 1) json_.push_back(',');
  absl::StrAppend(&json_, JsonQuote(key), ":");
}

void JsonObjectWriter::String(absl::string_view key, absl::string_view value) {
  Key(key);
  json_ += JsonQuote(value);
}

void JsonObjectWriter::Uint(absl::string_view key, uint64_t value) {
  Key(key);
  absl::StrAppend(&json_, value);
}

void JsonObjectWriter::Int(absl::string_view key, int64_t value) {
  Key(key);
  absl::StrAppend(&json_, value);
}

void JsonObjectWriter::Double(absl::string_view key, double value) {
  Key(key);
  json_ += JsonDouble(value);
}

void JsonObjectWriter::Bool(absl::string_view key, bool value) {
  Key(key);
  json_ += value ? "true" : "false";
}

void JsonObjectWriter::Raw(absl::string_view key, absl::string_view json) {
  Key(key);
  absl::StrAppend(&json_, json);
}

std::string JsonObjectWriter::Close() && {
  json_.push_back('}');
  return std::move(json_);
}

}  // namespace kvoffload::client::ctl
