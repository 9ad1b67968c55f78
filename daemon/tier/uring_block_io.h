// UringBlockIo: BlockIo on one io_uring (liburing). Submitters take a mutex to fill and submit
// SQEs (one io_uring_submit per Submit call); one reaper thread waits for CQEs and runs the
// callbacks. At most `queue_depth` requests are in the kernel at once (so the completion queue,
// twice the ring, never overflows); more wait in a FIFO and are submitted by the reaper as
// completions free room. Priority between reads and writes is not this class's business
// (IoScheduler does it above the seam).
//
// Thread-safe. Owns the ring and the reaper thread; the destructor waits for every submitted
// request to complete and its callback to return.
#ifndef KVOFFLOAD_DAEMON_TIER_URING_BLOCK_IO_H_
#define KVOFFLOAD_DAEMON_TIER_URING_BLOCK_IO_H_

#include <liburing.h>

#include <deque>
#include <memory>
#include <thread>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "daemon/tier/direct_files.h"

namespace kvoffload::tier {

class UringBlockIo final : public DirectFileBlockIo {
 public:
  // Sets up the ring; io_uring_setup refused (ENOSYS, EPERM: seccomp or
  // kernel.io_uring_disabled) comes back as its errno status.
  static absl::StatusOr<std::unique_ptr<UringBlockIo>> Create(int queue_depth);
  ~UringBlockIo() override;

  absl::string_view name() const override { return "io_uring"; }
  void Submit(IoRequest request, IoCallback done) override;

 private:
  explicit UringBlockIo(int queue_depth) : queue_depth_(queue_depth) {}
  void ReapLoop();
  // Moves waiting ops into SQEs while there is room, then submits them.
  void FillAndSubmit() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const int queue_depth_;
  io_uring ring_{};
  std::thread reaper_;

  absl::Mutex mu_;
  std::deque<std::unique_ptr<QueuedIo>> waiting_ ABSL_GUARDED_BY(mu_);
  int in_kernel_ ABSL_GUARDED_BY(mu_) = 0;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace kvoffload::tier

#endif  // KVOFFLOAD_DAEMON_TIER_URING_BLOCK_IO_H_
