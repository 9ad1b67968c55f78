// BlockIo: the disk tier's one seam to the operating system (LevelDB's Env). Files are opened
// for direct I/O (O_DIRECT: the page cache never holds tier data) and read and written
// asynchronously, straight between the caller's page-aligned memory (the pinned region's rows)
// and the device: no bounce copies. Implementations: io_uring (uring_block_io.h), a
// pread/pwrite thread pool for kernels that refuse io_uring (posix_block_io.h), and a
// fault-injecting wrapper for tests (testing/fault_block_io.h). MakeBlockIo (block_io_factory.h)
// picks one at start.
//
//   ASSIGN_OR_RETURN(std::unique_ptr<BlockIo> io, MakeBlockIo(/*queue_depth=*/32));
//   ASSIGN_OR_RETURN(int fd, io->OpenFile("/nvme0/kvtier.0.dat"));
//   IoRequest req = IoRequest::Read(fd, offset, {{header, 4096}, {row, row_bytes}});
//   io->Submit(req, [](absl::StatusOr<uint64_t> bytes) { ... });  // on an I/O thread
//
// Thread safety: every implementation is safe for concurrent use. Completion callbacks run on an
// I/O thread, exactly once each; they must not block on other I/O of the same BlockIo. The
// destructor waits for every submitted request's callback to have returned.
#ifndef KVOFFLOAD_DAEMON_TIER_BLOCK_IO_H_
#define KVOFFLOAD_DAEMON_TIER_BLOCK_IO_H_

#include <sys/uio.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace kvoffload::tier {

// Direct I/O alignment: buffers, offsets and lengths are multiples of this (the logical block
// size of every NVMe namespace and of ext4/xfs with 4 KiB blocks).
inline constexpr uint64_t kIoAlignment = 4096;

// One vectored read or write at `offset` of `fd`. The iovecs' memory must stay valid (and, for
// reads, untouched by anyone else) until the callback has run.
struct IoRequest {
  enum class Kind { kRead, kWrite };
  Kind kind = Kind::kRead;
  int fd = -1;
  uint64_t offset = 0;
  std::vector<iovec> iov;
  // Writes only: RWF_DSYNC (the device's volatile cache is flushed or FUA is used for this
  // write) before the callback reports success.
  bool dsync = false;

  uint64_t bytes() const;
  static IoRequest Read(int fd, uint64_t offset, std::vector<iovec> iov);
  static IoRequest Write(int fd, uint64_t offset, std::vector<iovec> iov, bool dsync = false);
};

// Called once with the bytes transferred (which may be short) or the failure as a Status
// (common::ErrnoStatus: ENOSPC → RESOURCE_EXHAUSTED, EIO → INTERNAL).
using IoCallback = std::function<void(absl::StatusOr<uint64_t>)>;

// A request with its callback, as queues above and below the seam keep them.
struct QueuedIo {
  IoRequest request;
  IoCallback done;
};

class BlockIo {
 public:
  virtual ~BlockIo() = default;
  BlockIo() = default;
  BlockIo(const BlockIo&) = delete;
  BlockIo& operator=(const BlockIo&) = delete;

  // "io_uring" or "pread"; for the start-up log line and stats.
  virtual absl::string_view name() const = 0;

  // Opens `path` read-write with O_DIRECT, creating it (mode 0600) if absent. A file system
  // without O_DIRECT (tmpfs) is INVALID_ARGUMENT, never a silent fall back to buffered I/O.
  virtual absl::StatusOr<int> OpenFile(const std::string& path) = 0;
  // Reserves `bytes` of blocks for the file (fallocate), so later writes never meet ENOSPC.
  virtual absl::Status Preallocate(int fd, uint64_t bytes) = 0;
  virtual absl::StatusOr<uint64_t> FileSize(int fd) = 0;
  // fdatasync: makes the file's completed writes and its allocation durable.
  virtual absl::Status Sync(int fd) = 0;
  virtual void CloseFile(int fd) = 0;

  // Starts `request`; `done` runs later on an I/O thread. Never blocks on the device (a full
  // queue is queued behind, in submission order).
  virtual void Submit(IoRequest request, IoCallback done) = 0;
};

// Submits `request` and waits for it; the bytes must be all of request.bytes() or it is an error
// (DATA_LOSS "short read/write"). For start-up work (superblocks, the header scan's tail).
absl::Status SubmitAndWait(BlockIo& io, IoRequest request);

}  // namespace kvoffload::tier

#endif  // KVOFFLOAD_DAEMON_TIER_BLOCK_IO_H_
