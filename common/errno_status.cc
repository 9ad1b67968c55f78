#include "common/errno_status.h"

#include <errno.h>
#include <string.h>

#include "absl/strings/str_cat.h"

namespace kvoffload::common {

absl::StatusCode ErrnoToStatusCode(int err) {
  switch (err) {
    case ENOMEM:
    case ENOSPC:
    case EMFILE:
    case ENFILE:
    case EAGAIN:
    case EFBIG:
    case EOVERFLOW:
    case EDQUOT:
    case EFAULT:
    case EHWPOISON:
    case EBUSY:
      return absl::StatusCode::kResourceExhausted;
    case EINVAL:
    case ENAMETOOLONG:
    case ENOTDIR:
    case EISDIR:
    case ELOOP:
    case EBADF:
      return absl::StatusCode::kInvalidArgument;
    case EPERM:
    case EACCES:
    case EROFS:
      return absl::StatusCode::kPermissionDenied;
    case ENOENT:
    case ENODEV:
    case ENXIO:
      return absl::StatusCode::kNotFound;
    case EEXIST:
    case EADDRINUSE:
      return absl::StatusCode::kAlreadyExists;
    case ETIMEDOUT:
      return absl::StatusCode::kDeadlineExceeded;
    case EINTR:
    case ECONNREFUSED:
    case ECONNRESET:
    case EPIPE:
      return absl::StatusCode::kUnavailable;
    case ENOSYS:
    case EOPNOTSUPP:
      return absl::StatusCode::kUnimplemented;
    default:
      return absl::StatusCode::kInternal;
  }
}

absl::Status ErrnoStatus(int err, absl::string_view context) {
  char buffer[256];
  // GNU strerror_r returns the message (possibly not in buffer); thread-safe unlike strerror.
  const char* text = strerror_r(err, buffer, sizeof(buffer));
  return absl::Status(ErrnoToStatusCode(err),
                      absl::StrCat(context, ": ", text, " (errno ", err, ")"));
}

}  // namespace kvoffload::common
