// GPU copy baselines on one GPU: what the copy backend's kernels achieve against the copy engines
// and against one big contiguous copy (the link's ceiling), per page size and direction.
// Results and conclusions: docs/TUNING.md.
//
//   gpu_baselines [--sweep] [--quick] [--no_layers] [--reps=5] [--mib=1024]
//                 [--pages=4096,16384,65536,262144,524288,1048576,2097152]
//                 [--sm=N] [--threads=N] [--unroll=N]   (the `kernel` rows' config; default: the
//                 backend's kernel path, 16 × 512 × 8)
//
// Every measurement moves --mib MiB between a device buffer and a registered (pinned, mapped)
// host buffer, page by page in a random page order, and is the median of --reps timed runs after
// one warm-up. Methods:
//   ceiling          one contiguous cudaMemcpyAsync of the whole buffer
//   memcpy_per_page  one cudaMemcpyAsync per page
//   memcpy_batch     cudaMemcpyBatchAsync, 4096 pages per call
//   kernel           the backend's gather/scatter kernel (LaunchCopyPages) on raw pointers
//   backend          CudaCopyBackend::Submit end to end (descriptor build, copy, completion
//                    polling), wall clock, default options (copy engines unless MPS runs);
//                    backend_kernel / backend_staged force those paths
//   kernel_duplex    store and load kernels at once on two streams (sum of both directions)
//   kernel_sweep     (--sweep) the kernel over grid × threads × unroll (× unit bytes)
//   backend_layers[_staged]  many tensors per block (large slots, small pages): stores, loads on
//                    the direct kernel path, loads staged through the copy engines
// --quick: only kernel, backend and duplex (no memcpy methods, no correctness check).
// Output: one JSON line per measurement: {"method", "direction" (store = GPU→host, load =
// host→GPU), "page_bytes", "gbps" (1e9 bytes/s), ...config}, then a summary table. The kernel's
// store and load are checked page by page at every page size ({"check": ..., "bad_pages": 0}).
#include <cuda_runtime_api.h>
#include <sys/mman.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <numeric>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "daemon/copy/cuda/copy_kernels.h"
#include "daemon/copy/cuda/cuda_copy_backend.h"
#include "daemon/copy/cuda/testing/local_worker.h"
#include "tests/gpu/test_kernels.h"
#include "tests/gpu/test_pattern.h"

