#include "daemon/service/peer_credentials.h"

#include <sys/socket.h>
#include <unistd.h>

#include "gtest/gtest.h"

namespace kvoffload::daemon {
namespace {

TEST(PeerCredentialsTest, ReadsTheConnectingProcessFromTheKernel) {
  int fds[2];
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, fds), 0);
  absl::StatusOr<Caller> caller = ReadPeerCredentials(fds[0]);
  ASSERT_TRUE(caller.ok()) << caller.status();
  EXPECT_EQ(caller->pid, getpid());
  EXPECT_EQ(caller->uid, geteuid());
  EXPECT_EQ(caller->gid, getegid());
  gid_t groups[256];
  const int n = getgroups(256, groups);
  ASSERT_GE(n, 0);
  EXPECT_EQ(caller->groups.size(), static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) EXPECT_TRUE(caller->InGroup(groups[i]));
  close(fds[0]);
  close(fds[1]);
}

TEST(PeerCredentialsTest, NotASocketIsAnError) {
  EXPECT_FALSE(ReadPeerCredentials(0 + 1000000).ok());
}

TEST(PeerCredentialsTest, PeerFdParsesOnlyGrpcFdNames) {
  EXPECT_EQ(PeerFd("fd:12"), 12);
  EXPECT_EQ(PeerFd("fd:0"), 0);
  EXPECT_EQ(PeerFd("unix:/run/kvoffload/kvoffload.sock"), -1);
  EXPECT_EQ(PeerFd("fd:"), -1);
  EXPECT_EQ(PeerFd("fd:-3"), -1);
  EXPECT_EQ(PeerFd("fd:12x"), -1);
}

}  // namespace
}  // namespace kvoffload::daemon
