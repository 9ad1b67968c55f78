#include "daemon/service/peer_credentials.h"

#include <sys/socket.h>
#include <unistd.h>

#include "daemon/service/admin_service.h"
#include "grpcpp/create_channel_posix.h"
#include "grpcpp/grpcpp.h"
#include "grpcpp/server_posix.h"
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

// gRPC names a connection made from a descriptor "fd:N" (ServerContext::peer()), which is how a
// handler finds the credentials the acceptor recorded: checked here through a real server. The
// admin service's DropEngine looks its caller up first, then refuses an empty engine_id without
// touching anything else (so no registry is needed).
TEST(PeerTableTest, HandlersFindTheCredentialsOfTheirConnection) {
  PeerTable peers;
  AdminService admin(nullptr, nullptr, nullptr, &peers, AccessPolicy{});
  grpc::ServerBuilder builder;
  builder.RegisterService(&admin);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  ASSERT_NE(server, nullptr);
  auto call = [&](bool register_first) {
    int fds[2];
    EXPECT_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, fds), 0);
    if (register_first) {
      absl::StatusOr<Caller> caller = ReadPeerCredentials(fds[0]);
      EXPECT_TRUE(caller.ok()) << caller.status();
      peers.Register(fds[0], *caller);
    }
    grpc::AddInsecureChannelFromFd(server.get(), fds[0]);
    auto stub = v1::Admin::NewStub(grpc::CreateInsecureChannelFromFd("test", fds[1]));
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    v1::DropEngineRequest request;
    v1::Empty response;
    return stub->DropEngine(&context, request, &response);
  };
  // Unknown connection: refused, fail closed.
  grpc::Status unknown = call(false);
  EXPECT_EQ(unknown.error_code(), grpc::StatusCode::UNAUTHENTICATED) << unknown.error_message();
  EXPECT_NE(unknown.error_message().find("'fd:"), std::string::npos) << unknown.error_message();
  // Registered connection: the caller is found, and the request itself is judged.
  grpc::Status known = call(true);
  EXPECT_EQ(known.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << known.error_message();
  EXPECT_EQ(known.error_message(), "engine_id is empty");
  server->Shutdown();
}

}  // namespace
}  // namespace kvoffload::daemon
