// kvoffloadd: wires flags to objects. Everything else is a library that tests link.
#include <grp.h>
#include <signal.h>
#include <sys/sysinfo.h>

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <optional>
#include <string>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/bytes.h"
#include "common/logging.h"
#include "daemon/backend_factory.h"
#include "daemon/daemon.h"
#include "daemon/flag_reload.h"
#include "daemon/tier_flags.h"
#include "daemon/restart/fd_store.h"
#include "daemon/restart/state_file.h"

namespace {
// Every flag's default comes from the options structs, where it is written once
// (daemon_options.h, backend_factory.h and the structs they embed).
kvoffload::daemon::DaemonOptions D() { return {}; }
kvoffload::daemon::BackendOptions B() { return {}; }
int64_t Seconds(absl::Duration d) { return absl::ToInt64Seconds(d); }
}  // namespace

ABSL_FLAG(std::string, runtime_dir, D().runtime_dir,
          "Directory of the data socket (kvoffload.sock) and the admin socket (admin.sock).");
ABSL_FLAG(std::string, max_region_bytes, "",
          "Node-wide cap over all regions, e.g. 64GiB. Empty: half of physical memory.");
ABSL_FLAG(std::string, backend, kvoffload::daemon::BackendKindName(B().kind),
          "Copy backend: auto (cuda when a GPU is present), cuda, host.");
ABSL_FLAG(int64_t, idle_engine_ttl_s, Seconds(D().registry.idle_engine_ttl),
          "Seconds an engine without workers keeps its region before it is freed; 0 keeps it.");
ABSL_FLAG(int64_t, job_timeout_s, Seconds(D().jobs.job_timeout),
          "Seconds a job may wait for votes and copies before it fails.");
ABSL_FLAG(uint64_t, max_blocks_per_job, D().jobs.max_blocks_per_job,
          "Largest job part (GPU blocks) a worker may submit; larger ones are INVALID_ARGUMENT. "
          "Also sizes the gRPC message limit (52 bytes per block: a run of one block with its "
          "five fields at their longest; kMaxSubmitBytesPerBlock).");
ABSL_FLAG(uint32_t, max_engines, D().registry.max_engines,
          "Most engines (DP replicas) at once; one more is RESOURCE_EXHAUSTED.");
ABSL_FLAG(uint32_t, pool_max_members, D().registry.pools.max_members,
          "Most engines one pool (EngineSpec.pool) holds, 1..16; its index reserves metadata "
          "for this many members' rows.");
ABSL_FLAG(double, pool_member_floor, D().registry.pools.member_floor,
          "Fraction of its own budget's rows each pool member keeps, of the rows it stored, "
          "against the other members' stores (0 disables; 1 = members never evict each other).");
ABSL_FLAG(uint64_t, min_free_fds, D().registry.min_free_fds,
          "A new engine is refused unless this many file descriptors stay free below "
          "RLIMIT_NOFILE (raised to its hard limit at start), so clients can always connect.");
ABSL_FLAG(uint64_t, max_jobs_per_engine, D().jobs.max_jobs_per_engine,
          "Jobs in flight per engine; an excess submit is RESOURCE_EXHAUSTED.");
ABSL_FLAG(uint64_t, max_jobs_per_session, D().jobs.max_jobs_per_session,
          "Jobs in flight per worker session; an excess submit is RESOURCE_EXHAUSTED.");
ABSL_FLAG(uint32_t, max_worker_sessions, D().workers.max_sessions,
          "Worker sessions at once (one daemon thread each); one more is RESOURCE_EXHAUSTED.");
ABSL_FLAG(uint32_t, max_queued_verdicts, D().workers.max_queued_verdicts,
          "Messages queued for a worker that does not read them before its session is no longer "
          "read from (flow control pushes back on the worker).");
ABSL_FLAG(int64_t, first_message_timeout_s, Seconds(D().workers.first_message_timeout),
          "Seconds a new worker session may take to send `register`; then it is cancelled.");
