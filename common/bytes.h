// Byte-size flags: "4096", "64KiB", "80GiB", "1TiB" (binary units; also KB/MB/GB as 1000^n).
#ifndef KVOFFLOAD_COMMON_BYTES_H_
#define KVOFFLOAD_COMMON_BYTES_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace kvoffload::common {

// INVALID_ARGUMENT for negatives, non-numbers, unknown suffixes and overflow.
absl::StatusOr<uint64_t> ParseBytes(absl::string_view text);
// "80 GiB", "18 KiB", "4097 B": exact binary units when they divide, else bytes.
std::string FormatBytes(uint64_t bytes);

}  // namespace kvoffload::common

#endif  // KVOFFLOAD_COMMON_BYTES_H_
