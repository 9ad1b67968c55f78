#include "daemon/tier/posix_block_io.h"

#include <sys/uio.h>

#include <algorithm>
#include <cerrno>
#include <utility>

#include "common/errno_status.h"

namespace kvoffload::tier {

PosixBlockIo::PosixBlockIo(int queue_depth) {
  const int n = std::max(1, queue_depth);
  threads_.reserve(n);
  for (int i = 0; i < n; ++i) threads_.emplace_back([this] { WorkLoop(); });
}

PosixBlockIo::~PosixBlockIo() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  for (std::thread& t : threads_) t.join();
}

void PosixBlockIo::Submit(IoRequest request, IoCallback done) {
  absl::MutexLock lock(&mu_);
  waiting_.push_back(QueuedIo{std::move(request), std::move(done)});
}

void PosixBlockIo::WorkLoop() {
  for (;;) {
    QueuedIo op;
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(
          +[](PosixBlockIo* self) ABSL_EXCLUSIVE_LOCKS_REQUIRED(self->mu_) {
            return self->stopping_ || !self->waiting_.empty();
          },
          this));
      if (waiting_.empty()) return;  // stopping, and every request has been taken
      op = std::move(waiting_.front());
      waiting_.pop_front();
    }
    const IoRequest& r = op.request;
    const int n = static_cast<int>(r.iov.size());
    ssize_t res;
    do {
      res = r.kind == IoRequest::Kind::kRead
                ? preadv(r.fd, r.iov.data(), n, static_cast<off_t>(r.offset))
                : pwritev2(r.fd, r.iov.data(), n, static_cast<off_t>(r.offset),
                           r.dsync ? RWF_DSYNC : 0);
    } while (res < 0 && errno == EINTR);
    if (res < 0) {
      op.done(common::ErrnoStatus(errno, r.kind == IoRequest::Kind::kRead ? "preadv" : "pwritev2"));
    } else {
      op.done(static_cast<uint64_t>(res));
    }
  }
}

}  // namespace kvoffload::tier
