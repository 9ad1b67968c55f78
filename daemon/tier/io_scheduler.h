// IoScheduler: the disk tier's admission of I/O to the device, above the BlockIo seam. Reads
// (promotions: a request waits for them) go first; writes (spills: nobody waits) are throttled
// so they never starve reads:
//   - at most `depth` requests in flight in all;
//   - at most `write_depth` of them writes (< depth leaves reads room even under a write flood);
//   - a write is started only while no read is waiting.
// Waiting requests start in FIFO order within their class as completions free room.
//
// Thread-safe. Does not own the BlockIo. The destructor waits until every request submitted
// here has completed and its callback returned.
#ifndef KVOFFLOAD_DAEMON_TIER_IO_SCHEDULER_H_
#define KVOFFLOAD_DAEMON_TIER_IO_SCHEDULER_H_

#include <deque>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "daemon/tier/block_io.h"

namespace kvoffload::tier {

class IoScheduler {
 public:
  struct Counts {
    int reads_in_flight = 0;
    int writes_in_flight = 0;
    size_t reads_waiting = 0;
    size_t writes_waiting = 0;
  };

  // depth >= 1; write_depth in 1..depth.
  IoScheduler(BlockIo& io, int depth, int write_depth);
  ~IoScheduler();
  IoScheduler(const IoScheduler&) = delete;
  IoScheduler& operator=(const IoScheduler&) = delete;

  void Submit(IoRequest request, IoCallback done);
  Counts counts() const;

 private:
  // Takes the requests that may start now off the queues (under mu_); the caller starts them
  // after releasing it (BlockIo::Submit may run nothing inline, but it takes its own lock).
  std::deque<QueuedIo> TakeStartable() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Start(std::deque<QueuedIo> batch);

  BlockIo& io_;
  const int depth_;
  const int write_depth_;
  mutable absl::Mutex mu_;
  std::deque<QueuedIo> reads_ ABSL_GUARDED_BY(mu_);
  std::deque<QueuedIo> writes_ ABSL_GUARDED_BY(mu_);
  int reads_in_flight_ ABSL_GUARDED_BY(mu_) = 0;
  int writes_in_flight_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace kvoffload::tier

#endif  // KVOFFLOAD_DAEMON_TIER_IO_SCHEDULER_H_
