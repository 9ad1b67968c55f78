#include "daemon/daemon.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <map>
#include <string>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/errno_status.h"
#include "common/fd_usage.h"
#include "absl/synchronization/mutex.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "common/thread_name.h"
#include "daemon/lifetime/deferred_release.h"
#include "daemon/engine/registry.h"
#include "daemon/metrics/metrics_collector.h"
#include "daemon/metrics/metrics_server.h"
#include "daemon/region/memory_budget.h"
#include "daemon/service/admin_service.h"
#include "daemon/service/engine_service.h"
#include "daemon/service/limits.h"
#include "daemon/service/peer_acceptor.h"
#include "daemon/service/peer_credentials.h"
#include "daemon/service/worker_service.h"
#include "daemon/tier/block_io_factory.h"
#include "daemon/tier/cluster/cluster_tier.h"
#include "daemon/tier/disk_tier.h"
#include "daemon/tier/tier_link.h"
#include "grpcpp/ext/proto_server_reflection_plugin.h"
#include "grpcpp/grpcpp.h"
#include "grpcpp/health_check_service_interface.h"

namespace kvoffload::daemon {
namespace {

spdlog::logger* Log() {
  static spdlog::logger* log = common::Logger("daemon");
  return log;
}

absl::Status ErrnoStatus(const std::string& what) { return common::ErrnoStatus(errno, what); }

// Durable regions: the engines a previous daemon left in the fd store, back before any client connects.
void RestoreEngines(std::vector<InheritedFd> inherited, Durability* durability,
                    EngineRegistry* registry) {
  if (inherited.empty()) return;
  const absl::Time start = absl::Now();
  const size_t descriptors = inherited.size();
  Durability::Collected collected = durability->Collect(std::move(inherited));
  uint64_t engines = 0;
  uint64_t rows = 0;
  uint64_t refused = collected.refused;
  for (Durability::Restorable& r : collected.engines) {
    const std::string key = r.state.identity.spec.Key();
    const uint64_t epoch = r.state.identity.region_epoch;
    absl::StatusOr<EngineRegistry::RestoredEngine> restored = registry->Restore(std::move(r));
    if (!restored.ok()) {
      Log()->error("engine {} not restored: {}; it starts empty", key,
                   restored.status().ToString());
      durability->Forget(epoch, key);
      ++refused;
      continue;
    }
    ++engines;
    rows += restored->rows_restored;
  }
  Log()->info("restart: {} descriptors from the fd store, {} engines restored with {} READY "
              "rows, {} refused, in {:.1f} ms",
              descriptors, engines, rows, refused,
              absl::ToDoubleMilliseconds(absl::Now() - start));
}

}  // namespace

struct Daemon::Impl {
  DaemonOptions options;
  std::string data_socket;
  std::string admin_socket;
  int lock_fd = -1;
  // Destruction order matters (reverse of declaration): servers, then services, registry,
  // release queue (engines die there), budget, and the backend last.
  std::unique_ptr<CopyBackend> backend;
  // Durable regions; outlive the registry, which forgets dropped engines' descriptors through them.
  std::unique_ptr<FdStore> fd_store;
  std::unique_ptr<Durability> durability;
  // Copy callbacks still running; they touch `release` and `budget` (through engines).
  std::unique_ptr<std::atomic<int64_t>> callbacks_running =
      std::make_unique<std::atomic<int64_t>>(0);
  std::unique_ptr<MemoryBudget> budget;
  std::unique_ptr<DeferredRelease> release;
  // The tiers below the regions (null: none). Shut down before `release` is flushed for the last
  // time: their I/O callbacks hand references to it.
  std::shared_ptr<TierManager> tiers;
  std::unique_ptr<EngineRegistry> registry;
  // Filled by the acceptors, read by the services: outlives both.
  std::unique_ptr<PeerTable> peers = std::make_unique<PeerTable>();
  std::unique_ptr<EngineService> engine_service;
  std::unique_ptr<WorkerService> worker_service;
  std::unique_ptr<AdminService> admin_service;
  std::unique_ptr<grpc::Server> data_server;
  std::unique_ptr<grpc::Server> admin_server;
  // Accept connections and hand them to the servers; stopped before the servers.
  std::unique_ptr<PeerAcceptor> data_acceptor;
  std::unique_ptr<PeerAcceptor> admin_acceptor;
  // Declared after what it reads (registry, budget, backend): stops serving scrapes first.
  std::shared_ptr<MetricsCollector> metrics_collector;
  std::unique_ptr<MetricsServer> metrics_server;  // null when options.metrics_address is empty
  std::string backend_name;
  bool shut_down = false;
  // Health follows the copy devices: NOT_SERVING while any device is failed (a sticky CUDA error
  // needs a daemon restart, which is what a supervisor acting on health should do).
  absl::Mutex health_mu;
  bool health_stop ABSL_GUARDED_BY(health_mu) = false;
  std::thread health_watch;

