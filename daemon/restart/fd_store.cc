#include "daemon/restart/fd_store.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstring>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "common/errno_status.h"
#include "common/logging.h"

namespace kvoffload::daemon {
namespace {

spdlog::logger* FdStoreLog() {
  static spdlog::logger* const log = common::Logger("restart");
  return log;
}

constexpr absl::string_view kRegionPrefix = "kvoffload.region.";
constexpr absl::string_view kStatePrefix = "kvoffload.state.";
constexpr size_t kMaxFdName = 255;
// SCM_RIGHTS carries at most this many descriptors per message (Linux SCM_MAX_FD).
constexpr size_t kMaxFdsPerMessage = 253;

absl::Status CheckName(absl::string_view name) {
  if (IsValidFdName(name)) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      "fd store name '", absl::CEscape(name),
      "' is not 1..255 printable ASCII characters without ':'"));
}

}  // namespace

absl::Status NoFdStore::Store(absl::string_view name, int) { return CheckName(name); }
absl::Status NoFdStore::Remove(absl::string_view name) { return CheckName(name); }

absl::Status NotifySocketFdStore::Store(absl::string_view name, int fd) {
  if (absl::Status s = CheckName(name); !s.ok()) return s;
  const int fds[] = {fd};
  return SendNotify(socket_, absl::StrCat("FDSTORE=1\nFDNAME=", name), fds);
}

absl::Status NotifySocketFdStore::Remove(absl::string_view name) {
  if (absl::Status s = CheckName(name); !s.ok()) return s;
  return SendNotify(socket_, absl::StrCat("FDSTOREREMOVE=1\nFDNAME=", name));
}

std::unique_ptr<FdStore> FdStoreFromEnvironment() {
  const char* socket = getenv("NOTIFY_SOCKET");
  if (socket == nullptr || socket[0] == '\0') return std::make_unique<NoFdStore>();
  return std::make_unique<NotifySocketFdStore>(socket);
}

absl::Status SendNotify(const std::string& socket, absl::string_view text,
                        absl::Span<const int> fds) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (socket.empty() || socket.size() >= sizeof(addr.sun_path) ||
      (socket[0] != '/' && socket[0] != '@')) {
    return absl::InvalidArgumentError(
        absl::StrCat("notify socket '", socket, "' is neither an absolute path nor @abstract"));
  }
  if (fds.size() > kMaxFdsPerMessage) {
    return absl::InvalidArgumentError(absl::StrCat(fds.size(), " descriptors in one message"));
  }
  std::memcpy(addr.sun_path, socket.data(), socket.size());
  socklen_t addr_len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + socket.size());
  if (socket[0] == '@') {
    addr.sun_path[0] = '\0';  // abstract namespace: no terminating NUL counted
  } else {
    addr_len += 1;
  }
  UniqueFd fd(::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0));
  if (!fd.valid()) return common::ErrnoStatus(errno, "notify socket: socket");

  iovec iov{const_cast<char*>(text.data()), text.size()};
  msghdr msg{};
  msg.msg_name = &addr;
  msg.msg_namelen = addr_len;
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  std::vector<char> control;
  if (!fds.empty()) {
    control.assign(CMSG_SPACE(sizeof(int) * fds.size()), 0);
    msg.msg_control = control.data();
    msg.msg_controllen = control.size();
    cmsghdr* c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int) * fds.size());
    std::memcpy(CMSG_DATA(c), fds.data(), sizeof(int) * fds.size());
  }
  ssize_t sent;
  do {
    sent = sendmsg(fd.get(), &msg, MSG_NOSIGNAL);
  } while (sent < 0 && errno == EINTR);
  if (sent < 0) {
    const int err = errno;
    const std::string what = absl::StrCat("notify socket ", socket, ": sendmsg");
    // Nobody there (the manager went away, or a stale variable): not an internal error.
    if (err == ECONNREFUSED || err == ENOENT) {
      return absl::UnavailableError(absl::StrCat(what, ": ", strerror(err)));
    }
    return common::ErrnoStatus(err, what);
  }
  return absl::OkStatus();
}

std::map<std::string, std::string> ParseNotify(absl::string_view text) {
  std::map<std::string, std::string> fields;
  for (absl::string_view line : absl::StrSplit(text, '\n', absl::SkipEmpty())) {
    const size_t eq = line.find('=');
    if (eq == absl::string_view::npos) continue;
    fields[std::string(line.substr(0, eq))] = std::string(line.substr(eq + 1));
  }
  return fields;
}

