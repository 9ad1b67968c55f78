#include "daemon/tier/direct_files.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>

#include "absl/strings/str_cat.h"
#include "common/errno_status.h"

namespace kvoffload::tier {

absl::StatusOr<int> DirectFileBlockIo::OpenFile(const std::string& path) {
  const int fd = open(path.c_str(), O_RDWR | O_CREAT | O_DIRECT | O_CLOEXEC, 0600);
  if (fd >= 0) return fd;
  const int err = errno;
  if (err == EINVAL) {
    return absl::InvalidArgumentError(
        absl::StrCat("open ", path, " with O_DIRECT: the file system does not support direct I/O "
                     "(tmpfs?); the disk tier never uses the page cache"));
  }
  return common::ErrnoStatus(err, "open " + path);
}

absl::Status DirectFileBlockIo::Preallocate(int fd, uint64_t bytes) {
  // Mode 0: blocks reserved and the size extended; later writes need no allocation (no ENOSPC).
  // fallocate(2), not posix_fallocate: glibc's emulation writes zeros through the page cache.
  if (fallocate(fd, 0, 0, static_cast<off_t>(bytes)) != 0) {
    return common::ErrnoStatus(errno, absl::StrCat("fallocate ", bytes, " bytes"));
  }
  return absl::OkStatus();
}

absl::StatusOr<uint64_t> DirectFileBlockIo::FileSize(int fd) {
  struct stat st {};
  if (fstat(fd, &st) != 0) return common::ErrnoStatus(errno, "fstat");
  return static_cast<uint64_t>(st.st_size);
}

absl::Status DirectFileBlockIo::Sync(int fd) {
  if (fdatasync(fd) != 0) return common::ErrnoStatus(errno, "fdatasync");
  return absl::OkStatus();
}

void DirectFileBlockIo::CloseFile(int fd) { close(fd); }

}  // namespace kvoffload::tier