  void WatchHealth() {
    common::SetThreadName("kvo-health");
    bool serving = true;
    absl::MutexLock lock(&health_mu);
    while (!health_mu.AwaitWithTimeout(absl::Condition(&health_stop), absl::Seconds(1))) {
      const std::map<int32_t, std::string> failed = backend->FailedDevices();
      if (failed.empty() == serving) continue;
      serving = failed.empty();
      for (grpc::Server* server : {data_server.get(), admin_server.get()}) {
        server->GetHealthCheckService()->SetServingStatus(serving);
      }
      for (const auto& [device, why] : failed) {
        Log()->error("health NOT_SERVING: device {}: {}", device, why);
      }
      if (serving) Log()->info("health SERVING again: no failed device");
    }
  }

  // Start's steps, in order. Creates the runtime directory and takes its lock (FAILED_PRECONDITION
  // while another kvoffloadd holds it); the sockets' paths, stale files removed.
  absl::Status TakeRuntimeDir();
  // The disk tier, when configured: its files opened (their records found again) before any
  // engine exists. Fails Start when it cannot be opened.
  absl::Status OpenTiers();
  // The fd store, budget, release queue and registry, with the engines of `restart` restored.
  void BuildRegistry(RestartInputs restart);
  // The services, both gRPC servers and their acceptors (the sockets exist from here on).
  absl::Status StartServers();

  void StopHealthWatch() {
    {
      absl::MutexLock lock(&health_mu);
      health_stop = true;
    }
    if (health_watch.joinable()) health_watch.join();
  }

  ~Impl() {
    StopHealthWatch();
    if (lock_fd >= 0) close(lock_fd);
  }
};

absl::Status Daemon::Impl::TakeRuntimeDir() {
  const std::string& dir = options.runtime_dir;
  // 0711, as systemd's RuntimeDirectoryMode: others may reach the sockets by name (their own
  // modes decide who connects) but not list the directory. Exactly that, whatever the umask.
  if (mkdir(dir.c_str(), 0711) == 0) {
    if (chmod(dir.c_str(), 0711) != 0) {
      return ErrnoStatus(absl::StrCat("cannot set mode 0711 on runtime dir ", dir));
    }
  } else if (errno != EEXIST) {
    return ErrnoStatus(absl::StrCat("cannot create runtime dir ", dir));
  }
  const std::string lock_path = absl::StrCat(dir, "/kvoffloadd.lock");
  lock_fd = open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0640);
  if (lock_fd < 0) return ErrnoStatus(absl::StrCat("cannot open ", lock_path));
  if (flock(lock_fd, LOCK_EX | LOCK_NB) != 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("another kvoffloadd is serving ", dir, " (", lock_path, " is locked)"));
  }
  data_socket = absl::StrCat(dir, "/", kDataSocketName);
  admin_socket = absl::StrCat(dir, "/", kAdminSocketName);
  unlink(data_socket.c_str());  // stale, from a daemon that died: we hold the lock now
  unlink(admin_socket.c_str());
  return absl::OkStatus();
}

absl::Status Daemon::Impl::OpenTiers() {
  release = std::make_unique<DeferredRelease>();
  std::vector<std::unique_ptr<tier::RecordStore>> stores;  // fastest first
  if (!options.disk_tier.paths.empty()) {
    const absl::Time start = absl::Now();
    ASSIGN_OR_RETURN(std::unique_ptr<tier::BlockIo> io,
                     tier::MakeBlockIo(options.disk_tier.queue_depth));
    ASSIGN_OR_RETURN(std::unique_ptr<tier::DiskTier> disk,
                     tier::DiskTier::Open(options.disk_tier, std::move(io)));
    const tier::DiskTierStats found = disk->stats();
    Log()->info("disk tier: {} paths, {} records of up to {} bytes in {} slots ({}), {} found "
                "again in {:.1f} ms",
                options.disk_tier.paths.size(), found.records,
                options.disk_tier.max_payload_bytes, found.capacity_slots,
                std::string(disk->io_name()), found.scan_records,
                absl::ToDoubleMilliseconds(absl::Now() - start));
    stores.push_back(std::move(disk));
  }
  if (!options.cluster_tier.seeds.empty()) {
    // Fails only for a configuration error (options, the password file, AUTH refused). A
    // cluster no seed answers for now is no reason not to serve: the tier starts empty, refuses
    // writes (UNAVAILABLE) and connects by itself once a seed answers.
    ASSIGN_OR_RETURN(std::unique_ptr<tier::cluster::ClusterTier> cluster,
                     tier::cluster::ClusterTier::Create(options.cluster_tier));
    if (cluster->backend_stats().connected) {
      Log()->info("cluster tier: {} seed nodes, key prefix {}", options.cluster_tier.seeds.size(),
                  options.cluster_tier.key_prefix);
    } else {
      Log()->warn("cluster tier: {} seed nodes, key prefix {}: no seed node answers yet; serving "
                  "with the cluster tier empty until one does (retried in the background)",
                  options.cluster_tier.seeds.size(), options.cluster_tier.key_prefix);
    }
    stores.push_back(std::move(cluster));
  }
  if (!stores.empty()) tiers = TierManager::Create(std::move(stores), release.get(), options.tiers);
  return absl::OkStatus();
}