ABSL_FLAG(int32_t, populate_threads, D().region_options.populate_threads,
          "Threads that fault a new region in.");
ABSL_FLAG(uint64_t, region_chunk_bytes, kvoffload::daemon::kDefaultRegionChunkBytes,
          "Serve while pinning: a new or restored region is populated and registered in the "
          "background in chunks of about this many bytes (whole rows), each served as soon as it "
          "is ready; OpenEngine waits only for the first. 0: all of it before OpenEngine returns.");
ABSL_FLAG(int32_t, region_numa_node, D().region_options.numa_node,
          "Prefer this NUMA node for regions' pages (the node of the engines' GPUs on a host "
          "with several); -1: where they are first touched.");
ABSL_FLAG(bool, huge_pages, D().region_options.huge_pages,
          "Try hugetlbfs pages for regions (falls back, with a note).");
ABSL_FLAG(int32_t, host_copy_threads, B().host_copy_threads, "Host backend: memcpy threads.");
ABSL_FLAG(std::string, sm_copies, kvoffload::daemon::SmCopiesName(B().cuda.sm_copies),
          "CUDA: when the daemon may copy with kernels (the staged and kernel paths) instead of "
          "copy engines alone: if_mps (on a GPU where its context is an MPS client, so kernels "
          "share SMs with the model's instead of time-slicing it), always, or never.");
ABSL_FLAG(int32_t, copy_sms, B().cuda.copy_sms,
          "CUDA, SM paths only: SMs of one short gather/scatter launch that reorders pages "
          "through device staging; the copy engines carry the bytes.");
ABSL_FLAG(uint64_t, staging_mib_per_device, B().cuda.staging_bytes_per_device >> 20,
          "CUDA, SM paths only: device staging of all workers on one GPU together (each worker "
          "and direction takes 64 MiB while it stages, freed after 30 s idle); a job that finds "
          "no room goes by copy engines. 0: never stage.");
ABSL_FLAG(std::string, copy_path, kvoffload::daemon::CopyPathName(B().cuda.forced_path),
          "CUDA: auto (copy engines; with SM paths, the daemon picks per job), or force "
          "copy_engine, staged or kernel (diagnostics and benchmarks; staged and kernel turn "
          "the SM paths on).");
ABSL_FLAG(
    uint64_t, cuda_first_batch_copies, B().cuda.first_batch_copies,
    "CUDA, benchmarks only: copies of a job's first cudaMemcpyBatchAsync call on the "
    "copy-engine path; each later call takes twice as many (the engines start while the "
    "rest is issued). 0: every call takes up to --cuda_max_batch_copies.");
ABSL_FLAG(uint64_t, cuda_max_batch_copies, B().cuda.max_batch_copies,
          "CUDA, benchmarks only: the most copies of one cudaMemcpyBatchAsync call (1..4096).");
ABSL_FLAG(bool, cuda_batch_overlap_hint, B().cuda.batch_overlap_hint,
          "CUDA, benchmarks only: the copy-engine path's cudaMemcpyBatchAsync calls carry "
          "cudaMemcpyFlagPreferOverlapWithCompute.");
ABSL_FLAG(uint32_t, cuda_issue_threads, B().cuda.issue_threads,
          "CUDA: threads (each with a stream of its own) that hand one job's copies to the driver "
          "on the copy-engine path when the job has many (vLLM's per-layer pages with random "
          "blocks): the host's issue rate, not the link, bounds such jobs. 1: one thread (1..16).");
ABSL_FLAG(uint64_t, cuda_parallel_issue_min_copies, B().cuda.parallel_issue_min_copies,
          "CUDA, benchmarks only: a job is split over --cuda_issue_threads only with at least "
          "this many copies per thread.");
ABSL_FLAG(uint64_t, cuda_stream_wake_min_bytes, B().cuda.stream_wake_min_bytes,
          "CUDA, benchmarks only: a job of at least this many bytes is woken by a host function "
          "after its copy instead of being polled. 0: every job is polled.");
