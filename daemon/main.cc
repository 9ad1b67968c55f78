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
#include "daemon/restart/fd_store.h"
#include "daemon/restart/state_file.h"

ABSL_FLAG(std::string, runtime_dir, "/run/kvoffload",
          "Directory of the data socket (kvoffload.sock) and the admin socket (admin.sock).");
ABSL_FLAG(std::string, max_region_bytes, "",
          "Node-wide cap over all regions, e.g. 64GiB. Empty: half of physical memory.");
ABSL_FLAG(std::string, backend, "auto",
          "Copy backend: auto (cuda when a GPU is present), cuda, host.");
ABSL_FLAG(int64_t, idle_engine_ttl_s, 600,
          "Seconds an engine without workers keeps its region before it is freed; 0 keeps it.");
ABSL_FLAG(int64_t, job_timeout_s, 30,
          "Seconds a job may wait for votes and copies before it fails.");
ABSL_FLAG(uint64_t, max_blocks_per_job, 1u << 20,
          "Largest job part (GPU blocks) a worker may submit; larger ones are INVALID_ARGUMENT. "
          "Also sizes the gRPC message limit (52 bytes per block: a run of one block with its "
          "five fields at their longest; kMaxSubmitBytesPerBlock).");
ABSL_FLAG(uint32_t, max_engines, 256,
          "Most engines (DP replicas) at once; one more is RESOURCE_EXHAUSTED.");
ABSL_FLAG(uint32_t, pool_max_members, 8,
          "Most engines one pool (EngineSpec.pool) holds, 1..16; its index reserves metadata "
          "for this many members' rows.");
ABSL_FLAG(double, pool_member_floor, 0.25,
          "Fraction of its own budget's rows each pool member keeps, of the rows it stored, "
          "against the other members' stores (0 disables; 1 = members never evict each other).");
ABSL_FLAG(uint64_t, min_free_fds, 256,
          "A new engine is refused unless this many file descriptors stay free below "
          "RLIMIT_NOFILE (raised to its hard limit at start), so clients can always connect.");
ABSL_FLAG(uint64_t, max_jobs_per_engine, 8192,
          "Jobs in flight per engine; an excess submit is RESOURCE_EXHAUSTED.");
ABSL_FLAG(uint64_t, max_jobs_per_session, 4096,
          "Jobs in flight per worker session; an excess submit is RESOURCE_EXHAUSTED.");
ABSL_FLAG(uint32_t, max_worker_sessions, 1024,
          "Worker sessions at once (one daemon thread each); one more is RESOURCE_EXHAUSTED.");
ABSL_FLAG(uint32_t, max_queued_verdicts, 1024,
          "Messages queued for a worker that does not read them before its session is no longer "
          "read from (flow control pushes back on the worker).");
ABSL_FLAG(int64_t, first_message_timeout_s, 10,
          "Seconds a new worker session may take to send `register`; then it is cancelled.");
ABSL_FLAG(int32_t, populate_threads, 8, "Threads that fault a new region in.");
ABSL_FLAG(uint64_t, region_chunk_bytes, 128ull << 20,
          "Serve while pinning: a new or restored region is populated and registered in the "
          "background in chunks of about this many bytes (whole rows), each served as soon as it "
          "is ready; OpenEngine waits only for the first. 0: all of it before OpenEngine returns.");
ABSL_FLAG(int32_t, region_numa_node, -1,
          "Prefer this NUMA node for regions' pages (the node of the engines' GPUs on a host "
          "with several); -1: where they are first touched.");
ABSL_FLAG(bool, huge_pages, false, "Try hugetlbfs pages for regions (falls back, with a note).");
ABSL_FLAG(int32_t, host_copy_threads, 4, "Host backend: memcpy threads.");
ABSL_FLAG(std::string, sm_copies, "if_mps",
          "CUDA: when the daemon may copy with kernels (the staged and kernel paths) instead of "
          "copy engines alone: if_mps (on a GPU where its context is an MPS client, so kernels "
          "share SMs with the model's instead of time-slicing it), always, or never.");
ABSL_FLAG(int32_t, copy_sms, 8,
          "CUDA, SM paths only: SMs of one short gather/scatter launch that reorders pages "
          "through device staging; the copy engines carry the bytes.");
