// restart_pin_bench (durable regions: serve while pinning, H200): how soon an engine's region serves its first row,
// and how soon it is fully pinned, with the CUDA backend, at first start and after a restart.
//
//   restart_pin_bench --gib=32,64 --chunk_mib=128 --threads=8 --thp=1,0
//
// The parent never touches CUDA (a CUDA process must not fork a CUDA child). Per region size it
// runs, each in a fresh process (posix_spawn of itself):
//   first_start    a CUDA backend with one worker open (its device context exists), then the
//                  daemon's own code (Region::Create unpopulated, SlotIndex, MakeRegionUsable):
//                  open_ms is how long that took, first_row_usable_ms when row 0 could be handed
//                  out (the index's readiness watermark > 0), first_load_ms a store + load of row
//                  0 through the backend, fully_pinned_s when every chunk was pinned. It then
//                  stores a pattern into one row of every chunk and hands the region's memfd to
//                  the parent over a socket (what the fd store does), thp=1 runs only.
//   after_restart  a new process adopts that memfd (Region::Adopt, not populated again), pins
//                  it again chunk by chunk through the same code, and loads every patterned row
//                  back through the backend: bytes_verified / mismatches. Once per --pause_us
//                  value, on the same memfd.
// Both phases also time a load of the probe row every 5 ms until the region is fully pinned
// (loads_while_pinning, load_p50_ms, load_max_ms): what an engine's copies see while the rest of
// its region is being registered.
// One JSON line per run on stdout. NUMA: the host's node count is reported; with more than one
// node each run is repeated with the region bound to node 0 (numa_node=0).
#include <cuda_runtime_api.h>
#include <fcntl.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/geometry.h"
#include "daemon/copy/copy_run.h"
#include "daemon/copy/cuda/cuda_copy_backend.h"
#include "daemon/copy/cuda/testing/local_worker.h"
#include "daemon/engine/engine_resources.h"
#include "daemon/index/slot_index.h"
#include "daemon/region/region.h"

ABSL_FLAG(std::string, gib, "32,64", "Region sizes in GiB, comma-separated.");
ABSL_FLAG(uint64_t, chunk_mib, 128, "Pinning chunk (--region_chunk_bytes) in MiB.");
ABSL_FLAG(int32_t, threads, 8, "Populate threads (--populate_threads).");
ABSL_FLAG(std::string, thp, "1,0", "Transparent huge pages on (1) / off (0), comma-separated.");
ABSL_FLAG(bool, huge_pages, false, "Also try hugetlbfs pages (falls back when none reserved).");
ABSL_FLAG(std::string, pause_us, "1000,0,10000",
          "RegionOptions.adopted_pin_pause_us of the after_restart runs, comma-separated: one "
          "run each on the same region (the daemon's default first).");
ABSL_FLAG(std::string, phase, "", "internal: first_start or after_restart");
ABSL_FLAG(int32_t, fd, -1, "internal: the socket (first_start) or the region memfd (restart)");
ABSL_FLAG(int32_t, numa_node, -1, "internal: region NUMA node");

namespace kvoffload {
namespace {

using daemon::CopyDirection;
using daemon::CopyJob;
using daemon::cuda::CudaCopyBackend;

constexpr uint64_t kRowBytes = 2ull << 20;  // one 2 MiB block per row

#define CHECK_OK(expr)                                                                \
  do {                                                                                \
    absl::Status _s = (expr);                                                         \
    if (!_s.ok()) {                                                                   \
      std::fprintf(stderr, "%s:%d: %s\n", __FILE__, __LINE__, _s.ToString().c_str()); \
      std::exit(2);                                                                   \
    }                                                                                 \
  } while (0)
#define CHECK_CUDA(expr)                                                               \
  do {                                                                                 \
    cudaError_t _e = (expr);                                                           \
    if (_e != cudaSuccess) {                                                           \
      std::fprintf(stderr, "%s:%d: %s\n", __FILE__, __LINE__, cudaGetErrorString(_e)); \
      std::exit(2);                                                                    \
    }                                                                                  \
  } while (0)

double Ms(absl::Time since) { return absl::ToDoubleMilliseconds(absl::Now() - since); }

void Pattern(uint64_t row, std::vector<uint64_t>* words) {
  words->resize(kRowBytes / 8);
  for (size_t i = 0; i < words->size(); ++i)
    (*words)[i] = (row << 32) ^ (i * 0x9e3779b97f4a7c15ull);
}

int NumaNodes() {
  int n = 0;
  for (int i = 0; i < 1024; ++i) {
    if (access(absl::StrCat("/sys/devices/system/node/node", i).c_str(), F_OK) == 0) ++n;
  }
  return n;
}

// The CUDA side of one process: a backend and a worker of one 2 MiB block on device 0.
struct Gpu {
  std::unique_ptr<CudaCopyBackend> backend;
  std::unique_ptr<daemon::WorkerMemory> memory;
  void* block = nullptr;
  double context_ms = 0;