ABSL_FLAG(uint64_t, cuda_2d_min_blocks, B().cuda.strided_min_rows,
          "CUDA, benchmarks only: on the copy-engine path, a stretch of at least this many "
          "consecutive GPU blocks into equally spaced rows is one 2D copy per tensor "
          "(cudaMemcpy2DAsync). 0: one copy per page (the path before 2D copies).");
ABSL_FLAG(int64_t, shutdown_grace_s, Seconds(D().shutdown_grace),
          "On SIGTERM, seconds running copies get to finish.");
ABSL_FLAG(std::string, log_level, kvoffload::common::kDefaultLogLevel,
          "trace, debug, info, warn, error or off. SIGHUP re-reads it.");
ABSL_FLAG(std::string, metrics_address, kvoffload::daemon::kDefaultMetricsAddress,
          "host:port for Prometheus text metrics (/metrics); empty disables.");
ABSL_FLAG(std::string, socket_group, "",
          "Group (name or number) of the data socket (kvoffload.sock, mode 0660): processes in "
          "it may connect, and then use only their own engines. Empty: the daemon's group.");
ABSL_FLAG(std::string, admin_socket_group, "",
          "Group of the admin socket (admin.sock, mode 0660), separate from the data socket's. "
          "Empty: the daemon's group.");
ABSL_FLAG(bool, durable_regions, kvoffload::daemon::kDefaultDurableRegions,
          "Hand every engine's region and row state to the service manager's fd store "
          "(NOTIFY_SOCKET: systemd with FileDescriptorStoreMax=, or kvoffload-supervise) so that "
          "READY rows survive a restart, an upgrade or a crash. Without NOTIFY_SOCKET nothing is "
          "stored; false also releases what an earlier daemon stored.");
ABSL_FLAG(uint32_t, state_key_bytes, D().state_key_bytes,
          "Key bytes a durable row record holds (8..256; 24 + this, rounded up to 8, bytes per "
          "row of state). Rows with longer keys are served but come back as misses after a "
          "restart.");
ABSL_FLAG(std::string, admin_group, "",
          "Members of this group (and root) administer every engine through the admin socket "
          "(stats of all engines, drop, cleanup); others only their own. Empty: root only.");

// What this binary was built as, in its start-up line: "release" unless BUILD says otherwise
// (//daemon:kvoffloadd_next, the second binary of the upgrade test, is built from the same tree
// with another label).
#ifndef KVOFFLOADD_BUILD_LABEL
#define KVOFFLOADD_BUILD_LABEL "release"
#endif

namespace {

// A group name or number; NOT_FOUND names the flag.
absl::StatusOr<gid_t> ResolveGroup(const char* flag, const std::string& value) {
  uint32_t gid = 0;
  if (absl::SimpleAtoi(value, &gid)) return static_cast<gid_t>(gid);
  if (struct group* g = getgrnam(value.c_str())) return g->gr_gid;
  return absl::NotFoundError(absl::StrCat("--", flag, ": no group '", value, "'"));
}

int Fail(const absl::Status& status) {
  std::fprintf(stderr, "kvoffloadd: %s\n", status.ToString().c_str());
  return 1;
}

// sd_notify(3) by hand (daemon/restart/fd_store.h): nothing when there is no NOTIFY_SOCKET.
void Notify(const char* text) {
  const char* socket = getenv("NOTIFY_SOCKET");
  if (socket == nullptr || socket[0] == '\0') return;
  absl::Status s = kvoffload::daemon::SendNotify(socket, text);
  if (!s.ok()) std::fprintf(stderr, "kvoffloadd: notify: %s\n", s.ToString().c_str());
}

}  // namespace

