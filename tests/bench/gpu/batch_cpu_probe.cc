// batch_cpu_probe (copy path v3, H200): the host CPU it takes to hand large copies to the copy
// engines, by API. The v3 benchmark found one 4 GiB block (32 cudaMemcpyBatchAsync entries of
// 128 MiB, the region's registration chunks) costing the daemon ~45 ms of CPU over its 79 ms
// copy, while the same bytes as 1M blocks (32 cudaMemcpy2DAsync calls) cost 1.5 ms. This probe
// takes the daemon out of the picture: the same host memory as the daemon's region (a memfd,
// MAP_SHARED, populated, cudaHostRegister Portable | Mapped), device memory from cudaMalloc, and
// per case and method the process's CPU (getrusage: every thread, the driver's too) from before
// the enqueue until the copy is seen done, the enqueue call's own CPU and wall, and the copy's
// wall. Completion is watched by cudaEventQuery every 200 µs (sleeping), so waiting costs
// almost nothing.
//
//   batch_cpu_probe [--reps=8]   (one JSON line per case, method and direction on stdout)
//
// Methods: batch (cudaMemcpyBatchAsync, the daemon's attributes: stream order, prefer overlap
// with compute), batch_no_hint (the same without the hint), async (one cudaMemcpyAsync per
// entry), one (one cudaMemcpyAsync of all the bytes: the same bytes with no entries).
#include <cuda_runtime_api.h>
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "tests/bench/gpu/probe_common.h"

namespace {

using kvoffload::probe::Check;
using kvoffload::probe::Median;
using kvoffload::probe::Now;

double CpuSeconds(int who) {
  rusage u{};
  getrusage(who, &u);
  return u.ru_utime.tv_sec + u.ru_stime.tv_sec + (u.ru_utime.tv_usec + u.ru_stime.tv_usec) * 1e-6;
}

struct Sample {
  double enqueue_wall_us, enqueue_cpu_us, total_wall_us, process_cpu_us;
};

}  // namespace

