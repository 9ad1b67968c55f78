#include "daemon/tier/uring_block_io.h"

#include <linux/fs.h>

#include <cerrno>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/errno_status.h"

namespace kvoffload::tier {
namespace {

// user_data of the NOP the destructor posts to wake the reaper for the last time.
constexpr uint64_t kStopToken = 0;

}  // namespace

absl::StatusOr<std::unique_ptr<UringBlockIo>> UringBlockIo::Create(int queue_depth) {
  if (queue_depth < 1 || queue_depth > 4096) {
    return absl::InvalidArgumentError(absl::StrCat("queue depth ", queue_depth, " not in 1..4096"));
  }
  std::unique_ptr<UringBlockIo> io(new UringBlockIo(queue_depth));
  // One spare SQE for the stop NOP.
  const int err = io_uring_queue_init(static_cast<unsigned>(queue_depth + 1), &io->ring_, 0);
  if (err < 0) return common::ErrnoStatus(-err, "io_uring_queue_init");
  io->reaper_ = std::thread([raw = io.get()] { raw->ReapLoop(); });
  return io;
}

UringBlockIo::~UringBlockIo() {
  {
    absl::MutexLock lock(&mu_);
    mu_.Await(absl::Condition(
        +[](UringBlockIo* self) ABSL_EXCLUSIVE_LOCKS_REQUIRED(self->mu_) {
          return self->in_kernel_ == 0 && self->waiting_.empty();
        },
        this));
    stopping_ = true;
    io_uring_sqe* sqe = io_uring_get_sqe(&ring_);
    io_uring_prep_nop(sqe);
    io_uring_sqe_set_data64(sqe, kStopToken);
    io_uring_submit(&ring_);
  }
  reaper_.join();
  io_uring_queue_exit(&ring_);
}

void UringBlockIo::Submit(IoRequest request, IoCallback done) {
  auto op = std::make_unique<QueuedIo>(QueuedIo{std::move(request), std::move(done)});
  absl::MutexLock lock(&mu_);
  waiting_.push_back(std::move(op));
  FillAndSubmit();
}

void UringBlockIo::FillAndSubmit() {
  int prepared = 0;
  while (!waiting_.empty() && in_kernel_ < queue_depth_) {
    io_uring_sqe* sqe = io_uring_get_sqe(&ring_);
    if (sqe == nullptr) break;  // cannot happen: in_kernel_ < queue_depth_ < ring size
    QueuedIo* op = waiting_.front().release();
    waiting_.pop_front();
    const IoRequest& r = op->request;
    const unsigned n = static_cast<unsigned>(r.iov.size());
    if (r.kind == IoRequest::Kind::kRead) {
      io_uring_prep_readv(sqe, r.fd, r.iov.data(), n, r.offset);
    } else {
      io_uring_prep_writev2(sqe, r.fd, r.iov.data(), n, r.offset, r.dsync ? RWF_DSYNC : 0);
    }
    io_uring_sqe_set_data(sqe, op);
    ++in_kernel_;
    ++prepared;
  }
  if (prepared > 0) {
    // EINTR/EAGAIN/EBUSY leave the SQEs in the ring: the next submit (any Submit or completion)
    // takes them; in_kernel_ already counts them, so nothing is lost or double-counted.
    int ret;
    do {
      ret = io_uring_submit(&ring_);
    } while (ret == -EINTR);
  }
}

void UringBlockIo::ReapLoop() {
  for (;;) {
    io_uring_cqe* cqe = nullptr;
    const int err = io_uring_wait_cqe(&ring_, &cqe);
    if (err == -EINTR) continue;
    if (err < 0) continue;  // transient (EAGAIN); the ring stays usable
    const uint64_t token = io_uring_cqe_get_data64(cqe);
    const int res = cqe->res;
    io_uring_cqe_seen(&ring_, cqe);
    if (token == kStopToken) return;
    std::unique_ptr<QueuedIo> op(reinterpret_cast<QueuedIo*>(token));
    {
      // The op was queued and submitted under mu_, and its CQE exists only after that submit:
      // taking mu_ here orders the submitter's writes before the callback in a way
      // ThreadSanitizer can see (it cannot see through the kernel's ring).
      absl::MutexLock lock(&mu_);
    }
    if (res < 0) {
      op->done(common::ErrnoStatus(-res, op->request.kind == IoRequest::Kind::kRead
                                             ? "io_uring read"
                                             : "io_uring write"));
    } else {
      op->done(static_cast<uint64_t>(res));
    }
    absl::MutexLock lock(&mu_);
    --in_kernel_;
    FillAndSubmit();
  }
}

}  // namespace kvoffload::tier
