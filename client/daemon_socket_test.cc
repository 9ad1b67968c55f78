#include "client/daemon_socket.h"

#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace kvoffload::client {
namespace {

using ::testing::HasSubstr;

class DaemonSocketTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/kvo-sock-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override {
    for (int fd : fds_) close(fd);
    EXPECT_EQ(std::system(absl::StrCat("rm -rf ", dir_).c_str()), 0);
  }

  // A Unix socket bound at `path`; listening when `listen_too`.
  void Bind(const std::string& path, bool listen_too) {
    const int fd = socket(AF_UNIX, SOCK_STREAM, 0);
    ASSERT_GE(fd, 0);
    fds_.push_back(fd);
    sockaddr_un address{};
    address.sun_family = AF_UNIX;
    std::memcpy(address.sun_path, path.data(), path.size());
    ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)), 0);
    if (listen_too) {
      ASSERT_EQ(listen(fd, 4), 0);
    }
  }

  std::string dir_;
  std::vector<int> fds_;
};

TEST_F(DaemonSocketTest, NoSocketIsUnavailableWithPathAndFix) {
  const std::string path = dir_ + "/kvoffload.sock";
  const absl::Time start = absl::Now();
  absl::Status s = CheckDaemonSocket(path);
  EXPECT_LT(absl::Now() - start, absl::Milliseconds(100));
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(s.message(), HasSubstr("kvoffloadd is not running (no socket at " + path + ")"));
  EXPECT_THAT(s.message(), HasSubstr("systemctl start kvoffloadd"));
  EXPECT_EQ(CheckDaemonSocket(dir_ + "/no/such/dir.sock").code(), absl::StatusCode::kUnavailable);
}

TEST_F(DaemonSocketTest, StaleSocketIsUnavailable) {
  const std::string path = dir_ + "/stale.sock";
  Bind(path, /*listen_too=*/false);  // bound, nobody listens: what a killed daemon leaves
  absl::Status s = CheckDaemonSocket(path);
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(s.message(), HasSubstr("kvoffloadd is not running (nothing listens on " + path));
}

TEST_F(DaemonSocketTest, ListeningSocketIsOk) {
  const std::string path = dir_ + "/kvoffload.sock";
  Bind(path, /*listen_too=*/true);
  EXPECT_TRUE(CheckDaemonSocket(path).ok());
}

TEST_F(DaemonSocketTest, NotASocketOrBadPathIsInvalidArgument) {
  const std::string path = dir_ + "/file";
  ASSERT_EQ(std::system(absl::StrCat("touch ", path).c_str()), 0);
  EXPECT_EQ(CheckDaemonSocket(path).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(CheckDaemonSocket("").code(), absl::StatusCode::kInvalidArgument);
  absl::Status s = CheckDaemonSocket("/" + std::string(200, 'x'));
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("limit of a Unix socket address"));
}

TEST_F(DaemonSocketTest, ClosedDirectoryIsPermissionDenied) {
  if (geteuid() == 0) GTEST_SKIP() << "root passes every permission check";
  const std::string path = dir_ + "/closed/kvoffload.sock";
  ASSERT_EQ(mkdir((dir_ + "/closed").c_str(), 0700), 0);
  Bind(path, /*listen_too=*/true);
  ASSERT_EQ(chmod((dir_ + "/closed").c_str(), 0), 0);
  absl::Status s = CheckDaemonSocket(path);
  chmod((dir_ + "/closed").c_str(), 0700);
  EXPECT_EQ(s.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(s.message(), HasSubstr("permission denied on " + path));
  EXPECT_THAT(s.message(), HasSubstr("kvoffload"));
}

}  // namespace
}  // namespace kvoffload::client