int main(int argc, char** argv) {
  int reps = 8;
  for (int i = 1; i < argc; ++i) {
    if (std::strncmp(argv[i], "--reps=", 7) == 0) reps = std::atoi(argv[i] + 7);
  }
  const size_t total = size_t{4} << 30;
  Check(cudaSetDevice(0), "cudaSetDevice");
  Check(cudaFree(nullptr), "cudaFree(0)");
  // The daemon's region: memfd, shared, populated, registered.
  uint8_t* host = kvoffload::probe::RegionLikeHostMemory("batch_cpu_probe", total);
  uint8_t* dev = nullptr;
  Check(cudaMalloc(reinterpret_cast<void**>(&dev), total), "cudaMalloc");
  Check(cudaMemset(dev, 7, total), "cudaMemset");
  cudaStream_t stream;
  Check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "stream");
  cudaEvent_t done;
  Check(cudaEventCreateWithFlags(&done, cudaEventDisableTiming), "event");

  struct Case {
    const char* name;
    size_t bytes, entry;
    bool spread;  // entries every other entry-size apart on the GPU (no two adjacent)
  };
  const Case cases[] = {
      {"4g_in_128m", total, size_t{128} << 20, false},
      {"512m_in_128m", size_t{512} << 20, size_t{128} << 20, false},
      {"512m_in_2m", size_t{512} << 20, size_t{2} << 20, true},
      {"512m_in_32k", size_t{512} << 20, size_t{32} << 10, true},
  };
  const char* methods[] = {"batch", "batch_no_hint", "async", "one"};
  for (const Case& c : cases) {
    const size_t n = c.bytes / c.entry;
    for (const char* method : methods) {
      for (int store = 1; store >= 0; --store) {
        std::vector<void*> dsts(n);
        std::vector<const void*> srcs(n);
        std::vector<size_t> sizes(n, c.entry);
        for (size_t i = 0; i < n; ++i) {
          // Spread entries take every other GPU slot (half the case's bytes apart at most).
          const size_t g = c.spread ? (2 * i * c.entry) % total : i * c.entry;
          uint8_t* gpu = dev + g;
          uint8_t* h = host + i * c.entry;
          dsts[i] = store ? static_cast<void*>(h) : gpu;
          srcs[i] = store ? static_cast<const void*>(gpu) : h;
        }
        cudaMemcpyAttributes attr;
        std::memset(&attr, 0, sizeof(attr));
        attr.srcAccessOrder = cudaMemcpySrcAccessOrderStream;
        attr.flags = std::strcmp(method, "batch") == 0 ? cudaMemcpyFlagPreferOverlapWithCompute
                                                       : cudaMemcpyFlagDefault;
        auto enqueue = [&] {
          if (std::strncmp(method, "batch", 5) == 0) {
            for (size_t i = 0; i < n; i += 4096) {
              const size_t k = std::min<size_t>(4096, n - i);
              size_t attr_index = 0;
              Check(cudaMemcpyBatchAsync(dsts.data() + i, srcs.data() + i, sizes.data() + i, k,
                                         &attr, &attr_index, 1, stream),
                    "cudaMemcpyBatchAsync");
            }
          } else if (std::strcmp(method, "async") == 0) {
            for (size_t i = 0; i < n; ++i) {
              Check(cudaMemcpyAsync(dsts[i], srcs[i], sizes[i], cudaMemcpyDefault, stream),
                    "cudaMemcpyAsync");
            }
          } else {
            Check(cudaMemcpyAsync(store ? static_cast<void*>(host) : dev,
                                  store ? static_cast<const void*>(dev) : host, c.bytes,
                                  cudaMemcpyDefault, stream),
                  "cudaMemcpyAsync (one)");
          }
          Check(cudaEventRecord(done, stream), "cudaEventRecord");
        };
        std::vector<Sample> samples;
        for (int r = -1; r < reps; ++r) {  // r = -1: warm-up, not kept
          const double p0 = CpuSeconds(RUSAGE_SELF), t0 = Now();
          const double th0 = CpuSeconds(RUSAGE_THREAD);
          enqueue();
          const double t1 = Now(), th1 = CpuSeconds(RUSAGE_THREAD);
          cudaError_t q;
          while ((q = cudaEventQuery(done)) == cudaErrorNotReady) {
            std::this_thread::sleep_for(std::chrono::microseconds(200));
          }
          Check(q, "cudaEventQuery");
          const double t2 = Now(), p2 = CpuSeconds(RUSAGE_SELF);
          if (r >= 0) {
            samples.push_back({(t1 - t0) * 1e6, (th1 - th0) * 1e6, (t2 - t0) * 1e6,
                               (p2 - p0) * 1e6});
          }
        }
        std::vector<double> ew, ec, tw, pc;
        for (const Sample& s : samples) {
          ew.push_back(s.enqueue_wall_us);
          ec.push_back(s.enqueue_cpu_us);
          tw.push_back(s.total_wall_us);
          pc.push_back(s.process_cpu_us);
        }
        std::printf(
            "{\"probe\":\"batch_cpu\",\"case\":\"%s\",\"bytes\":%zu,\"entries\":%zu,"
            "\"method\":\"%s\",\"direction\":\"%s\",\"reps\":%d,\"enqueue_wall_us\":%.1f,"
            "\"enqueue_cpu_us\":%.1f,\"total_wall_us\":%.1f,\"process_cpu_us\":%.1f,"
            "\"gbps\":%.2f}\n",
            c.name, c.bytes, std::strcmp(method, "one") == 0 ? size_t{1} : n, method,
            store ? "store" : "load", reps, Median(ew), Median(ec), Median(tw), Median(pc),
            c.bytes / Median(tw) / 1e3);
        std::fflush(stdout);
      }
    }
  }
  return 0;
}