int main(int argc, char** argv) {
  namespace d = kvoffload::daemon;
  const absl::Time process_start = absl::Now();
  absl::SetProgramUsageMessage("kvoffloadd: the per-node KV-cache offload daemon.");
  // Block the signals we wait for before any thread starts, so that only sigwait sees them.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGHUP);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  absl::ParseCommandLine(argc, argv);
  // Before any thread starts: this reads and clears LISTEN_* from the environment.
  absl::StatusOr<std::vector<d::InheritedFd>> inherited = d::TakeInheritedFds();
  if (!inherited.ok()) return Fail(inherited.status());

  if (auto s = kvoffload::common::SetLogLevel(absl::GetFlag(FLAGS_log_level)); !s.ok()) {
    return Fail(s);
  }
  d::DaemonOptions options;
  options.runtime_dir = absl::GetFlag(FLAGS_runtime_dir);
  if (absl::GetFlag(FLAGS_max_region_bytes).empty()) {
    struct sysinfo info;
    sysinfo(&info);
    options.max_region_bytes = static_cast<uint64_t>(info.totalram) * info.mem_unit / 2;
  } else {
    auto cap = kvoffload::common::ParseBytes(absl::GetFlag(FLAGS_max_region_bytes));
    if (!cap.ok())
      return Fail(
          absl::InvalidArgumentError(absl::StrCat("--max_region_bytes: ", cap.status().message())));
    options.max_region_bytes = *cap;
  }
  options.registry.idle_engine_ttl = absl::Seconds(absl::GetFlag(FLAGS_idle_engine_ttl_s));
  options.registry.max_engines = absl::GetFlag(FLAGS_max_engines);
  options.registry.pools.max_members = absl::GetFlag(FLAGS_pool_max_members);
  options.registry.pools.member_floor = absl::GetFlag(FLAGS_pool_member_floor);
  options.registry.min_free_fds = absl::GetFlag(FLAGS_min_free_fds);
  options.jobs.job_timeout = absl::Seconds(absl::GetFlag(FLAGS_job_timeout_s));
  options.jobs.max_blocks_per_job = absl::GetFlag(FLAGS_max_blocks_per_job);
  options.jobs.max_jobs_per_engine = absl::GetFlag(FLAGS_max_jobs_per_engine);
  options.jobs.max_jobs_per_session = absl::GetFlag(FLAGS_max_jobs_per_session);
  options.workers.max_sessions = absl::GetFlag(FLAGS_max_worker_sessions);
  options.workers.max_queued_verdicts = absl::GetFlag(FLAGS_max_queued_verdicts);
  options.workers.first_message_timeout =
      absl::Seconds(absl::GetFlag(FLAGS_first_message_timeout_s));
  options.region_options.populate_threads = absl::GetFlag(FLAGS_populate_threads);
  options.region_options.huge_pages = absl::GetFlag(FLAGS_huge_pages);
  options.region_options.ready_chunk_bytes = absl::GetFlag(FLAGS_region_chunk_bytes);
  options.region_options.numa_node = absl::GetFlag(FLAGS_region_numa_node);
  options.shutdown_grace = absl::Seconds(absl::GetFlag(FLAGS_shutdown_grace_s));
  options.metrics_address = absl::GetFlag(FLAGS_metrics_address);
  options.state_key_bytes = absl::GetFlag(FLAGS_state_key_bytes);
  // The tiers below the regions: their flags are in tier_flags.cc.
  if (auto s = d::ApplyTierFlags(&options); !s.ok()) return Fail(s);
  d::RestartInputs restart;
  if (absl::GetFlag(FLAGS_durable_regions)) {
    restart.fd_store = d::FdStoreFromEnvironment();
    restart.inherited = std::move(*inherited);
  } else if (!inherited->empty()) {
    // Durability switched off: what an earlier daemon stored is released, not served, so that
    // the manager does not keep its memory until the unit stops.
    std::unique_ptr<d::FdStore> store = d::FdStoreFromEnvironment();
    for (const d::InheritedFd& fd : *inherited) (void)store->Remove(fd.name);
    std::fprintf(stderr, "kvoffloadd: --durable_regions=false: released %zu stored descriptors\n",
                 inherited->size());
    inherited->clear();
  }
  struct GroupFlag {
    const char* name;
    std::string value;
    std::optional<uint32_t>* out;
  };
  const GroupFlag group_flags[] = {
      {"socket_group", absl::GetFlag(FLAGS_socket_group), &options.data_socket_gid},
      {"admin_socket_group", absl::GetFlag(FLAGS_admin_socket_group), &options.admin_socket_gid},
      {"admin_group", absl::GetFlag(FLAGS_admin_group), &options.access.admin_gid}};
  for (const GroupFlag& f : group_flags) {
    if (f.value.empty()) continue;
    absl::StatusOr<gid_t> gid = ResolveGroup(f.name, f.value);
    if (!gid.ok()) return Fail(gid.status());
    *f.out = *gid;
  }

  // Before the backend: a bad flag fails at once, not after CUDA has started (Start checks too).
  if (auto s = d::ValidateDaemonOptions(options); !s.ok()) return Fail(s);

  d::BackendOptions backend_options;
  absl::StatusOr<d::BackendKind> kind = d::ParseBackendKind(absl::GetFlag(FLAGS_backend));
  if (!kind.ok()) return Fail(kind.status());
  absl::StatusOr<d::cuda::ForcedPath> path = d::ParseCopyPath(absl::GetFlag(FLAGS_copy_path));
  if (!path.ok()) return Fail(path.status());
  absl::StatusOr<d::cuda::SmCopies> sm = d::ParseSmCopies(absl::GetFlag(FLAGS_sm_copies));
  if (!sm.ok()) return Fail(sm.status());
  backend_options.kind = *kind;
  backend_options.host_copy_threads = absl::GetFlag(FLAGS_host_copy_threads);
  d::cuda::CudaBackendOptions& cuda = backend_options.cuda;
  cuda.forced_path = *path;
  cuda.sm_copies = *sm;
  cuda.copy_sms = absl::GetFlag(FLAGS_copy_sms);
  const uint64_t staging_mib = absl::GetFlag(FLAGS_staging_mib_per_device);
  // Saturated, not wrapped: ValidateBackendOptions names the flag of a value past its bound.
  cuda.staging_bytes_per_device = staging_mib > (UINT64_MAX >> 20) ? UINT64_MAX : staging_mib << 20;
  cuda.first_batch_copies = absl::GetFlag(FLAGS_cuda_first_batch_copies);
  cuda.max_batch_copies = absl::GetFlag(FLAGS_cuda_max_batch_copies);
  cuda.batch_overlap_hint = absl::GetFlag(FLAGS_cuda_batch_overlap_hint);
  cuda.stream_wake_min_bytes = absl::GetFlag(FLAGS_cuda_stream_wake_min_bytes);
  cuda.issue_threads = absl::GetFlag(FLAGS_cuda_issue_threads);
  cuda.parallel_issue_min_copies = absl::GetFlag(FLAGS_cuda_parallel_issue_min_copies);
  cuda.strided_min_rows = absl::GetFlag(FLAGS_cuda_2d_min_blocks);
  auto backend = d::CreateBackend(backend_options);  // validates the options first
  if (!backend.ok()) return Fail(backend.status());

  auto daemon = d::Daemon::Start(options, std::move(*backend), std::move(restart));
  if (!daemon.ok()) return Fail(daemon.status());
  Notify("READY=1\nSTATUS=serving");
  kvoffload::common::Logger("daemon")->info("ready {:.1f} ms after start (build {})",
                                            absl::ToDoubleMilliseconds(absl::Now() - process_start),
                                            KVOFFLOADD_BUILD_LABEL);

  for (;;) {
    int signal = 0;
    sigwait(&signals, &signal);
    if (signal == SIGHUP) {
      d::ReloadLogLevel(argc, argv);
      continue;
    }
    break;
  }
  Notify("STOPPING=1");
  (*daemon)->Shutdown(options.shutdown_grace);
  return 0;
}
