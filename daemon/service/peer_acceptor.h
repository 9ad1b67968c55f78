// PeerAcceptor: listens on one Unix socket and accepts its connections itself, so that the kernel's
// word on each caller (SO_PEERCRED, SO_PEERGROUPS) is recorded in a PeerTable before gRPC serves
// the connection (grpc::AddInsecureChannelFromFd). gRPC alone does not expose the peer
// credentials of a Unix socket. See peer_credentials.h for how handlers read them.
//
//   std::unique_ptr<grpc::Server> server = builder.BuildAndStart();   // no listening port
//   ASSIGN_OR_RETURN(auto acceptor, PeerAcceptor::Start({path, 0660, gid}, server.get(), &peers));
//   ...
//   acceptor->Stop();            // before server->Shutdown()
//
// The socket file gets `mode` and group `gid` before listen(), so no connection is ever accepted
// under looser permissions.
//
// Thread-safety: Start and Stop from one owner thread; the accept loop runs on its own thread.
// Ownership: owns the listening socket and its file (removed by Stop); the server and the table
// must outlive the acceptor. Accepted descriptors belong to gRPC once handed over.
#ifndef KVOFFLOAD_DAEMON_SERVICE_PEER_ACCEPTOR_H_
#define KVOFFLOAD_DAEMON_SERVICE_PEER_ACCEPTOR_H_

#include <sys/types.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <thread>

#include "absl/status/statusor.h"
#include "daemon/service/peer_credentials.h"
#include "grpcpp/server.h"

namespace kvoffload::daemon {

struct UnixSocketOptions {
  std::string path;
  mode_t mode = 0660;
  std::optional<gid_t> gid;  // group of the socket file; unset: the daemon's group
};

class PeerAcceptor {
 public:
  // Binds (an existing file at `path` is replaced), sets mode and group, listens and starts
  // accepting. Errors are errno-mapped (common::ErrnoStatus), naming the path.
  static absl::StatusOr<std::unique_ptr<PeerAcceptor>> Start(const UnixSocketOptions& options,
                                                             grpc::Server* server,
                                                             PeerTable* peers);
  ~PeerAcceptor();  // Stop()
  PeerAcceptor(const PeerAcceptor&) = delete;
  PeerAcceptor& operator=(const PeerAcceptor&) = delete;

  // Stops accepting, closes the listening socket and removes its file. Connections already
  // accepted stay with gRPC. Idempotent.
  void Stop();

  uint64_t accepted() const { return accepted_.load(std::memory_order_relaxed); }

 private:
  PeerAcceptor(std::string path, int listen_fd, int wake_fd, grpc::Server* server,
               PeerTable* peers);
  void Run();

  const std::string path_;
  int listen_fd_;
  int wake_fd_;  // eventfd: written by Stop to end the accept loop's poll
  grpc::Server* const server_;
  PeerTable* const peers_;
  std::atomic<uint64_t> accepted_{0};
  std::thread thread_;
};

}  // namespace kvoffload::daemon

#endif  // KVOFFLOAD_DAEMON_SERVICE_PEER_ACCEPTOR_H_
