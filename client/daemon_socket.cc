#include "client/daemon_socket.h"

#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace kvoffload::client {
namespace {

constexpr absl::string_view kStartFix =
    "start it (systemctl start kvoffloadd; `systemctl status kvoffloadd` and "
    "`journalctl -u kvoffloadd` say why it stopped), or pass the socket path it listens on";

absl::Status NotRunning(const std::string& path, absl::string_view what) {
  return absl::UnavailableError(
      absl::StrCat("kvoffloadd is not running (", what, " ", path, "): ", kStartFix));
}

absl::Status PermissionDenied(const std::string& path) {
  return absl::PermissionDeniedError(absl::StrCat(
      "permission denied on ", path,
      ": the caller must be in the socket's group (usermod -aG kvoffload <user>, then a new "
      "login session)"));
}

}  // namespace

absl::Status CheckDaemonSocket(const std::string& path) {
  if (path.empty()) {
    return absl::InvalidArgumentError("the kvoffloadd socket path is empty");
  }
  sockaddr_un address{};
  if (path.size() >= sizeof(address.sun_path)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "kvoffloadd socket path ", path, " is longer than ", sizeof(address.sun_path) - 1,
        " bytes, the limit of a Unix socket address"));
  }
  struct stat st;
  if (stat(path.c_str(), &st) != 0) {
    const int err = errno;
    if (err == ENOENT || err == ENOTDIR) return NotRunning(path, "no socket at");
    if (err == EACCES) return PermissionDenied(path);  // a directory on the way is closed
    return absl::UnavailableError(
        absl::StrCat("cannot reach kvoffloadd at ", path, ": ", std::strerror(err)));
  }
  if (!S_ISSOCK(st.st_mode)) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, " is not a socket; pass the path of kvoffloadd's data socket "
                           "(kvoffload.sock in its --runtime_dir)"));
  }
  const int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    const int err = errno;
    return absl::ResourceExhaustedError(
        absl::StrCat("socket() for ", path, ": ", std::strerror(err)));
  }
  address.sun_family = AF_UNIX;
  std::memcpy(address.sun_path, path.data(), path.size());
  int rc;
  do {
    rc = connect(fd, reinterpret_cast<const sockaddr*>(&address), sizeof(address));
  } while (rc != 0 && errno == EINTR);
  const int err = rc == 0 ? 0 : errno;
  close(fd);
  if (rc == 0 || err == EAGAIN) return absl::OkStatus();  // EAGAIN: listening, backlog full
  if (err == ECONNREFUSED) return NotRunning(path, "nothing listens on");
  if (err == EACCES || err == EPERM) return PermissionDenied(path);
  if (err == ENOENT) return NotRunning(path, "no socket at");
  return absl::UnavailableError(
      absl::StrCat("cannot reach kvoffloadd at ", path, ": ", std::strerror(err)));
}

}  // namespace kvoffload::client