namespace kvoffload::bench {
namespace {

using daemon::CopyDirection;
using daemon::CopyJob;
using daemon::RunsOfLists;
using daemon::cuda::CopyKernelConfig;
using daemon::cuda::CopyPagesArgs;
using daemon::cuda::CudaBackendOptions;
using daemon::cuda::CudaCopyBackend;
using daemon::cuda::KernelTensor;
using daemon::cuda::PagePair;

#define CHECK_CUDA(expr)                                                 \
  do {                                                                   \
    const cudaError_t check_cuda_err_ = (expr);                          \
    if (check_cuda_err_ != cudaSuccess) {                                \
      std::fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #expr, \
                   cudaGetErrorName(check_cuda_err_));                   \
      std::exit(1);                                                      \
    }                                                                    \
  } while (0)

#define CHECK_OK(expr)                                        \
  do {                                                        \
    const absl::Status check_ok_status_ = (expr);             \
    if (!check_ok_status_.ok()) {                             \
      std::fprintf(stderr, "%s:%d: %s\n", __FILE__, __LINE__, \
                   check_ok_status_.ToString().c_str());      \
      std::exit(1);                                           \
    }                                                         \
  } while (0)

struct Flags {
  bool sweep = false;
  int reps = 5;
  uint64_t bytes = uint64_t{1} << 30;
  std::vector<uint64_t> pages = {4096, 16384, 65536, 262144, 524288, 1048576, 2097152};
  bool layers = true;
  bool quick = false;  // kernel, backend and duplex only (no memcpy methods, no check)
  int sm = 0;          // 0: CudaBackendOptions defaults
  int threads = 0;
  int unroll = 0;
  bool interference = true;  // compute-kernel slowdown while stores stream (direct vs staged)
};

Flags ParseFlags(int argc, char** argv) {
  Flags f;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    uint64_t v = 0;
    if (a == "--sweep") {
      f.sweep = true;
    } else if (a == "--quick") {
      f.quick = true;
    } else if (a == "--no_interference") {
      f.interference = false;
    } else if (a == "--no_layers") {
      f.layers = false;
    } else if (a.rfind("--sm=", 0) == 0 && absl::SimpleAtoi(a.substr(5), &v)) {
      f.sm = static_cast<int>(v);
    } else if (a.rfind("--threads=", 0) == 0 && absl::SimpleAtoi(a.substr(10), &v)) {
      f.threads = static_cast<int>(v);
    } else if (a.rfind("--unroll=", 0) == 0 && absl::SimpleAtoi(a.substr(9), &v)) {
      f.unroll = static_cast<int>(v);
    } else if (a.rfind("--reps=", 0) == 0 && absl::SimpleAtoi(a.substr(7), &v)) {
      f.reps = static_cast<int>(v);
    } else if (a.rfind("--mib=", 0) == 0 && absl::SimpleAtoi(a.substr(6), &v)) {
      f.bytes = v << 20;
    } else if (a.rfind("--pages=", 0) == 0) {
      f.pages.clear();
      for (absl::string_view p : absl::StrSplit(a.substr(8), ',')) {
        if (absl::SimpleAtoi(p, &v)) f.pages.push_back(v);
      }
    } else {
      std::fprintf(stderr, "unknown flag %s\n", a.c_str());
      std::exit(2);
    }
  }
  return f;
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Runs `enqueue` once to warm up, then `reps` times between events; returns the median ms.
double TimeOnStream(cudaStream_t stream, int reps, const std::function<void()>& enqueue) {
  cudaEvent_t start, stop;
  CHECK_CUDA(cudaEventCreate(&start));
  CHECK_CUDA(cudaEventCreate(&stop));
  enqueue();
  CHECK_CUDA(cudaStreamSynchronize(stream));
  std::vector<double> ms;
  for (int r = 0; r < reps; ++r) {
    CHECK_CUDA(cudaEventRecord(start, stream));
    enqueue();
    CHECK_CUDA(cudaEventRecord(stop, stream));
    CHECK_CUDA(cudaEventSynchronize(stop));
    float t = 0;
    CHECK_CUDA(cudaEventElapsedTime(&t, start, stop));
    ms.push_back(t);
  }
  CHECK_CUDA(cudaEventDestroy(start));
  CHECK_CUDA(cudaEventDestroy(stop));
  return Median(ms);
}

struct Result {
  std::string method;  // with the layout for backend_layers*
  std::string direction;
  uint64_t page_bytes;
  double gbps;
};

std::vector<Result> g_results;

void Emit(const std::string& method, bool store, uint64_t page, uint64_t bytes, double ms,
          const std::string& extra = "") {
  const double gbps = static_cast<double>(bytes) / (ms * 1e6);
  std::printf(
      "{\"method\":\"%s\",\"direction\":\"%s\",\"page_bytes\":%lu,\"gbps\":%.2f,"
      "\"median_ms\":%.3f%s%s}\n",
      method.c_str(), store ? "store" : "load", static_cast<unsigned long>(page), gbps, ms,
      extra.empty() ? "" : ",", extra.c_str());
  std::fflush(stdout);
  std::string label = method;
  if (method.rfind("backend_layers", 0) == 0) {
    // "tensors":N,"block_bytes":B,"rows":"random" → backend_layers/N×page/random
    unsigned tensors = 0;
    std::sscanf(extra.c_str(), "\"tensors\":%u", &tensors);
    label = (method == "backend_layers" ? "layers" : "layers_staged") + std::string("/") +
            std::to_string(tensors) + "x" + std::to_string(page / 1024) + "K/" +
            (extra.find("sequential") != std::string::npos ? "seq" : "rnd");
  }
  g_results.push_back({label, store ? "store" : "load", page, gbps});
}

std::string ConfigJson(const CopyKernelConfig& c, uint32_t unit_bytes) {
  char buf[160];
  std::snprintf(buf, sizeof(buf), "\"grid\":%d,\"threads\":%d,\"unroll\":%d,\"unit_bytes\":%u",
                c.max_blocks, c.threads_per_block, c.unroll, unit_bytes);
  return buf;
}

class Bench {
 public:
  explicit Bench(const Flags& flags) : flags_(flags) {}

  // Backend options: the defaults. `backend` rows: the path the daemon picks itself
  // (ForcedPath::kAuto); `backend_kernel` and `backend_staged` rows force one path, so each
  // path's win is measured in the same run.
  CudaBackendOptions Options() const { return CudaBackendOptions(); }

