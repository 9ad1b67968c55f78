// The service manager's file-descriptor store (durable regions): how the daemon hands its region and
// state memfds to whoever restarts it, and takes them back at the next start.
//
// Protocol (systemd's, spoken by hand so the daemon needs no libsystemd for it; sd_notify(3),
// sd_listen_fds(3)):
//   - store:  a datagram "FDSTORE=1\nFDNAME=<name>" to $NOTIFY_SOCKET with the descriptor attached
//             as SCM_RIGHTS. The manager keeps its own copy; storing the same open file again is
//             ignored by systemd (and by kvoffload-supervise).
//   - remove: "FDSTOREREMOVE=1\nFDNAME=<name>" drops every stored descriptor of that name, so a
//             dropped engine's memory is really freed.
//   - start:  the manager passes the stored descriptors from fd 3 on, with LISTEN_PID (our pid),
//             LISTEN_FDS (how many) and LISTEN_FDNAMES (their names, ':'-separated).
// Under systemd the unit needs FileDescriptorStoreMax= (deploy/kvoffloadd.service); without it
// systemd drops what is stored, and a restart starts empty. Without systemd, kvoffload-supervise
// (supervise_main.cc) is the manager.
//
//   auto store = FdStoreFromEnvironment();               // NotifySocketFdStore or NoFdStore
//   RETURN_IF_ERROR(store->Store(RegionFdName(epoch, key), region->fd()));
//   ...
//   ASSIGN_OR_RETURN(std::vector<InheritedFd> fds, TakeInheritedFds());   // at start
//
// Names: "kvoffload.region.<epoch>.<engine key>" and "kvoffload.state.<epoch>.<engine key>":
// the region epoch (16 hex digits) pairs an engine's two descriptors and is its identity (the
// state descriptor holds the whole spec, checksummed); the key, with '/' written as '.', is only
// for people reading `systemd-analyze fdstore`. At most 255 characters, none of them ':' or a
// control character (systemd's rule, checked by IsValidFdName).
//
// Thread-safety: FdStore implementations are safe for concurrent use. Ownership: Store does not
// take the descriptor (the manager receives a copy); inherited descriptors are owned by the
// returned UniqueFds.
#ifndef KVOFFLOAD_DAEMON_RESTART_FD_STORE_H_
#define KVOFFLOAD_DAEMON_RESTART_FD_STORE_H_

#include <sys/types.h>

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "daemon/restart/unique_fd.h"

namespace kvoffload::daemon {

class FdStore {
 public:
  virtual ~FdStore() = default;
  // False when nothing outlives the process (no service manager).
  virtual bool enabled() const = 0;
  // Hands a copy of `fd` to the manager under `name`. INVALID_ARGUMENT for a bad name.
  virtual absl::Status Store(absl::string_view name, int fd) = 0;
  // Drops every descriptor stored under `name`.
  virtual absl::Status Remove(absl::string_view name) = 0;
  // Where the descriptors go, for log lines.
  virtual std::string Describe() const = 0;
};

// No service manager: Store and Remove succeed and keep nothing.
class NoFdStore : public FdStore {
 public:
  bool enabled() const override { return false; }
  absl::Status Store(absl::string_view name, int fd) override;
  absl::Status Remove(absl::string_view name) override;
  std::string Describe() const override { return "no fd store (NOTIFY_SOCKET is not set)"; }
};

// The manager's notify socket: a path, or "@name" for the abstract namespace.
class NotifySocketFdStore : public FdStore {
 public:
  explicit NotifySocketFdStore(std::string socket) : socket_(std::move(socket)) {}
  bool enabled() const override { return true; }
  absl::Status Store(absl::string_view name, int fd) override;
  absl::Status Remove(absl::string_view name) override;
  std::string Describe() const override { return "fd store at NOTIFY_SOCKET " + socket_; }

 private:
  const std::string socket_;
};

// NotifySocketFdStore on $NOTIFY_SOCKET when it is set, else NoFdStore.
std::unique_ptr<FdStore> FdStoreFromEnvironment();

// Sends one notify datagram (`text`, e.g. "READY=1") to `socket` with `fds` attached.
// UNAVAILABLE when nobody listens there; INVALID_ARGUMENT for an unusable address.
absl::Status SendNotify(const std::string& socket, absl::string_view text,
                        absl::Span<const int> fds = {});

// A notify datagram's "KEY=value" lines (later keys win, lines without '=' ignored).
std::map<std::string, std::string> ParseNotify(absl::string_view text);

// systemd's rule for FDNAME: 1..255 characters, printable ASCII, no ':'.
bool IsValidFdName(absl::string_view name);

enum class StoredKind { kRegion, kState };
std::string StoredFdName(StoredKind kind, uint64_t region_epoch, absl::string_view engine_key);
struct ParsedFdName {
  StoredKind kind = StoredKind::kRegion;
  uint64_t region_epoch = 0;
};
// nullopt for names that are not ours.
std::optional<ParsedFdName> ParseStoredFdName(absl::string_view name);

struct InheritedFd {
  std::string name;  // "stored" when the manager sent no name (systemd's default)
  UniqueFd fd;
};

// The descriptors the manager passed at start (LISTEN_PID must be this process, else none),
// marked close-on-exec; the three variables are removed from the environment so nothing the
// daemon starts inherits them. INVALID_ARGUMENT for malformed variables (nothing is taken).
absl::StatusOr<std::vector<InheritedFd>> TakeInheritedFds();

// The first descriptor the manager passes (SD_LISTEN_FDS_START).
inline constexpr int kListenFdsStart = 3;

}  // namespace kvoffload::daemon

#endif  // KVOFFLOAD_DAEMON_RESTART_FD_STORE_H_
