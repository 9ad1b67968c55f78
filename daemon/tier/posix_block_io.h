// PosixBlockIo: BlockIo on preadv/pwritev2 from a pool of threads, for kernels that refuse
// io_uring (MakeBlockIo falls back to it, with a log line). Same O_DIRECT files, same
// semantics; `queue_depth` threads each carry one request at a time (FIFO).
//
// Thread-safe. Owns its threads; the destructor lets them finish every submitted request (and
// its callback) before it returns.
#ifndef KVOFFLOAD_DAEMON_TIER_POSIX_BLOCK_IO_H_
#define KVOFFLOAD_DAEMON_TIER_POSIX_BLOCK_IO_H_

#include <deque>
#include <memory>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "daemon/tier/direct_files.h"

namespace kvoffload::tier {

class PosixBlockIo final : public DirectFileBlockIo {
 public:
  explicit PosixBlockIo(int queue_depth);
  ~PosixBlockIo() override;

  absl::string_view name() const override { return "pread"; }
  void Submit(IoRequest request, IoCallback done) override;

 private:
  void WorkLoop();

  absl::Mutex mu_;
  std::deque<QueuedIo> waiting_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::thread> threads_;
};

}  // namespace kvoffload::tier

#endif  // KVOFFLOAD_DAEMON_TIER_POSIX_BLOCK_IO_H_
