#include "common/errno_status.h"

#include <errno.h>

#include "gtest/gtest.h"

namespace kvoffload::common {
namespace {

TEST(ErrnoStatusTest, ExhaustionIsResourceExhausted) {
  for (int err : {ENOMEM, EMFILE, ENFILE, ENOSPC}) {
    EXPECT_EQ(ErrnoStatus(err, "x").code(), absl::StatusCode::kResourceExhausted) << err;
  }
}

TEST(ErrnoStatusTest, CodesFollowTheErrno) {
  EXPECT_EQ(ErrnoStatus(EINVAL, "x").code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ErrnoStatus(EPERM, "x").code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(ErrnoStatus(EACCES, "x").code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(ErrnoStatus(ENOENT, "x").code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(ErrnoStatus(EEXIST, "x").code(), absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(ErrnoStatus(EIO, "x").code(), absl::StatusCode::kInternal);
}

TEST(ErrnoStatusTest, MessageKeepsContextTextAndNumber) {
  EXPECT_EQ(ErrnoStatus(ENOENT, "open /x").message(),
            "open /x: No such file or directory (errno 2)");
}

}  // namespace
}  // namespace kvoffload::common