  Gpu() {
    const absl::Time start = absl::Now();
    auto b = CudaCopyBackend::Create(daemon::cuda::CudaBackendOptions());
    CHECK_OK(b.status());
    backend = std::move(*b);
    CHECK_CUDA(cudaSetDevice(0));
    CHECK_CUDA(cudaMalloc(&block, kRowBytes));
    CudaCopyBackend::LocalTensor t;
    t.device_ptr = reinterpret_cast<uint64_t>(block);
    t.num_blocks = 1;
    t.block_stride_bytes = kRowBytes;
    t.page_bytes = kRowBytes;
    auto m = OpenLocalWorker(*backend, 0, {t}, {});
    CHECK_OK(m.status());
    memory = std::move(*m);
    context_ms = Ms(start);
  }

  absl::Status Copy(CopyDirection direction, uint8_t* base, uint64_t row) {
    CopyJob job;
    job.direction = direction;
    job.memory = memory.get();
    job.region_base = base;
    job.row_bytes = kRowBytes;
    job.slot_bytes = kRowBytes;
    job.runs = daemon::RunsOfLists({0}, {row}, 1);
    absl::Notification done;
    absl::Status status;
    backend->Submit(std::move(job), [&](absl::Status s, uint64_t) {
      status = s;
      done.Notify();
    });
    done.WaitForNotification();
    return status;
  }
};

struct Run {
  uint64_t gib = 0;
  bool thp = true;
  int numa_node = -1;
  int pause_us = -1;  // after_restart: RegionOptions.adopted_pin_pause_us; -1 the default
};

daemon::RegionOptions Options(const Run& run, bool populate_later) {
  daemon::RegionOptions o;
  o.populate_threads = absl::GetFlag(FLAGS_threads);
  o.transparent_huge_pages = run.thp;
  o.huge_pages = absl::GetFlag(FLAGS_huge_pages);
  o.numa_node = run.numa_node;
  o.ready_chunk_bytes = absl::GetFlag(FLAGS_chunk_mib) << 20;
  o.populate = !populate_later;
  if (run.pause_us >= 0) o.adopted_pin_pause_us = static_cast<uint32_t>(run.pause_us);
  return o;
}

common::Geometry GeometryOf(uint64_t bytes) {
  common::Geometry g;
  g.row_bytes = kRowBytes;
  g.num_rows = bytes / kRowBytes;
  g.capacity_bytes = g.num_rows * kRowBytes;
  return g;
}

// The rows that carry the pattern: the first row of every chunk and the last row.
std::vector<uint64_t> PatternRows(const common::Geometry& g) {
  const uint64_t per_chunk =
      daemon::ChunkBytesFor(kRowBytes, absl::GetFlag(FLAGS_chunk_mib) << 20) / kRowBytes;
  std::vector<uint64_t> rows;
  for (uint64_t r = 0; r < g.num_rows; r += per_chunk) rows.push_back(r);
  if (rows.back() != g.num_rows - 1) rows.push_back(g.num_rows - 1);
  return rows;
}

double Percentile(std::vector<double> v, double q) {
  if (v.empty()) return -1;
  std::sort(v.begin(), v.end());
  return v[static_cast<size_t>(q * (v.size() - 1))];
}

void PrintLine(const std::string& phase, const Run& run, const daemon::Region& region,
               double context_ms, double open_ms, double first_row_ms, double first_load_ms,
               double fully_s, const std::vector<double>& load_ms, uint64_t verified,
               uint64_t mismatches, const daemon::RegionReadiness& readiness) {
  std::printf(
      "{\"bench\":\"restart_pin\",\"phase\":\"%s\",\"region_gib\":%llu,\"chunk_mib\":%llu,"
      "\"threads\":%d,\"thp\":%d,\"hugetlb\":%d,\"numa_nodes\":%d,\"numa_node\":%d,"
      "\"pause_us\":%d,\"loads_while_pinning\":%zu,\"load_p50_ms\":%.2f,\"load_max_ms\":%.2f,"
      "\"context_ms\":%.1f,\"open_ms\":%.1f,\"first_row_usable_ms\":%.1f,"
      "\"first_load_ms\":%.1f,\"fully_pinned_s\":%.3f,\"ready_bytes\":%llu,\"total_bytes\":%llu,"
      "\"bytes_verified\":%llu,\"mismatches\":%llu,\"error\":\"%s\"}\n",
      phase.c_str(), static_cast<unsigned long long>(run.gib),
      static_cast<unsigned long long>(absl::GetFlag(FLAGS_chunk_mib)), absl::GetFlag(FLAGS_threads),
      run.thp ? 1 : 0, region.hugetlb() ? 1 : 0, NumaNodes(), run.numa_node,
      phase == "after_restart" ? static_cast<int>(Options(run, true).adopted_pin_pause_us) : -1,
      load_ms.size(), Percentile(load_ms, 0.5), Percentile(load_ms, 1.0), context_ms, open_ms,
      first_row_ms, first_load_ms, fully_s, static_cast<unsigned long long>(readiness.ready_bytes),
      static_cast<unsigned long long>(readiness.total_bytes),
      static_cast<unsigned long long>(verified), static_cast<unsigned long long>(mismatches),
      readiness.error.c_str());
  std::fflush(stdout);
}

// One engine's resources, made usable by the daemon's code; returns open / first-row times.
struct Opened {
  daemon::EngineResources resources;
  double open_ms = 0;
  double first_row_ms = 0;
  double first_load_ms = 0;
  double fully_s = 0;
  uint64_t probe_row = 0;  // the row the first-row probe stored over
  std::vector<double> load_ms;  // probe-row loads while the rest was being pinned
};

void Open(Gpu& gpu, const common::Geometry& g, const daemon::RegionOptions& options,
          std::unique_ptr<daemon::Region> region, bool populate, Opened* out) {
  const absl::Time start = absl::Now();
  out->resources.region = std::move(region);
  auto index = daemon::SlotIndex::Create(g.num_rows, nullptr, /*ready_rows=*/0);
  CHECK_OK(index.status());
  out->resources.index = std::move(*index);
  CHECK_OK(daemon::MakeRegionUsable(out->resources, g, gpu.backend.get(), options, populate));
  out->open_ms = Ms(start);
  out->first_row_ms = out->resources.index->ready_rows() > 0 ? out->open_ms : -1;
  // The first row any store could get, stored and loaded through the backend.
  uint8_t* base = out->resources.region->data();
  auto store = out->resources.index->PrepareStore({"first-row"});
  CHECK_OK(store.status());
  CHECK_OK(gpu.Copy(CopyDirection::kStore, base, store->rows[0]));
  CHECK_OK(gpu.Copy(CopyDirection::kLoad, base, store->rows[0]));
  out->first_load_ms = Ms(start);
  out->probe_row = store->rows[0];
  CHECK_OK(out->resources.index->CompleteStore(store->keys, false));
  const uint64_t total = out->resources.region->size();
  for (auto p = out->resources.preparer->progress(); p.ready_bytes < total && p.status.ok();
       p = out->resources.preparer->progress()) {
    const absl::Time t = absl::Now();
    CHECK_OK(gpu.Copy(CopyDirection::kLoad, base, out->probe_row));
    out->load_ms.push_back(Ms(t));
    absl::SleepFor(absl::Milliseconds(5));
  }
  CHECK_OK(out->resources.preparer->WaitAll());
  out->fully_s = absl::ToDoubleSeconds(absl::Now() - start);
}

int FirstStart(const Run& run, int sock) {
  Gpu gpu;
  const common::Geometry g = GeometryOf(run.gib << 30);
  const daemon::RegionOptions options = Options(run, /*populate_later=*/true);
  const absl::Time start = absl::Now();
  auto region = daemon::Region::Create("restart-pin-bench", g.capacity_bytes, options);
  CHECK_OK(region.status());
  const double map_ms = Ms(start);
  Opened o;
  Open(gpu, g, options, std::move(*region), /*populate=*/true, &o);
  o.open_ms += map_ms;
  o.first_row_ms += map_ms;
  o.first_load_ms += map_ms;
  o.fully_s += map_ms / 1e3;
  // The pattern, stored through the backend into one row per chunk.
  std::vector<uint64_t> words;
  uint64_t stored = 0;
  uint8_t* base = o.resources.region->data();
  for (uint64_t row : PatternRows(g)) {
    Pattern(row, &words);
    CHECK_CUDA(cudaMemcpy(gpu.block, words.data(), kRowBytes, cudaMemcpyHostToDevice));
    CHECK_CUDA(cudaDeviceSynchronize());  // landed before the backend's own stream reads it
    CHECK_OK(gpu.Copy(CopyDirection::kStore, base, row));
    stored += kRowBytes;
  }
  uint64_t mismatches = 0;
  for (uint64_t row : PatternRows(g)) {
    Pattern(row, &words);
    if (std::memcmp(base + row * kRowBytes, words.data(), kRowBytes) != 0) ++mismatches;
  }
  PrintLine("first_start", run, *o.resources.region, gpu.context_ms, o.open_ms, o.first_row_ms,
            o.first_load_ms, o.fully_s, o.load_ms, stored, mismatches,
            daemon::ReadinessOf(*o.resources.region, o.resources.preparer.get()));
  if (sock >= 0) {  // hand the memfd over, as to the fd store
    const int fd = o.resources.region->fd();
    char byte = 'r';
    iovec iov{&byte, 1};
    char control[CMSG_SPACE(sizeof(int))] = {};
    msghdr msg{};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control;
    msg.msg_controllen = sizeof(control);
    cmsghdr* c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int));
    std::memcpy(CMSG_DATA(c), &fd, sizeof(int));
    if (sendmsg(sock, &msg, 0) != 1) std::perror("sendmsg");
  }
  o.resources.preparer.reset();
  gpu.backend->UnregisterRegion(base);
  return mismatches == 0 ? 0 : 1;
}

