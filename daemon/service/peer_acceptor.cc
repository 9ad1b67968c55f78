#include "daemon/service/peer_acceptor.h"

#include <errno.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/errno_status.h"
#include "common/logging.h"
#include "common/thread_name.h"
#include "grpcpp/server_posix.h"

namespace kvoffload::daemon {
namespace {

spdlog::logger* Log() {
  static spdlog::logger* log = common::Logger("accept");
  return log;
}

}  // namespace

absl::StatusOr<std::unique_ptr<PeerAcceptor>> PeerAcceptor::Start(const UnixSocketOptions& options,
                                                                  grpc::Server* server,
                                                                  PeerTable* peers) {
  struct sockaddr_un addr {};
  addr.sun_family = AF_UNIX;
  if (options.path.empty() || options.path.size() >= sizeof(addr.sun_path)) {
    return absl::InvalidArgumentError(absl::StrCat("socket path '", options.path,
                                                   "' is empty or longer than ",
                                                   sizeof(addr.sun_path) - 1, " bytes"));
  }
  std::memcpy(addr.sun_path, options.path.data(), options.path.size());
  const int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return common::ErrnoStatus(errno, "socket(AF_UNIX)");
  auto fail = [&](const std::string& what) {
    const absl::Status status = common::ErrnoStatus(errno, absl::StrCat(what, " ", options.path));
    close(fd);
    return status;
  };
  unlink(options.path.c_str());
  // Nobody can connect before listen(): mode and group are final before the first connection.
  if (bind(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof(addr)) != 0) return fail("bind");
  if (chmod(options.path.c_str(), options.mode) != 0) return fail("chmod");
  if (options.gid.has_value() &&
      chown(options.path.c_str(), static_cast<uid_t>(-1), *options.gid) != 0) {
    return fail(absl::StrCat("chown to group ", *options.gid, " of"));
  }
  if (listen(fd, SOMAXCONN) != 0) return fail("listen");
  const int wake = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (wake < 0) return fail("eventfd for");
  auto acceptor =
      std::unique_ptr<PeerAcceptor>(new PeerAcceptor(options.path, fd, wake, server, peers));
  acceptor->thread_ = std::thread([raw = acceptor.get()] { raw->Run(); });
  return acceptor;
}

PeerAcceptor::PeerAcceptor(std::string path, int listen_fd, int wake_fd, grpc::Server* server,
                           PeerTable* peers)
    : path_(std::move(path)),
      listen_fd_(listen_fd),
      wake_fd_(wake_fd),
      server_(server),
      peers_(peers) {}

PeerAcceptor::~PeerAcceptor() { Stop(); }

void PeerAcceptor::Stop() {
  if (!thread_.joinable()) return;
  const uint64_t one = 1;
  (void)!write(wake_fd_, &one, sizeof(one));
  thread_.join();
  close(listen_fd_);
  close(wake_fd_);
  unlink(path_.c_str());
}

void PeerAcceptor::Run() {
  common::SetThreadName("kvo-accept");
  for (;;) {
    struct pollfd fds[2] = {{listen_fd_, POLLIN, 0}, {wake_fd_, POLLIN, 0}};
    if (poll(fds, 2, -1) < 0) {
      if (errno == EINTR) continue;
      Log()->error("poll on {}: {}", path_, strerror(errno));
      return;
    }
    if (fds[1].revents != 0) return;
    // Non-blocking, as gRPC's transport expects of a descriptor it is given.
    const int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
        // Out of descriptors: the connection waits in the backlog; do not spin on it.
        Log()->warn("accept on {}: {}", path_, strerror(errno));
        poll(nullptr, 0, 10);
      }
      continue;
    }
    absl::StatusOr<Caller> caller = ReadPeerCredentials(fd);
    if (!caller.ok()) {
      Log()->warn("{}: refused a connection whose credentials cannot be read: {}", path_,
                  caller.status().ToString());
      close(fd);
      continue;
    }
    // Before gRPC sees the descriptor: no call of this connection can run without its entry.
    peers_->Register(fd, *caller);
    accepted_.fetch_add(1, std::memory_order_relaxed);
    grpc::AddInsecureChannelFromFd(server_, fd);
  }
}

}  // namespace kvoffload::daemon
