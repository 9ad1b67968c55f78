// KVO_CHECK: an invariant of ours that must hold in every build (STYLE.md: invariant checks stop
// the process, with the state logged). Unlike assert it survives -DNDEBUG; never use it on input
// from a client (that gets a Status). The message (absl::StrCat arguments) says the state.
//
//   KVO_CHECK(cursor != sentinel_, "no evictable row although ", available, " were counted");
#ifndef KVOFFLOAD_COMMON_CHECK_H_
#define KVOFFLOAD_COMMON_CHECK_H_

#include <string>

#include "absl/strings/str_cat.h"

namespace kvoffload::common {

// Writes "file:line: check failed: condition: message" to stderr and aborts.
[[noreturn]] void CheckFailed(const char* file, int line, const char* condition,
                              const std::string& message);

}  // namespace kvoffload::common

#define KVO_CHECK(condition, ...)                                                        \
  do {                                                                                   \
    if (!(condition)) {                                                                  \
      ::kvoffload::common::CheckFailed(__FILE__, __LINE__, #condition,                   \
                                       ::absl::StrCat(__VA_ARGS__));                     \
    }                                                                                    \
  } while (0)

#endif  // KVOFFLOAD_COMMON_CHECK_H_
