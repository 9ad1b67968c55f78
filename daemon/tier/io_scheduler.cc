#include "daemon/tier/io_scheduler.h"

#include <algorithm>

namespace kvoffload::tier {

IoScheduler::IoScheduler(BlockIo& io, int depth, int write_depth)
    : io_(io), depth_(std::max(1, depth)), write_depth_(std::clamp(write_depth, 1, depth_)) {}

IoScheduler::~IoScheduler() {
  absl::MutexLock lock(&mu_);
  mu_.Await(absl::Condition(
      +[](IoScheduler* self) ABSL_EXCLUSIVE_LOCKS_REQUIRED(self->mu_) {
        return self->reads_in_flight_ == 0 && self->writes_in_flight_ == 0 &&
               self->reads_.empty() && self->writes_.empty();
      },
      this));
}

void IoScheduler::Submit(IoRequest request, IoCallback done) {
  std::deque<QueuedIo> batch;
  {
    absl::MutexLock lock(&mu_);
    (request.kind == IoRequest::Kind::kRead ? reads_ : writes_)
        .push_back(QueuedIo{std::move(request), std::move(done)});
    batch = TakeStartable();
  }
  Start(std::move(batch));
}

IoScheduler::Counts IoScheduler::counts() const {
  absl::MutexLock lock(&mu_);
  return Counts{reads_in_flight_, writes_in_flight_, reads_.size(), writes_.size()};
}

std::deque<QueuedIo> IoScheduler::TakeStartable() {
  std::deque<QueuedIo> batch;
  while (!reads_.empty() && reads_in_flight_ + writes_in_flight_ < depth_) {
    batch.push_back(std::move(reads_.front()));
    reads_.pop_front();
    ++reads_in_flight_;
  }
  while (reads_.empty() && !writes_.empty() && writes_in_flight_ < write_depth_ &&
         reads_in_flight_ + writes_in_flight_ < depth_) {
    batch.push_back(std::move(writes_.front()));
    writes_.pop_front();
    ++writes_in_flight_;
  }
  return batch;
}

void IoScheduler::Start(std::deque<QueuedIo> batch) {
  for (QueuedIo& w : batch) {
    const bool is_read = w.request.kind == IoRequest::Kind::kRead;
    io_.Submit(std::move(w.request),
               [this, is_read, done = std::move(w.done)](absl::StatusOr<uint64_t> result) {
                 done(std::move(result));
                 std::deque<QueuedIo> next;
                 {
                   absl::MutexLock lock(&mu_);
                   --(is_read ? reads_in_flight_ : writes_in_flight_);
                   next = TakeStartable();
                 }
                 Start(std::move(next));
               });
  }
}

}  // namespace kvoffload::tier
