// ErrnoStatus: a failed system call as an absl::Status, converted once at the edge (LevelDB's
// PosixError). The code follows the errno, so exhaustion is never confused with a bad request:
//
//   if (mkdir(dir.c_str(), 0750) != 0) return common::ErrnoStatus(errno, "mkdir " + dir);
//
// ENOMEM ENOSPC EMFILE ENFILE EAGAIN EFBIG EOVERFLOW EDQUOT EFAULT EHWPOISON → RESOURCE_EXHAUSTED
// EINVAL ENAMETOOLONG ENOTDIR EISDIR ELOOP EBADF                         → INVALID_ARGUMENT
// EPERM EACCES EROFS                                                      → PERMISSION_DENIED
// ENOENT ENODEV ENXIO                                                     → NOT_FOUND
// EEXIST EADDRINUSE                                                       → ALREADY_EXISTS
// EBUSY EWOULDBLOCK(=EAGAIN for locks is the caller's business)           → (RESOURCE_EXHAUSTED)
// ETIMEDOUT                                                               → DEADLINE_EXCEEDED
// EINTR ECONNREFUSED ECONNRESET EPIPE                                     → UNAVAILABLE
// ENOSYS EOPNOTSUPP                                                       → UNIMPLEMENTED
// anything else                                                           → INTERNAL
// EFAULT and EHWPOISON are exhaustion because MADV_POPULATE_WRITE reports a page that could not
// be faulted in (SIGBUS on shmem) that way. The message is "<context>: <strerror> (errno N)".
#ifndef KVOFFLOAD_COMMON_ERRNO_STATUS_H_
#define KVOFFLOAD_COMMON_ERRNO_STATUS_H_

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace kvoffload::common {

absl::StatusCode ErrnoToStatusCode(int err);
absl::Status ErrnoStatus(int err, absl::string_view context);

}  // namespace kvoffload::common

#endif  // KVOFFLOAD_COMMON_ERRNO_STATUS_H_
