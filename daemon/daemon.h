// Daemon: the whole of kvoffloadd as a library object: the backend, node budget, engine registry,
// and the gRPC servers on the data and admin Unix sockets of a runtime directory. main.cc only
// turns flags into DaemonOptions; integration tests may run it in-process too.
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
#include "daemon/pool/pool.h"
#include "daemon/engine/access.h"
#include "daemon/region/region.h"
#include "daemon/restart/fd_store.h"
#include "daemon/restart/state_file.h"

namespace kvoffload::daemon {

struct DaemonOptions {
  std::string runtime_dir = "/run/kvoffload";
  uint64_t max_region_bytes = 0;  // node-wide cap over all regions; must be > 0
  absl::Duration idle_engine_ttl = absl::Minutes(10);
  absl::Duration job_timeout = absl::Seconds(30);
  // Admission and per-client bounds; see kvoffload.proto "Limits" for what each one refuses.
  uint64_t max_blocks_per_job = 1u << 20;
  uint32_t max_engines = 256;
  PoolOptions pools;  // issue 18: --pool_max_members, --pool_member_floor
  uint64_t min_free_fds = 256;
  uint64_t max_jobs_per_engine = 8192;
  uint64_t max_jobs_per_session = 4096;
  uint32_t max_worker_sessions = 1024;
  uint32_t max_queued_verdicts = 1024;
  absl::Duration first_message_timeout = absl::Seconds(10);
  RegionOptions region_options;
  std::string metrics_address;  // host:port for Prometheus text metrics; empty disables
  // Who may connect (file mode and group of each socket; unset group: the daemon's) and who
  // administers every engine (README "Security model").
  mode_t data_socket_mode = 0660;
  std::optional<gid_t> data_socket_gid;
  mode_t admin_socket_mode = 0660;
  std::optional<gid_t> admin_socket_gid;
  AccessPolicy access;
  // Issue 19: key bytes a durable row record holds (StateFile); longer keys are served but come
  // back as misses after a restart.
  uint32_t state_key_bytes = StateFile::kDefaultKeyCapacity;
};

// What a restart hands the daemon (issue 19). main.cc fills it from the environment before any
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
