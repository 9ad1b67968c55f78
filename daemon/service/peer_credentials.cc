#include "daemon/service/peer_credentials.h"

#include <errno.h>
#include <sys/socket.h>

#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/errno_status.h"

namespace kvoffload::daemon {

absl::StatusOr<Caller> ReadPeerCredentials(int fd) {
  struct ucred cred {};
  socklen_t len = sizeof(cred);
  if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0) {
    return common::ErrnoStatus(errno, "getsockopt(SO_PEERCRED)");
  }
  Caller caller;
  caller.pid = cred.pid;
  caller.uid = cred.uid;
  caller.gid = cred.gid;
  // Supplementary groups as they were at connect(); Linux >= 4.13. ERANGE: grow and retry.
  std::vector<gid_t> groups(64);
  for (int attempt = 0; attempt < 3; ++attempt) {
    socklen_t bytes = static_cast<socklen_t>(groups.size() * sizeof(gid_t));
    if (getsockopt(fd, SOL_SOCKET, SO_PEERGROUPS, groups.data(), &bytes) == 0) {
      groups.resize(bytes / sizeof(gid_t));
      caller.groups.assign(groups.begin(), groups.end());
      return caller;
    }
    if (errno != ERANGE) return common::ErrnoStatus(errno, "getsockopt(SO_PEERGROUPS)");
    groups.resize(bytes / sizeof(gid_t) + 1);
  }
  return absl::InternalError("getsockopt(SO_PEERGROUPS): the group list keeps growing");
}

int PeerFd(const std::string& peer) {
  int fd = -1;
  if (!absl::StartsWith(peer, "fd:") || !absl::SimpleAtoi(peer.substr(3), &fd) || fd < 0) {
    return -1;
  }
  return fd;
}

void PeerTable::Register(int fd, const Caller& caller) {
  absl::MutexLock lock(&mu_);
  by_fd_[fd] = caller;
}

absl::StatusOr<Caller> PeerTable::CallerOf(grpc::ServerContextBase* context) const {
  const std::string peer = context->peer();
  const int fd = PeerFd(peer);
  Caller caller;
  {
    absl::MutexLock lock(&mu_);
    auto it = fd < 0 ? by_fd_.end() : by_fd_.find(fd);
    if (it == by_fd_.end()) {
      return absl::UnauthenticatedError(
          absl::StrCat("the credentials of connection '", peer, "' are unknown"));
    }
    caller = it->second;
  }
  // After the lookup: if this call's connection ended, its number may name a newer connection.
  if (context->IsCancelled()) {
    return absl::UnauthenticatedError("the call's connection ended before it was authenticated");
  }
  return caller;
}

}  // namespace kvoffload::daemon