int AfterRestart(const Run& run, int region_fd) {
  Gpu gpu;  // a new process: a new context, nothing pinned
  const common::Geometry g = GeometryOf(run.gib << 30);
  const daemon::RegionOptions options = Options(run, /*populate_later=*/true);
  const absl::Time start = absl::Now();
  auto region = daemon::Region::Adopt(region_fd, "restart-pin-bench", g.capacity_bytes, options);
  CHECK_OK(region.status());
  const double map_ms = Ms(start);
  Opened o;
  Open(gpu, g, options, std::move(*region), /*populate=*/false, &o);
  o.open_ms += map_ms;
  o.first_row_ms += map_ms;
  o.first_load_ms += map_ms;
  o.fully_s += map_ms / 1e3;
  // Every patterned row, loaded back through the backend, byte for byte, but the one this
  // process's first-row probe stored over (whichever row the index handed it).
  std::vector<uint64_t> words(kRowBytes / 8), got(kRowBytes / 8);
  uint64_t verified = 0, mismatches = 0;
  uint8_t* base = o.resources.region->data();
  for (uint64_t row : PatternRows(g)) {
    if (row == o.probe_row) continue;
    Pattern(row, &words);
    CHECK_CUDA(cudaMemset(gpu.block, 0, kRowBytes));
    // The backend copies on a stream of its own (non-blocking): the memset must be done first,
    // or it may land after the load (the H200 run of aae151a read row 64 back as zeros).
    CHECK_CUDA(cudaDeviceSynchronize());
    CHECK_OK(gpu.Copy(CopyDirection::kLoad, base, row));
    CHECK_CUDA(cudaMemcpy(got.data(), gpu.block, kRowBytes, cudaMemcpyDeviceToHost));
    if (std::memcmp(got.data(), words.data(), kRowBytes) != 0) {
      ++mismatches;
      size_t w = 0;
      while (w < words.size() && got[w] == words[w]) ++w;
      std::fprintf(stderr,
                   "restart_pin_bench: row %llu differs from word %zu (got %016llx, want %016llx); "
                   "the probe stored over row %llu\n",
                   static_cast<unsigned long long>(row), w,
                   static_cast<unsigned long long>(w < got.size() ? got[w] : 0),
                   static_cast<unsigned long long>(w < words.size() ? words[w] : 0),
                   static_cast<unsigned long long>(o.probe_row));
    }
    verified += kRowBytes;
  }
  // The probe's row gets its pattern back, so the next after_restart run on this memfd finds
  // every patterned row intact.
  for (uint64_t row : PatternRows(g)) {
    if (row != o.probe_row) continue;
    Pattern(row, &words);
    std::memcpy(base + row * kRowBytes, words.data(), kRowBytes);
  }
  PrintLine("after_restart", run, *o.resources.region, gpu.context_ms, o.open_ms, o.first_row_ms,
            o.first_load_ms, o.fully_s, o.load_ms, verified, mismatches,
            daemon::ReadinessOf(*o.resources.region, o.resources.preparer.get()));
  o.resources.preparer.reset();
  gpu.backend->UnregisterRegion(base);
  return mismatches == 0 ? 0 : 1;
}

