#include "daemon/tier/block_io.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"

namespace kvoffload::tier {

uint64_t IoRequest::bytes() const {
  uint64_t total = 0;
  for (const iovec& v : iov) total += v.iov_len;
  return total;
}

IoRequest IoRequest::Read(int fd, uint64_t offset, std::vector<iovec> iov) {
  IoRequest r;
  r.kind = Kind::kRead;
  r.fd = fd;
  r.offset = offset;
  r.iov = std::move(iov);
  return r;
}

IoRequest IoRequest::Write(int fd, uint64_t offset, std::vector<iovec> iov, bool dsync) {
  IoRequest r = Read(fd, offset, std::move(iov));
  r.kind = Kind::kWrite;
  r.dsync = dsync;
  return r;
}

absl::Status SubmitAndWait(BlockIo& io, IoRequest request) {
  const uint64_t want = request.bytes();
  const bool is_read = request.kind == IoRequest::Kind::kRead;
  absl::Notification done;
  absl::Status status;
  io.Submit(std::move(request), [&](absl::StatusOr<uint64_t> bytes) {
    if (!bytes.ok()) {
      status = bytes.status();
    } else if (*bytes != want) {
      status = absl::DataLossError(absl::StrCat(is_read ? "short read: " : "short write: ",
                                                *bytes, " of ", want, " bytes"));
    }
    done.Notify();
  });
  done.WaitForNotification();
  return status;
}

}  // namespace kvoffload::tier