  // The `kernel` rows' config: the backend's kernel path, with the config flags applied.
  CopyKernelConfig KernelFlagsConfig() const {
    CopyKernelConfig c;
    if (flags_.sm > 0) c.max_blocks = flags_.sm;
    if (flags_.threads > 0) c.threads_per_block = flags_.threads;
    if (flags_.unroll > 0) c.unroll = flags_.unroll;
    return c;
  }

  void Run() {
    CHECK_CUDA(cudaSetDevice(0));
    cudaDeviceProp props;
    CHECK_CUDA(cudaGetDeviceProperties(&props, 0));
    std::fprintf(stderr, "device: %s, %d SMs\n", props.name, props.multiProcessorCount);
    absl::StatusOr<std::unique_ptr<CudaCopyBackend>> backend = CudaCopyBackend::Create(Options());
    CHECK_OK(backend.status());
    backend_ = std::move(*backend);
    const uint64_t bytes = flags_.bytes;
    CHECK_CUDA(cudaMalloc(&device_, bytes));
    host_ = static_cast<uint8_t*>(mmap(nullptr, bytes, PROT_READ | PROT_WRITE,
                                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0));
    if (host_ == MAP_FAILED) {
      std::perror("mmap");
      std::exit(1);
    }
    CHECK_CUDA(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    CHECK_CUDA(cudaStreamCreateWithFlags(&stream2_, cudaStreamNonBlocking));
    CHECK_CUDA(testing::LaunchFillPattern(device_, bytes, 7, stream_));
    CHECK_CUDA(cudaStreamSynchronize(stream_));
    for (uint64_t page : flags_.pages) RunPageSize(page);
    if (flags_.layers) {
      // Realistic layouts: many tensors per block, so a row's slot (one host run) is large while
      // pages stay small. Random rows, and sequential rows (adjacent slots merge into one run).
      struct Layout {
        uint32_t tensors;
        uint64_t page;
        bool sequential;
      };
      for (const Layout& l :
           {Layout{64, 4096, false}, Layout{64, 16384, false}, Layout{128, 16384, false},
            Layout{32, 65536, false}, Layout{64, 4096, true}}) {
        RunLayers(l.tensors, l.page, l.sequential);
      }
    }
    if (flags_.interference) {
      RunInterference(false);
      RunInterference(true);
    }
    Summary();
  }

 private:
  // A compute-bound kernel of one full wave (every SM, as many blocks as fit), timed alone and
  // while the backend streams store jobs back to back (64 tensors × 4 KiB pages, random rows:
  // 256 KiB host runs), on the direct gather path or the staged one.
  void RunInterference(bool staged) {
    int sms = 0;
    CHECK_CUDA(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
    const int grid = sms * testing::FmaBurnBlocksPerSm();
    float* out = nullptr;
    CHECK_CUDA(cudaMalloc(reinterpret_cast<void**>(&out), sizeof(float)));
    cudaStream_t compute = nullptr;
    CHECK_CUDA(cudaStreamCreateWithFlags(&compute, cudaStreamNonBlocking));
    auto time_burn = [&](uint64_t iters, int reps) {
      std::vector<double> v;
      for (int r = 0; r < reps; ++r) {
        cudaEvent_t a, b;
        CHECK_CUDA(cudaEventCreate(&a));
        CHECK_CUDA(cudaEventCreate(&b));
        CHECK_CUDA(cudaEventRecord(a, compute));
        CHECK_CUDA(testing::LaunchFmaBurn(grid, iters, out, compute));
        CHECK_CUDA(cudaEventRecord(b, compute));
        CHECK_CUDA(cudaEventSynchronize(b));
        float ms = 0;
        CHECK_CUDA(cudaEventElapsedTime(&ms, a, b));
        v.push_back(ms);
        cudaEventDestroy(a);
        cudaEventDestroy(b);
      }
      return Median(v);
    };
    uint64_t iters = 1 << 14;
    const double probe = time_burn(iters, 3);
    iters = static_cast<uint64_t>(iters * (20.0 / std::max(probe, 1e-3)));  // ~20 ms alone
    const double alone = time_burn(iters, 7);

    const uint32_t tensors = 64;
    const uint64_t page = 4096;
    const uint64_t bpb = tensors * page;
    const uint64_t n = flags_.bytes / bpb;
    const uint64_t bytes = n * bpb;
    std::vector<uint64_t> rows(n);
    std::iota(rows.begin(), rows.end(), 0);
    std::mt19937_64 rng(99);
    std::shuffle(rows.begin(), rows.end(), rng);
    std::vector<uint64_t> blocks(n);
    std::iota(blocks.begin(), blocks.end(), 0);
    std::vector<CudaCopyBackend::LocalTensor> local;
    for (uint32_t t = 0; t < tensors; ++t) {
      CudaCopyBackend::LocalTensor lt;
      lt.device_ptr = reinterpret_cast<uint64_t>(device_) + t * n * page;
      lt.num_blocks = n;
      lt.block_stride_bytes = page;
      lt.page_bytes = page;
      local.push_back(lt);
    }
    CudaBackendOptions options = Options();
    options.forced_path =
        staged ? daemon::cuda::ForcedPath::kStaged : daemon::cuda::ForcedPath::kKernel;
    absl::StatusOr<std::unique_ptr<CudaCopyBackend>> backend = CudaCopyBackend::Create(options);
    CHECK_OK(backend.status());
    CHECK_OK((*backend)->RegisterRegion(host_, bytes, bpb));
    absl::StatusOr<std::unique_ptr<daemon::WorkerMemory>> memory =
        OpenLocalWorker(**backend, 0, local, {});
    CHECK_OK(memory.status());
    std::atomic<bool> stop{false};
    std::atomic<uint64_t> stored{0};
    std::atomic<int> started{0};
    const absl::Time t0 = absl::Now();
    std::thread feeder([&] {
      while (!stop.load()) {
        CopyJob job;
        job.direction = CopyDirection::kStore;
        job.memory = memory->get();
        job.region_base = host_;
        job.row_bytes = bpb;
        job.slot_bytes = bpb;
        job.runs = RunsOfLists(blocks, rows, 1);
        absl::Notification finished;
        absl::Status status;
        (*backend)->Submit(std::move(job), [&](absl::Status s, uint64_t b) {
          status = s;
          stored.fetch_add(b);
          finished.Notify();
        });
        started.fetch_add(1);
        finished.WaitForNotification();
        CHECK_OK(status);
      }
    });
    while (started.load() < 2) absl::SleepFor(absl::Microseconds(100));
    const double with = time_burn(iters, 7);
    stop.store(true);
    feeder.join();
    const double seconds = absl::ToDoubleSeconds(absl::Now() - t0);
    const double slowdown = 100.0 * (with / alone - 1.0);
    std::printf(
        "{\"method\":\"interference\",\"store_path\":\"%s\",\"compute_grid\":%d,"
        "\"alone_ms\":%.3f,\"with_stores_ms\":%.3f,\"slowdown_pct\":%.1f,"
        "\"store_gbps_meanwhile\":%.2f}\n",
        staged ? "staged" : "direct", grid, alone, with, slowdown, stored.load() / seconds / 1e9);
    std::fflush(stdout);
    memory->reset();
    (*backend)->UnregisterRegion(host_);
    cudaStreamDestroy(compute);
    cudaFree(out);
  }

  void RunPageSize(uint64_t page) {
    const uint64_t bytes = flags_.bytes / page * page;
    const uint64_t n = bytes / page;
    // The backend pins the buffer (Portable | Mapped); every method uses that registration.
    CHECK_OK(backend_->RegisterRegion(host_, bytes, page));
    void* host_device = nullptr;
    CHECK_CUDA(cudaHostGetDevicePointer(&host_device, host_, 0));
    std::vector<uint64_t> perm(n);
    std::iota(perm.begin(), perm.end(), 0);
    std::mt19937_64 rng(page);
    std::shuffle(perm.begin(), perm.end(), rng);

    // Pair table on the device (for the raw kernel): block i ↔ host page perm[i].
    std::vector<PagePair> pairs(n);
    for (uint64_t i = 0; i < n; ++i) {
      pairs[i] = {i, reinterpret_cast<uint64_t>(host_device) + perm[i] * page};
    }
    PagePair* d_pairs = nullptr;
    KernelTensor* d_tensor = nullptr;
    CHECK_CUDA(cudaMalloc(reinterpret_cast<void**>(&d_pairs), n * sizeof(PagePair)));
    CHECK_CUDA(cudaMemcpy(d_pairs, pairs.data(), n * sizeof(PagePair), cudaMemcpyHostToDevice));
    KernelTensor tensor{reinterpret_cast<uint64_t>(device_), page, page, 0, 0};
    CHECK_CUDA(cudaMalloc(reinterpret_cast<void**>(&d_tensor), sizeof(KernelTensor)));
    CHECK_CUDA(cudaMemcpy(d_tensor, &tensor, sizeof(tensor), cudaMemcpyHostToDevice));

    const CopyKernelConfig config = KernelFlagsConfig();
    auto kernel_args = [&](bool store, uint32_t unit_bytes) {
      KernelTensor t = tensor;
      CopyPagesArgs a;
      a.store = store;
      a.tensors = d_tensor;
      a.num_tensors = 1;
      a.units_per_pair = daemon::cuda::AssignUnits(&t, 1, unit_bytes);
      a.pairs = d_pairs;
      a.num_pairs = n;
      a.unit_bytes = unit_bytes;
      a.vector_bytes = 16;
      return a;
    };

    for (bool store : {true, false}) {
      const cudaMemcpyKind kind = store ? cudaMemcpyDeviceToHost : cudaMemcpyHostToDevice;
      // ceiling
      double ms = TimeOnStream(stream_, flags_.reps, [&] {
        CHECK_CUDA(store ? cudaMemcpyAsync(host_, device_, bytes, kind, stream_)
                         : cudaMemcpyAsync(device_, host_, bytes, kind, stream_));
      });
      Emit("ceiling", store, page, bytes, ms);
      if (flags_.quick) goto kernels;
      // memcpy_per_page
      ms = TimeOnStream(stream_, flags_.reps, [&] {
        for (uint64_t i = 0; i < n; ++i) {
          uint8_t* d = static_cast<uint8_t*>(device_) + i * page;
          uint8_t* h = host_ + perm[i] * page;
          CHECK_CUDA(store ? cudaMemcpyAsync(h, d, page, kind, stream_)
                           : cudaMemcpyAsync(d, h, page, kind, stream_));
        }
      });
      Emit("memcpy_per_page", store, page, bytes, ms);
      // memcpy_batch
      ms = TimeOnStream(stream_, flags_.reps, [&] { Batch(store, page, n, perm); });
      Emit("memcpy_batch", store, page, bytes, ms, "\"batch\":4096");
    kernels:
      // kernel (default config)
      const CopyPagesArgs a = kernel_args(store, daemon::cuda::kUnitBytes);
      ms = TimeOnStream(stream_, flags_.reps,
                        [&] { CHECK_CUDA(LaunchCopyPages(a, config, stream_)); });
      Emit("kernel", store, page, bytes, ms, ConfigJson(config, daemon::cuda::kUnitBytes));
      // backend end to end
      ms = TimeBackend(backend_.get(), store, page, n, perm);
      Emit("backend", store, page, bytes, ms, ConfigJson(config, daemon::cuda::kUnitBytes));
      for (daemon::cuda::ForcedPath forced :
           {daemon::cuda::ForcedPath::kKernel, daemon::cuda::ForcedPath::kStaged}) {
        // Another backend needs the registration meanwhile.
        backend_->UnregisterRegion(host_);
        CudaBackendOptions one = Options();
        one.forced_path = forced;
        absl::StatusOr<std::unique_ptr<CudaCopyBackend>> b = CudaCopyBackend::Create(one);
        CHECK_OK(b.status());
        CHECK_OK((*b)->RegisterRegion(host_, bytes, page));
        ms = TimeBackend(b->get(), store, page, n, perm);
        Emit(forced == daemon::cuda::ForcedPath::kKernel ? "backend_kernel" : "backend_staged",
             store, page, bytes, ms, ConfigJson(config, daemon::cuda::kUnitBytes));
        (*b)->UnregisterRegion(host_);
        b->reset();
        CHECK_OK(backend_->RegisterRegion(host_, bytes, page));
      }
    }
    if (!flags_.quick) {
      VerifyKernel(kernel_args(true, daemon::cuda::kUnitBytes),
                   kernel_args(false, daemon::cuda::kUnitBytes), config, page, n, perm);
    }

    // Store and load at once (two streams): the sum of both directions.
    {
      const CopyPagesArgs s = kernel_args(true, daemon::cuda::kUnitBytes);
      const CopyPagesArgs l = kernel_args(false, daemon::cuda::kUnitBytes);
      cudaEvent_t start, stop, joined;
      CHECK_CUDA(cudaEventCreate(&start));
      CHECK_CUDA(cudaEventCreate(&stop));
      CHECK_CUDA(cudaEventCreateWithFlags(&joined, cudaEventDisableTiming));
      std::vector<double> times;
      for (int r = 0; r <= flags_.reps; ++r) {
        CHECK_CUDA(cudaEventRecord(start, stream_));
        CHECK_CUDA(cudaStreamWaitEvent(stream2_, start, 0));
        CHECK_CUDA(LaunchCopyPages(s, config, stream_));
        CHECK_CUDA(LaunchCopyPages(l, config, stream2_));
        CHECK_CUDA(cudaEventRecord(joined, stream2_));
        CHECK_CUDA(cudaStreamWaitEvent(stream_, joined, 0));
        CHECK_CUDA(cudaEventRecord(stop, stream_));
        CHECK_CUDA(cudaEventSynchronize(stop));
        float t = 0;
        CHECK_CUDA(cudaEventElapsedTime(&t, start, stop));
        if (r > 0) times.push_back(t);
      }
      Emit("kernel_duplex", true, page, 2 * bytes, Median(times),
           ConfigJson(config, daemon::cuda::kUnitBytes));
      cudaEventDestroy(start);
      cudaEventDestroy(stop);
      cudaEventDestroy(joined);
    }

    if (flags_.sweep) {
      const bool full = page == 4096 || page == 2097152;
      std::vector<int> grids =
          full ? std::vector<int>{8, 16, 24, 32, 48, 66, 132} : std::vector<int>{16, 24, 32};
      std::vector<int> threads =
          full ? std::vector<int>{256, 512, 1024} : std::vector<int>{512, 1024};
      std::vector<int> unrolls = full ? std::vector<int>{4, 8, 16} : std::vector<int>{8, 16};
      for (bool store : {true, false}) {
        for (int g : grids) {
          for (int t : threads) {
            for (int u : unrolls) {
              if (t > daemon::cuda::MaxThreadsPerBlock(u)) continue;
              CopyKernelConfig c{g, t, u};
              const CopyPagesArgs a = kernel_args(store, daemon::cuda::kUnitBytes);
              const double ms = TimeOnStream(stream_, flags_.reps,
                                             [&] { CHECK_CUDA(LaunchCopyPages(a, c, stream_)); });
              Emit("kernel_sweep", store, page, bytes, ms, ConfigJson(c, daemon::cuda::kUnitBytes));
            }
          }
        }
        if (page >= 65536) {
          for (uint32_t unit : {4096u, 65536u}) {
            const CopyPagesArgs a = kernel_args(store, unit);
            const double ms = TimeOnStream(
                stream_, flags_.reps, [&] { CHECK_CUDA(LaunchCopyPages(a, config, stream_)); });
            Emit("kernel_sweep", store, page, bytes, ms, ConfigJson(config, unit));
          }
        }
      }
    }
    CHECK_CUDA(cudaFree(d_pairs));
    CHECK_CUDA(cudaFree(d_tensor));
    backend_->UnregisterRegion(host_);
  }

  // One backend job per measurement over `tensors` tensors of `page` bytes (block = tensors ×
  // page), 1 GiB in all: stores, loads on the direct path, loads staged.
  void RunLayers(uint32_t tensors, uint64_t page, bool sequential) {
    const uint64_t bpb = tensors * page;
    const uint64_t n = flags_.bytes / bpb;
    const uint64_t bytes = n * bpb;
    std::vector<uint64_t> rows(n);
    std::iota(rows.begin(), rows.end(), 0);
    if (!sequential) {
      std::mt19937_64 rng(bpb);
      std::shuffle(rows.begin(), rows.end(), rng);
    }
    std::vector<uint64_t> blocks(n);
    std::iota(blocks.begin(), blocks.end(), 0);
    std::vector<CudaCopyBackend::LocalTensor> local;
    for (uint32_t t = 0; t < tensors; ++t) {
      CudaCopyBackend::LocalTensor lt;
      lt.device_ptr = reinterpret_cast<uint64_t>(device_) + t * n * page;
      lt.num_blocks = n;
      lt.block_stride_bytes = page;
      lt.page_bytes = page;
      local.push_back(lt);
    }
    char extra[160];
    for (int path = 0; path < 2; ++path) {  // 0: direct kernels, 1: staged loads and stores
      CudaBackendOptions options = Options();
      options.forced_path =
          path == 0 ? daemon::cuda::ForcedPath::kKernel : daemon::cuda::ForcedPath::kStaged;
      absl::StatusOr<std::unique_ptr<CudaCopyBackend>> backend = CudaCopyBackend::Create(options);
      CHECK_OK(backend.status());
      CHECK_OK((*backend)->RegisterRegion(host_, bytes, bpb));
      absl::StatusOr<std::unique_ptr<daemon::WorkerMemory>> memory =
          OpenLocalWorker(**backend, 0, local, {});
      CHECK_OK(memory.status());
      for (bool store : {true, false}) {
        std::vector<double> ms;
        for (int r = 0; r <= flags_.reps; ++r) {
          CopyJob job;
          job.direction = store ? CopyDirection::kStore : CopyDirection::kLoad;
          job.memory = memory->get();
          job.region_base = host_;
          job.row_bytes = bpb;
          job.slot_bytes = bpb;
          job.runs = RunsOfLists(blocks, rows, 1);
          absl::Notification finished;
          absl::Status status;
          absl::Time end;
          const absl::Time start = absl::Now();
          (*backend)->Submit(std::move(job), [&](absl::Status s, uint64_t) {
            end = absl::Now();
            status = s;
            finished.Notify();
          });
          finished.WaitForNotification();
          CHECK_OK(status);
          if (r > 0) ms.push_back(absl::ToDoubleMilliseconds(end - start));
        }
        std::snprintf(extra, sizeof(extra),
                      "\"tensors\":%u,\"block_bytes\":%lu,\"rows\":\"%s\",\"path\":\"%s\"", tensors,
                      static_cast<unsigned long>(bpb), sequential ? "sequential" : "random",
                      path == 0 ? "direct" : "staged");
        Emit(path == 0 ? "backend_layers" : "backend_layers_staged", store, page, bytes, Median(ms),
             extra);
      }
      memory->reset();
      (*backend)->UnregisterRegion(host_);
    }
  }

  void Batch(bool store, uint64_t page, uint64_t n, const std::vector<uint64_t>& perm) {
    constexpr size_t kBatch = 4096;
    std::vector<void*> dsts;
    std::vector<const void*> srcs;
    std::vector<size_t> sizes;
    cudaMemcpyAttributes attr;
    std::memset(&attr, 0, sizeof(attr));
    attr.srcAccessOrder = cudaMemcpySrcAccessOrderStream;
    attr.flags = cudaMemcpyFlagPreferOverlapWithCompute;
    size_t attr_index = 0;
    for (uint64_t i = 0; i < n; ++i) {
      uint8_t* d = static_cast<uint8_t*>(device_) + i * page;
      uint8_t* h = host_ + perm[i] * page;
      dsts.push_back(store ? static_cast<void*>(h) : d);
      srcs.push_back(store ? static_cast<const void*>(d) : h);
      sizes.push_back(page);
      if (sizes.size() == kBatch || i + 1 == n) {
        CHECK_CUDA(cudaMemcpyBatchAsync(dsts.data(), srcs.data(), sizes.data(), sizes.size(), &attr,
                                        &attr_index, 1, stream_));
        dsts.clear();
        srcs.clear();
        sizes.clear();
      }
    }
  }

  double TimeBackend(CudaCopyBackend* backend, bool store, uint64_t page, uint64_t n,
                     const std::vector<uint64_t>& perm) {
    CudaCopyBackend::LocalTensor t;
    t.device_ptr = reinterpret_cast<uint64_t>(device_);
    t.num_blocks = n;
    t.block_stride_bytes = page;
    t.page_bytes = page;
    absl::StatusOr<std::unique_ptr<daemon::WorkerMemory>> memory =
        OpenLocalWorker(*backend, 0, {t}, {});
    CHECK_OK(memory.status());
    std::vector<uint64_t> blocks(n);
    std::iota(blocks.begin(), blocks.end(), 0);
    std::vector<double> ms;
    for (int r = 0; r <= flags_.reps; ++r) {
      CopyJob job;
      job.direction = store ? CopyDirection::kStore : CopyDirection::kLoad;
      job.memory = memory->get();
      job.region_base = host_;
      job.row_bytes = page;
      job.slot_bytes = page;
      job.runs = RunsOfLists(blocks, perm, 1);
      absl::Notification finished;
      absl::Status status;
      const absl::Time start = absl::Now();
      absl::Time end;
      backend->Submit(std::move(job), [&](absl::Status s, uint64_t) {
        end = absl::Now();
        status = s;
        finished.Notify();
      });
      finished.WaitForNotification();
      CHECK_OK(status);
      if (r > 0) ms.push_back(absl::ToDoubleMilliseconds(end - start));
    }
    return Median(ms);
  }

  // Store with the kernel, check the host bytes; poison the device, load back, check the device.
  void VerifyKernel(const CopyPagesArgs& store, const CopyPagesArgs& load,
                    const CopyKernelConfig& config, uint64_t page, uint64_t n,
                    const std::vector<uint64_t>& perm) {
    const uint64_t bytes = n * page;
    const uint64_t gen = 1000 + page;
    CHECK_CUDA(testing::LaunchFillPattern(device_, bytes, gen, stream_));
    CHECK_CUDA(LaunchCopyPages(store, config, stream_));
    CHECK_CUDA(cudaStreamSynchronize(stream_));
    std::vector<uint8_t> expect(page);
    uint64_t bad = 0;
    for (uint64_t i = 0; i < n; ++i) {
      testing::FillPatternBytes(expect.data(), gen, i * page, page);
      if (std::memcmp(expect.data(), host_ + perm[i] * page, page) != 0) ++bad;
    }
    CHECK_CUDA(cudaMemsetAsync(device_, 0x5a, bytes, stream_));
    CHECK_CUDA(LaunchCopyPages(load, config, stream_));
    CHECK_CUDA(cudaStreamSynchronize(stream_));
    std::vector<uint8_t> back(bytes);
    CHECK_CUDA(cudaMemcpy(back.data(), device_, bytes, cudaMemcpyDeviceToHost));
    for (uint64_t i = 0; i < n; ++i) {
      testing::FillPatternBytes(expect.data(), gen, i * page, page);
      if (std::memcmp(expect.data(), back.data() + i * page, page) != 0) ++bad;
    }
    std::printf("{\"check\":\"kernel\",\"page_bytes\":%lu,\"bad_pages\":%lu}\n",
                static_cast<unsigned long>(page), static_cast<unsigned long>(bad));
    if (bad != 0) {
      std::fprintf(stderr, "kernel copy check FAILED for %lu-byte pages: %lu bad pages\n",
                   static_cast<unsigned long>(page), static_cast<unsigned long>(bad));
      failed_ = true;
    }
  }

  void Summary() {
    std::map<std::pair<std::string, uint64_t>, double> ceiling;
    for (const Result& r : g_results) {
      if (r.method == "ceiling") ceiling[{r.direction, r.page_bytes}] = r.gbps;
    }
    std::printf("\n%-24s %-6s %10s %8s %9s\n", "method", "dir", "page", "GB/s", "%ceiling");
    std::map<std::tuple<std::string, std::string, uint64_t>, double> best_sweep;
    for (const Result& r : g_results) {
      if (r.method == "kernel_sweep") {
        double& b = best_sweep[{r.method, r.direction, r.page_bytes}];
        b = std::max(b, r.gbps);
        continue;
      }
      const double c = ceiling[{r.direction, r.page_bytes}];
      std::printf("%-24s %-6s %10lu %8.2f %8.1f%%\n", r.method.c_str(),
                  r.method == "kernel_duplex" ? "both" : r.direction.c_str(),
                  static_cast<unsigned long>(r.page_bytes), r.gbps,
                  c > 0 ? 100.0 * r.gbps / c : 0.0);
    }
    for (const auto& [key, gbps] : best_sweep) {
      const double c = ceiling[{std::get<1>(key), std::get<2>(key)}];
      std::printf("%-24s %-6s %10lu %8.2f %8.1f%%\n", "best_of_sweep", std::get<1>(key).c_str(),
                  static_cast<unsigned long>(std::get<2>(key)), gbps,
                  c > 0 ? 100.0 * gbps / c : 0.0);
    }
    if (failed_) {
      std::printf("KERNEL CHECK FAILED\n");
      std::exit(1);
    }
  }

  const Flags flags_;
  std::unique_ptr<CudaCopyBackend> backend_;
  void* device_ = nullptr;
  uint8_t* host_ = nullptr;
  cudaStream_t stream_ = nullptr;
  cudaStream_t stream2_ = nullptr;
  bool failed_ = false;
};

}  // namespace
}  // namespace kvoffload::bench

int main(int argc, char** argv) {
  const kvoffload::bench::Flags flags = kvoffload::bench::ParseFlags(argc, argv);
  int count = 0;
  const cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess || count == 0) {
    std::fprintf(stderr, "gpu_baselines: no GPU (%s)\n", cudaGetErrorName(err));
    return 0;
  }
  kvoffload::bench::Bench(flags).Run();
  return 0;
}