bool IsValidFdName(absl::string_view name) {
  if (name.empty() || name.size() > kMaxFdName) return false;
  for (char c : name) {
    if (c < 0x20 || c > 0x7e || c == ':') return false;
  }
  return true;
}

std::string StoredFdName(StoredKind kind, uint64_t region_epoch, absl::string_view engine_key) {
  std::string key(engine_key);
  for (char& c : key) {
    if (c == '/' || !IsValidFdName(absl::string_view(&c, 1))) c = '.';
  }
  std::string name = absl::StrCat(kind == StoredKind::kRegion ? kRegionPrefix : kStatePrefix,
                                  absl::StrFormat("%016x", region_epoch), ".", key);
  if (name.size() > kMaxFdName) name.resize(kMaxFdName);  // the key part is informational
  return name;
}

std::optional<ParsedFdName> ParseStoredFdName(absl::string_view name) {
  ParsedFdName parsed;
  if (absl::StartsWith(name, kRegionPrefix)) {
    parsed.kind = StoredKind::kRegion;
    name.remove_prefix(kRegionPrefix.size());
  } else if (absl::StartsWith(name, kStatePrefix)) {
    parsed.kind = StoredKind::kState;
    name.remove_prefix(kStatePrefix.size());
  } else {
    return std::nullopt;
  }
  if (name.size() < 17 || name[16] != '.') return std::nullopt;
  for (char c : name.substr(0, 16)) {
    if (!absl::ascii_isxdigit(static_cast<unsigned char>(c))) return std::nullopt;
  }
  if (!absl::SimpleHexAtoi(name.substr(0, 16), &parsed.region_epoch)) return std::nullopt;
  return parsed;
}

absl::StatusOr<std::vector<InheritedFd>> TakeInheritedFds() {
  std::vector<InheritedFd> fds;
  const char* pid_text = getenv("LISTEN_PID");
  const char* count_text = getenv("LISTEN_FDS");
  const char* names_text = getenv("LISTEN_FDNAMES");
  const std::string names = names_text == nullptr ? "" : names_text;
  auto clear_environment = [] {
    unsetenv("LISTEN_PID");
    unsetenv("LISTEN_FDS");
    unsetenv("LISTEN_FDNAMES");
  };
  if (pid_text == nullptr || count_text == nullptr) {
    clear_environment();
    return fds;
  }
  int64_t pid = 0;
  int64_t count = 0;
  if (!absl::SimpleAtoi(pid_text, &pid) || !absl::SimpleAtoi(count_text, &count) || count < 0 ||
      count > 1 << 20) {
    clear_environment();
    return absl::InvalidArgumentError(absl::StrCat("LISTEN_PID='", pid_text, "' LISTEN_FDS='",
                                                   count_text, "' are not numbers"));
  }
  clear_environment();
  if (pid != getpid()) {
    // Meant for another process (a parent's leftovers): not ours to use, but not to leak into
    // every child either.
    int open_fds = 0;
    for (int64_t i = 0; i < count; ++i) {
      const int fd = kListenFdsStart + static_cast<int>(i);
      const int flags = fcntl(fd, F_GETFD);
      if (flags < 0) continue;
      ++open_fds;
      fcntl(fd, F_SETFD, flags | FD_CLOEXEC);
    }
    FdStoreLog()->warn("LISTEN_PID={} is not this process ({}): {} of LISTEN_FDS={} descriptors are "
                "open; ignored and marked close-on-exec",
                pid, getpid(), open_fds, count);
    return fds;
  }
  std::vector<std::string> split;
  if (!names.empty()) split = absl::StrSplit(names, ':');
  for (int64_t i = 0; i < count; ++i) {
    const int fd = kListenFdsStart + static_cast<int>(i);
    if (fcntl(fd, F_GETFD) < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("LISTEN_FDS=", count, " but descriptor ", fd, " is not open"));
    }
  }
  for (int64_t i = 0; i < count; ++i) {
    const int fd = kListenFdsStart + static_cast<int>(i);
    fcntl(fd, F_SETFD, FD_CLOEXEC);
    InheritedFd inherited;
    inherited.name = static_cast<size_t>(i) < split.size() && !split[i].empty() ? split[i]
                                                                                : "stored";
    inherited.fd.reset(fd);
    fds.push_back(std::move(inherited));
  }
  return fds;
}

}  // namespace kvoffload::daemon