ABSL_FLAG(uint64_t, staging_mib_per_device, 1024,
          "CUDA, SM paths only: device staging of all workers on one GPU together (each worker "
          "and direction takes 64 MiB while it stages, freed after 30 s idle); a job that finds "
          "no room goes by copy engines. 0: never stage.");
ABSL_FLAG(std::string, copy_path, "auto",
          "CUDA: auto (copy engines; with SM paths, the daemon picks per job), or force "
          "copy_engine, staged or kernel (diagnostics and benchmarks; staged and kernel turn "
          "the SM paths on).");
ABSL_FLAG(
    uint64_t, cuda_first_batch_copies, 8,
    "CUDA, benchmarks only: copies of a job's first cudaMemcpyBatchAsync call on the "
    "copy-engine path; each later call takes twice as many (the engines start while the "
    "rest is issued). 0: every call takes up to --cuda_max_batch_copies.");
ABSL_FLAG(uint64_t, cuda_max_batch_copies, 4096,
          "CUDA, benchmarks only: the most copies of one cudaMemcpyBatchAsync call (1..4096).");
ABSL_FLAG(bool, cuda_batch_overlap_hint, true,
          "CUDA, benchmarks only: the copy-engine path's cudaMemcpyBatchAsync calls carry "
          "cudaMemcpyFlagPreferOverlapWithCompute.");
ABSL_FLAG(uint32_t, cuda_issue_threads, 4,
          "CUDA: threads (each with a stream of its own) that hand one job's copies to the driver "
          "on the copy-engine path when the job has many (vLLM's per-layer pages with random "
          "blocks): the host's issue rate, not the link, bounds such jobs. 1: one thread (1..16).");
ABSL_FLAG(uint64_t, cuda_parallel_issue_min_copies, 1024,
          "CUDA, benchmarks only: a job is split over --cuda_issue_threads only with at least "
          "this many copies per thread.");
ABSL_FLAG(uint64_t, cuda_stream_wake_min_bytes, uint64_t{32} << 20,
          "CUDA, benchmarks only: a job of at least this many bytes is woken by a host function "
          "after its copy instead of being polled. 0: every job is polled.");
ABSL_FLAG(uint64_t, cuda_2d_min_blocks, 2,
          "CUDA, benchmarks only: on the copy-engine path, a stretch of at least this many "
          "consecutive GPU blocks into equally spaced rows is one 2D copy per tensor "
          "(cudaMemcpy2DAsync). 0: one copy per page (the path before 2D copies).");
ABSL_FLAG(int64_t, shutdown_grace_s, 10, "On SIGTERM, seconds running copies get to finish.");
ABSL_FLAG(std::string, log_level, "info",
          "trace, debug, info, warn, error or off. SIGHUP re-reads it.");
ABSL_FLAG(std::string, metrics_address, "127.0.0.1:9470",
          "host:port for Prometheus text metrics (/metrics); empty disables.");
ABSL_FLAG(std::string, socket_group, "",
          "Group (name or number) of the data socket (kvoffload.sock, mode 0660): processes in "
          "it may connect, and then use only their own engines. Empty: the daemon's group.");
ABSL_FLAG(std::string, admin_socket_group, "",
          "Group of the admin socket (admin.sock, mode 0660), separate from the data socket's. "
          "Empty: the daemon's group.");
ABSL_FLAG(bool, durable_regions, true,
          "Hand every engine's region and row state to the service manager's fd store "
          "(NOTIFY_SOCKET: systemd with FileDescriptorStoreMax=, or kvoffload-supervise) so that "
          "READY rows survive a restart, an upgrade or a crash. Without NOTIFY_SOCKET nothing is "
          "stored; false also releases what an earlier daemon stored.");