void Daemon::Impl::BuildRegistry(RestartInputs restart) {
  fd_store = restart.fd_store != nullptr ? std::move(restart.fd_store)
                                         : std::make_unique<NoFdStore>();
  durability = std::make_unique<Durability>(fd_store.get(), options.state_key_bytes);
  budget = std::make_unique<MemoryBudget>(options.max_region_bytes);
  EngineDeps deps;
  deps.backend = backend.get();
  deps.budget = budget.get();
  deps.release = release.get();
  deps.region_options = options.region_options;
  deps.jobs = options.jobs;
  deps.callbacks_running = callbacks_running.get();
  deps.tiers = tiers.get();
  RegistryOptions registry_options = options.registry;
  registry_options.durability = durability.get();
  registry = std::make_unique<EngineRegistry>(deps, registry_options);
  RestoreEngines(std::move(restart.inherited), durability.get(), registry.get());
  Log()->info("{}", fd_store->Describe());
}

absl::Status Daemon::Impl::StartServers() {
  engine_service = std::make_unique<EngineService>(registry.get(), peers.get());
  worker_service = std::make_unique<WorkerService>(registry.get(), peers.get(), options.workers);
  admin_service = std::make_unique<AdminService>(registry.get(), backend.get(), budget.get(),
                                                 peers.get(), options.access, tiers.get());
  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  // The largest legal request, and no more (limits.h has the arithmetic; ValidateDaemonOptions
  // checked that it fits an int).
  const uint64_t max_receive = MaxReceiveMessageBytes(options.jobs.max_blocks_per_job);
  // Every worker session holds a server thread; the quota is a backstop behind the session cap
  // (unary calls need threads too), refusing calls with RESOURCE_EXHAUSTED instead of spawning.
  const int max_threads = static_cast<int>(options.workers.max_sessions) + 128;
  auto build = [&](std::vector<grpc::Service*> services, const char* quota_name) {
    // No listening port: the PeerAcceptor accepts and hands each connection over.
    grpc::ServerBuilder builder;
    builder.SetMaxReceiveMessageSize(static_cast<int>(max_receive));
    builder.SetMaxSendMessageSize(static_cast<int>(MaxSendMessageBytes()));
    grpc::ResourceQuota quota(quota_name);
    quota.SetMaxThreads(max_threads);
    builder.SetResourceQuota(quota);
    for (grpc::Service* s : services) builder.RegisterService(s);
    return builder.BuildAndStart();
  };
  data_server = build({engine_service.get(), worker_service.get()}, "data");
  admin_server = build({admin_service.get()}, "admin");
  if (data_server == nullptr || admin_server == nullptr) {
    return absl::UnavailableError("cannot start the gRPC servers");
  }
  ASSIGN_OR_RETURN(data_acceptor, PeerAcceptor::Start({data_socket, options.data_socket_mode,
                                                       options.data_socket_gid},
                                                      data_server.get(), peers.get()));
  ASSIGN_OR_RETURN(admin_acceptor, PeerAcceptor::Start({admin_socket, options.admin_socket_mode,
                                                        options.admin_socket_gid},
                                                       admin_server.get(), peers.get()));
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<Daemon>> Daemon::Start(const DaemonOptions& options,
                                                      std::unique_ptr<CopyBackend> backend,
                                                      RestartInputs restart) {
  RETURN_IF_ERROR(ValidateDaemonOptions(options));
  auto impl = std::make_unique<Impl>();
  impl->options = options;
  impl->backend_name = backend->name();
  impl->backend = std::move(backend);
  RETURN_IF_ERROR(impl->TakeRuntimeDir());
  // systemd gives services 1024 descriptors (soft) unless told otherwise; engines hold memfds
  // and workers hold connections, and --min_free_fds is kept below whatever limit is in force.
  absl::StatusOr<uint64_t> fd_limit = common::RaiseFdSoftLimit();
  if (!fd_limit.ok()) {
    Log()->warn("cannot raise RLIMIT_NOFILE: {}", fd_limit.status().ToString());
  } else {
    Log()->info("file descriptor limit {}", *fd_limit);
  }
  RETURN_IF_ERROR(impl->OpenTiers());
  // Engines come back from the fd store before any client can connect.
  impl->BuildRegistry(std::move(restart));
  if (!options.metrics_address.empty()) {
    // Before the gRPC sockets exist: a metrics address that cannot be bound fails Start cleanly.
    impl->metrics_collector = std::make_shared<MetricsCollector>(
        impl->registry.get(), impl->budget.get(), impl->backend.get(), impl->tiers.get());
    ASSIGN_OR_RETURN(impl->metrics_server,
                     MetricsServer::Start(options.metrics_address, impl->metrics_collector));
  }
  RETURN_IF_ERROR(impl->StartServers());
  impl->registry->Start();
  impl->health_watch = std::thread([raw = impl.get()] { raw->WatchHealth(); });
  Log()->info("kvoffloadd serving {} and {} (backend {}, node cap {} bytes)", impl->data_socket,
              impl->admin_socket, impl->backend_name, options.max_region_bytes);
  return std::unique_ptr<Daemon>(new Daemon(std::move(impl)));
}

Daemon::Daemon(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Daemon::~Daemon() { Shutdown(absl::ZeroDuration()); }

void Daemon::Shutdown(absl::Duration grace) {
  if (impl_ == nullptr || impl_->shut_down) return;
  impl_->shut_down = true;
  Log()->info("shutting down (grace {})", absl::FormatDuration(grace));
  impl_->StopHealthWatch();
  // Engines first: new jobs are refused, running copies get `grace`, open jobs fail, sessions
  // are told to end, so the servers' Shutdown does not wait on live worker streams.
  bool drained =
      impl_->registry->Shutdown(absl::UnavailableError("kvoffloadd is shutting down"), grace);
  // A retired job's copy callback may still be returning (it defers its references last).
  const absl::Time callbacks_deadline = absl::Now() + absl::Seconds(2);
  while (impl_->callbacks_running->load() > 0 && absl::Now() < callbacks_deadline) {
    absl::SleepFor(absl::Milliseconds(1));
  }
  drained = drained && impl_->callbacks_running->load() == 0;
  impl_->data_acceptor->Stop();  // no new connection while the servers shut down
  impl_->admin_acceptor->Stop();
  // Every engine is closed by now, so a call still open can only fail; and gRPC waits for this
  // deadline on every idle connection a client keeps (schedulers and workers do), which made a
  // clean restart cost 2 s of unavailability. 200 ms lets replies on their way go.
  const auto deadline = std::chrono::system_clock::now() + std::chrono::milliseconds(200);
  impl_->data_server->Shutdown(deadline);
  impl_->admin_server->Shutdown(deadline);
  impl_->data_server->Wait();
  impl_->admin_server->Wait();
  impl_->metrics_server.reset();
  // No engine stores or looks up any more: stop spilling, and wait for the tier's I/O.
  if (impl_->tiers != nullptr) impl_->tiers->Shutdown();
  impl_->release->Flush();
  if (!drained) {
    // A copy that outlived its grace may still write (PegaFlow 403): keep its region, its
    // mappings, the backend and everything its callback touches alive until the process exits
    // instead of freeing them now.
    impl_->backend.release();
    impl_->release.release();
    impl_->registry.release();
    impl_->budget.release();
    impl_->callbacks_running.release();
  }
  unlink(impl_->data_socket.c_str());
  unlink(impl_->admin_socket.c_str());
  Log()->info("stopped ({})", drained ? "all copies finished" : "copies were still running");
}

std::string Daemon::data_socket() const { return impl_->data_socket; }
std::string Daemon::admin_socket() const { return impl_->admin_socket; }
const std::string& Daemon::backend_name() const { return impl_->backend_name; }
int Daemon::metrics_port() const {
  return impl_->metrics_server == nullptr ? 0 : impl_->metrics_server->port();
}

}  // namespace kvoffload::daemon
