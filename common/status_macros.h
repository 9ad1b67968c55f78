// Tiny status macros: Debian's Abseil (20220623) has none of its own.
//
//   RETURN_IF_ERROR(region.Populate());
//   ASSIGN_OR_RETURN(Geometry g, ComputeGeometry(spec));
#ifndef KVOFFLOAD_COMMON_STATUS_MACROS_H_
#define KVOFFLOAD_COMMON_STATUS_MACROS_H_

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#define KVO_CONCAT_INNER_(a, b) a##b
#define KVO_CONCAT_(a, b) KVO_CONCAT_INNER_(a, b)

#define RETURN_IF_ERROR(expr)                  \
  do {                                         \
    ::absl::Status kvo_status_ = (expr);       \
    if (!kvo_status_.ok()) return kvo_status_; \
  } while (0)

#define KVO_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr) \
  auto tmp = (expr);                               \
  if (!tmp.ok()) return tmp.status();              \
  lhs = std::move(tmp).value()

#define ASSIGN_OR_RETURN(lhs, expr) \
  KVO_ASSIGN_OR_RETURN_IMPL_(KVO_CONCAT_(kvo_statusor_, __LINE__), lhs, expr)

#endif  // KVOFFLOAD_COMMON_STATUS_MACROS_H_
