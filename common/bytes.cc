#include "common/bytes.h"

#include <cctype>
#include <limits>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace kvoffload::common {

absl::StatusOr<uint64_t> ParseBytes(absl::string_view text) {
  absl::string_view s = absl::StripAsciiWhitespace(text);
  size_t digits = 0;
  while (digits < s.size() && std::isdigit(static_cast<unsigned char>(s[digits]))) ++digits;
  uint64_t value = 0;
  if (digits == 0 || !absl::SimpleAtoi(s.substr(0, digits), &value)) {
    return absl::InvalidArgumentError(
        absl::StrCat("'", text, "' is not a byte size (want e.g. 4096, 64KiB, 80GiB)"));
  }
  const std::string unit = absl::AsciiStrToLower(absl::StripAsciiWhitespace(s.substr(digits)));
  uint64_t scale = 1;
  if (unit.empty() || unit == "b")
    scale = 1;
  else if (unit == "kib" || unit == "k")
    scale = uint64_t{1} << 10;
  else if (unit == "mib" || unit == "m")
    scale = uint64_t{1} << 20;
  else if (unit == "gib" || unit == "g")
    scale = uint64_t{1} << 30;
  else if (unit == "tib" || unit == "t")
    scale = uint64_t{1} << 40;
  else if (unit == "kb")
    scale = 1000;
  else if (unit == "mb")
    scale = 1000 * 1000;
  else if (unit == "gb")
    scale = 1000 * 1000 * 1000;
  else if (unit == "tb")
    scale = uint64_t{1000} * 1000 * 1000 * 1000;
  else {
    return absl::InvalidArgumentError(
        absl::StrCat("'", text, "': unknown unit '", unit, "' (want B, KiB, MiB, GiB, TiB)"));
  }
  if (value > std::numeric_limits<uint64_t>::max() / scale) {
    return absl::InvalidArgumentError(absl::StrCat("'", text, "' overflows 64 bits"));
  }
  return value * scale;
}

std::string FormatBytes(uint64_t bytes) {
  static const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int unit = 0;
  while (unit < 4 && bytes != 0 && bytes % 1024 == 0) {
    bytes /= 1024;
    ++unit;
  }
  return absl::StrCat(bytes, " ", kUnits[unit]);
}

}  // namespace kvoffload::common
