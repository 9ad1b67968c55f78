// DirectFileBlockIo: the file half of BlockIo (open with O_DIRECT, fallocate, size, fdatasync,
// close) on plain POSIX calls, shared by the io_uring and the pread/pwrite implementations,
// which add Submit. Thread-safe: each call is one system call on its own arguments.
#ifndef KVOFFLOAD_DAEMON_TIER_DIRECT_FILES_H_
#define KVOFFLOAD_DAEMON_TIER_DIRECT_FILES_H_

#include <string>

#include "daemon/tier/block_io.h"

namespace kvoffload::tier {

class DirectFileBlockIo : public BlockIo {
 public:
  absl::StatusOr<int> OpenFile(const std::string& path) override;
  absl::Status Preallocate(int fd, uint64_t bytes) override;
  absl::StatusOr<uint64_t> FileSize(int fd) override;
  absl::Status Sync(int fd) override;
  void CloseFile(int fd) override;
};

}  // namespace kvoffload::tier

#endif  // KVOFFLOAD_DAEMON_TIER_DIRECT_FILES_H_
