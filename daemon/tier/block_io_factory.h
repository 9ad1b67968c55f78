// MakeBlockIo: the disk tier's I/O implementation, chosen once at start. io_uring when the
// kernel allows it; when io_uring_setup is refused (seccomp, kernel.io_uring_disabled, ENOSYS)
// the pread/pwrite thread pool, with a warning naming the refusal. Either way one info line
// says which implementation serves the tier.
#ifndef KVOFFLOAD_DAEMON_TIER_BLOCK_IO_FACTORY_H_
#define KVOFFLOAD_DAEMON_TIER_BLOCK_IO_FACTORY_H_

#include <memory>

#include "absl/status/statusor.h"
#include "daemon/tier/block_io.h"

namespace kvoffload::tier {

enum class BlockIoKind { kAuto, kUring, kPosix };

// kUring fails (with the refusal) instead of falling back; kPosix never tries io_uring.
absl::StatusOr<std::unique_ptr<BlockIo>> MakeBlockIo(int queue_depth,
                                                     BlockIoKind kind = BlockIoKind::kAuto);

}  // namespace kvoffload::tier

#endif  // KVOFFLOAD_DAEMON_TIER_BLOCK_IO_FACTORY_H_
