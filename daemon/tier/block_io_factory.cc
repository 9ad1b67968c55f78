#include "daemon/tier/block_io_factory.h"

#include "common/logging.h"
#include "daemon/tier/posix_block_io.h"
#include "daemon/tier/uring_block_io.h"

namespace kvoffload::tier {

absl::StatusOr<std::unique_ptr<BlockIo>> MakeBlockIo(int queue_depth, BlockIoKind kind) {
  static auto* log = common::Logger("tier");
  if (kind != BlockIoKind::kPosix) {
    absl::StatusOr<std::unique_ptr<UringBlockIo>> uring = UringBlockIo::Create(queue_depth);
    if (uring.ok()) {
      log->info("disk tier I/O: io_uring, queue depth {}", queue_depth);
      return std::unique_ptr<BlockIo>(std::move(*uring));
    }
    if (kind == BlockIoKind::kUring) return uring.status();
    log->warn("disk tier I/O: io_uring refused ({}); using pread/pwrite threads",
              uring.status().ToString());
  }
  log->info("disk tier I/O: pread/pwrite, {} threads", queue_depth);
  return std::unique_ptr<BlockIo>(std::make_unique<PosixBlockIo>(queue_depth));
}

}  // namespace kvoffload::tier