extern "C" char** environ;

int Spawn(const std::string& self, const std::vector<std::string>& args) {
  std::vector<char*> argv;
  argv.push_back(const_cast<char*>(self.c_str()));
  for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  pid_t pid = 0;
  if (posix_spawn(&pid, self.c_str(), nullptr, nullptr, argv.data(), environ) != 0) {
    std::perror("posix_spawn");
    return 2;
  }
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 3;
}

int Parent(const std::string& self) {
  std::vector<uint64_t> sizes;
  for (absl::string_view s : absl::StrSplit(absl::GetFlag(FLAGS_gib), ',')) {
    uint64_t v = 0;
    if (absl::SimpleAtoi(s, &v) && v > 0) sizes.push_back(v);
  }
  std::vector<int> thps;
  for (absl::string_view s : absl::StrSplit(absl::GetFlag(FLAGS_thp), ',')) {
    int v = 0;
    if (absl::SimpleAtoi(s, &v)) thps.push_back(v);
  }
  std::vector<int> numa = {-1};
  if (NumaNodes() > 1) numa.push_back(0);
  const std::vector<std::string> common_args = {
      absl::StrCat("--chunk_mib=", absl::GetFlag(FLAGS_chunk_mib)),
      absl::StrCat("--threads=", absl::GetFlag(FLAGS_threads)),
      absl::StrCat("--huge_pages=", absl::GetFlag(FLAGS_huge_pages) ? "true" : "false")};
  int failures = 0;
  for (uint64_t gib : sizes) {
    for (int thp : thps) {
      for (int node : numa) {
        std::vector<std::string> args = common_args;
        args.push_back(absl::StrCat("--gib=", gib));
        args.push_back(absl::StrCat("--thp=", thp));
        args.push_back(absl::StrCat("--numa_node=", node));
        const bool restart = thp == thps.front() && node == -1;  // one restart per size
        int sv[2] = {-1, -1};
        if (restart && socketpair(AF_UNIX, SOCK_DGRAM, 0, sv) != 0) std::perror("socketpair");
        std::vector<std::string> first = args;
        first.push_back("--phase=first_start");
        first.push_back(absl::StrCat("--fd=", restart ? sv[1] : -1));
        failures += Spawn(self, first) != 0;
        if (!restart) continue;
        close(sv[1]);
        // Receive the region memfd, as the fd store keeps it across the restart.
        char byte = 0;
        iovec iov{&byte, 1};
        char control[CMSG_SPACE(sizeof(int))] = {};
        msghdr msg{};
        msg.msg_iov = &iov;
        msg.msg_iovlen = 1;
        msg.msg_control = control;
        msg.msg_controllen = sizeof(control);
        int region_fd = -1;
        if (recvmsg(sv[0], &msg, MSG_DONTWAIT) == 1 && CMSG_FIRSTHDR(&msg) != nullptr) {
          std::memcpy(&region_fd, CMSG_DATA(CMSG_FIRSTHDR(&msg)), sizeof(int));
        }
        close(sv[0]);
        if (region_fd < 0) {
          std::fprintf(stderr, "no region descriptor came back from first_start\n");
          ++failures;
          continue;
        }
        fcntl(region_fd, F_SETFD, 0);  // inherited by the restarted process
        for (absl::string_view pause : absl::StrSplit(absl::GetFlag(FLAGS_pause_us), ',')) {
          std::vector<std::string> again = args;
          again.push_back("--phase=after_restart");
          again.push_back(absl::StrCat("--fd=", region_fd));
          again.push_back(absl::StrCat("--pause_us=", pause));
          failures += Spawn(self, again) != 0;
        }
        close(region_fd);
      }
    }
  }
  std::fprintf(stderr, "restart_pin_bench: %d failed runs\n", failures);
  return failures == 0 ? 0 : 1;
}

}  // namespace
}  // namespace kvoffload

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  const std::string phase = absl::GetFlag(FLAGS_phase);
  kvoffload::Run run;
  if (!phase.empty()) {
    uint64_t gib = 0;
    int thp = 1;
    if (!absl::SimpleAtoi(absl::GetFlag(FLAGS_gib), &gib) ||
        !absl::SimpleAtoi(absl::GetFlag(FLAGS_thp), &thp)) {
      std::fprintf(stderr, "internal phases take one --gib and one --thp\n");
      return 2;
    }
    run.gib = gib;
    run.thp = thp != 0;
    run.numa_node = absl::GetFlag(FLAGS_numa_node);
    if (phase == "after_restart" && !absl::SimpleAtoi(absl::GetFlag(FLAGS_pause_us), &run.pause_us)) {
      std::fprintf(stderr, "after_restart takes one --pause_us\n");
      return 2;
    }
  }
  if (phase == "first_start") return kvoffload::FirstStart(run, absl::GetFlag(FLAGS_fd));
  if (phase == "after_restart") return kvoffload::AfterRestart(run, absl::GetFlag(FLAGS_fd));
  return kvoffload::Parent("/proc/self/exe");
}