ABSL_FLAG(uint32_t, state_key_bytes, kvoffload::daemon::StateFile::kDefaultKeyCapacity,
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
  if (absl::GetFlag(FLAGS_idle_engine_ttl_s) < 0 || absl::GetFlag(FLAGS_job_timeout_s) <= 0 ||
      absl::GetFlag(FLAGS_shutdown_grace_s) < 0 ||
      absl::GetFlag(FLAGS_first_message_timeout_s) <= 0) {
    return Fail(absl::InvalidArgumentError(
        "--idle_engine_ttl_s and --shutdown_grace_s must be >= 0, --job_timeout_s and "
        "--first_message_timeout_s > 0"));
  }
  if (absl::GetFlag(FLAGS_max_engines) == 0 || absl::GetFlag(FLAGS_max_jobs_per_engine) == 0 ||
      absl::GetFlag(FLAGS_max_jobs_per_session) == 0 ||
      absl::GetFlag(FLAGS_max_worker_sessions) == 0 ||
      absl::GetFlag(FLAGS_max_queued_verdicts) == 0 ||
      absl::GetFlag(FLAGS_max_blocks_per_job) == 0) {
    return Fail(absl::InvalidArgumentError(
        "--max_engines, --max_jobs_per_engine, --max_jobs_per_session, --max_worker_sessions, "
        "--max_queued_verdicts and --max_blocks_per_job must be > 0"));
  }
  options.idle_engine_ttl = absl::Seconds(absl::GetFlag(FLAGS_idle_engine_ttl_s));
  options.job_timeout = absl::Seconds(absl::GetFlag(FLAGS_job_timeout_s));
  options.max_blocks_per_job = absl::GetFlag(FLAGS_max_blocks_per_job);
  options.max_engines = absl::GetFlag(FLAGS_max_engines);
  options.pools.max_members = absl::GetFlag(FLAGS_pool_max_members);
  options.pools.member_floor = absl::GetFlag(FLAGS_pool_member_floor);
  if (options.pools.max_members == 0 ||
      options.pools.max_members > kvoffload::daemon::SlotIndex::kMaxMembers ||
      !(options.pools.member_floor >= 0 && options.pools.member_floor <= 1)) {
    return Fail(absl::InvalidArgumentError(absl::StrCat("--pool_max_members must be 1..",
                                                        kvoffload::daemon::SlotIndex::kMaxMembers,
                                                        " and --pool_member_floor in [0, 1]")));
  }
  options.min_free_fds = absl::GetFlag(FLAGS_min_free_fds);
  options.max_jobs_per_engine = absl::GetFlag(FLAGS_max_jobs_per_engine);
  options.max_jobs_per_session = absl::GetFlag(FLAGS_max_jobs_per_session);
  options.max_worker_sessions = absl::GetFlag(FLAGS_max_worker_sessions);
  options.max_queued_verdicts = absl::GetFlag(FLAGS_max_queued_verdicts);
  options.first_message_timeout = absl::Seconds(absl::GetFlag(FLAGS_first_message_timeout_s));
  options.region_options.populate_threads = absl::GetFlag(FLAGS_populate_threads);
  options.region_options.huge_pages = absl::GetFlag(FLAGS_huge_pages);
  options.region_options.ready_chunk_bytes = absl::GetFlag(FLAGS_region_chunk_bytes);
  options.region_options.numa_node = absl::GetFlag(FLAGS_region_numa_node);
  options.metrics_address = absl::GetFlag(FLAGS_metrics_address);
  options.state_key_bytes = absl::GetFlag(FLAGS_state_key_bytes);
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

  d::BackendOptions backend_options;
  backend_options.kind = absl::GetFlag(FLAGS_backend);
  backend_options.host_copy_threads = absl::GetFlag(FLAGS_host_copy_threads);
  backend_options.copy_sms = absl::GetFlag(FLAGS_copy_sms);
  backend_options.copy_path = absl::GetFlag(FLAGS_copy_path);
  backend_options.sm_copies = absl::GetFlag(FLAGS_sm_copies);
  backend_options.staging_mib_per_device = absl::GetFlag(FLAGS_staging_mib_per_device);
  backend_options.first_batch_copies = absl::GetFlag(FLAGS_cuda_first_batch_copies);
  backend_options.max_batch_copies = absl::GetFlag(FLAGS_cuda_max_batch_copies);
  backend_options.batch_overlap_hint = absl::GetFlag(FLAGS_cuda_batch_overlap_hint);
  backend_options.stream_wake_min_bytes = absl::GetFlag(FLAGS_cuda_stream_wake_min_bytes);
  backend_options.issue_threads = absl::GetFlag(FLAGS_cuda_issue_threads);
  backend_options.parallel_issue_min_copies =
      absl::GetFlag(FLAGS_cuda_parallel_issue_min_copies);
  backend_options.strided_min_rows = absl::GetFlag(FLAGS_cuda_2d_min_blocks);
  auto backend = d::CreateBackend(backend_options);
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
  (*daemon)->Shutdown(absl::Seconds(absl::GetFlag(FLAGS_shutdown_grace_s)));
  return 0;
}
