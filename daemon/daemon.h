// Daemon: the whole of kvoffloadd as a library object: the backend, node budget, engine registry,
// and the gRPC servers on the data and admin Unix sockets of a runtime directory. main.cc only
// turns flags into DaemonOptions (daemon_options.h); integration tests may run it in-process too.
//
//   ASSIGN_OR_RETURN(auto daemon, Daemon::Start(options, std::move(backend)));
//   ... wait for a signal ...
//   daemon->Shutdown(absl::Seconds(10));
#ifndef KVOFFLOAD_DAEMON_DAEMON_H_
#define KVOFFLOAD_DAEMON_DAEMON_H_

#include <cstdint>
#include <sys/types.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "daemon/copy/copy_backend.h"
#include "daemon/daemon_options.h"
#include "daemon/restart/fd_store.h"
#include "daemon/restart/state_file.h"

namespace kvoffload::daemon {

// What a restart hands the daemon (durable regions). main.cc fills it from the environment before any
// thread starts; tests may pass a store of their own.
struct RestartInputs {
  // Where engines' memfds go (FdStoreFromEnvironment); null: nothing outlives the daemon.
  std::unique_ptr<FdStore> fd_store;
  // The descriptors the service manager passed at start (TakeInheritedFds).
  std::vector<InheritedFd> inherited;
};

inline constexpr char kDataSocketName[] = "kvoffload.sock";
inline constexpr char kAdminSocketName[] = "admin.sock";

// Thread-safe for its accessors. Shutdown is called once, from the owner.
class Daemon {
 public:
  // Creates the runtime directory (0755: each socket's own mode and group decide who connects)
  // if needed, takes its lock file (FAILED_PRECONDITION when another kvoffloadd holds it), raises
  // the soft RLIMIT_NOFILE to the hard limit, binds both sockets (their modes and groups set
  // before they listen) and starts serving. The daemon accepts connections itself, so that every
  // call knows its caller from the kernel (service/peer_acceptor.h). System call failures map by
  // errno (common::ErrnoStatus).
  // With a metrics_address, serves http://<metrics_address>/metrics too: INVALID_ARGUMENT when
  // it is not host:port, UNAVAILABLE when it cannot be bound (then no socket is created).
  // Before the sockets exist, the engines in `restart.inherited` are restored (Durability::
  // Collect, EngineRegistry::Restore); each one refused is logged and removed from the fd store,
  // and the daemon starts without it.
  static absl::StatusOr<std::unique_ptr<Daemon>> Start(const DaemonOptions& options,
                                                       std::unique_ptr<CopyBackend> backend,
                                                       RestartInputs restart = {});
  ~Daemon();  // Shutdown(grace = 0) if not yet shut down
  Daemon(const Daemon&) = delete;
  Daemon& operator=(const Daemon&) = delete;

  // Stops accepting calls, fails open jobs (UNAVAILABLE "kvoffloadd is shutting down"), lets
  // running copies finish for up to `grace`, releases every region, removes the sockets.
  void Shutdown(absl::Duration grace);

  std::string data_socket() const;
  std::string admin_socket() const;
  const std::string& backend_name() const;
  // The bound TCP port of the metrics endpoint (the real one for "host:0"); 0 when disabled.
  int metrics_port() const;

 private:
  struct Impl;
  explicit Daemon(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace kvoffload::daemon

#endif  // KVOFFLOAD_DAEMON_DAEMON_H_
