// Who is calling, from the kernel: the daemon accepts every connection itself (PeerAcceptor),
// reads the peer's credentials (SO_PEERCRED: pid, uid, gid at connect() time; SO_PEERGROUPS: its
// supplementary groups), records them here under the connection's descriptor, and only then hands
// the descriptor to gRPC (grpc::AddInsecureChannelFromFd). gRPC names such a connection "fd:N"
// (ServerContext::peer()), so a handler finds its caller with CallerOf.
//
//   PeerTable peers;
//   ... PeerAcceptor::Start(socket_options, server, &peers) ...
//   ASSIGN_OR_RETURN(Caller caller, peers.CallerOf(context));   // in a handler
//
// Descriptor reuse: gRPC closes a connection's descriptor when the connection ends, and the next
// accepted connection may get the same number. Its credentials are registered before gRPC sees
// it, so an entry always describes the newest connection of that number; a handler of the old
// connection that looks its caller up late is refused, because its call was cancelled when its
// connection ended (CallerOf checks that after the lookup).
#ifndef KVOFFLOAD_DAEMON_SERVICE_PEER_CREDENTIALS_H_
#define KVOFFLOAD_DAEMON_SERVICE_PEER_CREDENTIALS_H_

#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "daemon/access/caller.h"
#include "grpcpp/server_context.h"

namespace kvoffload::daemon {

// SO_PEERCRED and SO_PEERGROUPS of a connected Unix socket; errno-mapped status on failure.
absl::StatusOr<Caller> ReadPeerCredentials(int fd);

// The descriptor number gRPC gave a connection made from a descriptor ("fd:12" → 12), or -1.
int PeerFd(const std::string& peer);

// Where a handler learns who made its call. The daemon's is the PeerTable (the kernel's word
// for each accepted connection); tests over gRPC's in-process channel, which has no descriptor,
// use daemon/service/testing:in_process_callers.
class CallerSource {
 public:
  virtual ~CallerSource() = default;
  // The call's caller, or UNAUTHENTICATED (fail closed).
  virtual absl::StatusOr<Caller> CallerOf(grpc::ServerContextBase* context) const = 0;
};

// Thread-safe. Bounded by the descriptor table: one entry per descriptor number ever accepted,
// replaced when the number is reused.
class PeerTable final : public CallerSource {
 public:
  PeerTable() = default;
  PeerTable(const PeerTable&) = delete;
  PeerTable& operator=(const PeerTable&) = delete;

  // Called by the acceptor before the descriptor is handed to gRPC.
  void Register(int fd, const Caller& caller);
  // The credentials of the connection a call came on. UNAUTHENTICATED when the connection was not
  // accepted through this table (fail closed) or the call was cancelled (its connection is gone,
  // and its number may already name another connection).
  absl::StatusOr<Caller> CallerOf(grpc::ServerContextBase* context) const override;

 private:
  mutable absl::Mutex mu_;
  absl::flat_hash_map<int, Caller> by_fd_ ABSL_GUARDED_BY(mu_);
};

}  // namespace kvoffload::daemon

#endif  // KVOFFLOAD_DAEMON_SERVICE_PEER_CREDENTIALS_H_
