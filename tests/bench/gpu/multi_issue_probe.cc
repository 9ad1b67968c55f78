// multi_issue_probe (copy path v3, H200): can more host threads issuing copies on more streams move
// small random pages faster, with no SM? batch_cpu_probe (runs/2026-12-03-acdd84c-diag)
// found that 16384 entries of 32 KiB take the issuing thread ~12 ms of cudaMemcpyBatchAsync
// calls (~0.7 µs an entry) against ~10 ms of link time: small random pages are bound by the
// host's issue rate, not by the copy engines. This probe splits the same entries over T threads,
// each with a stream of its own, and over T streams issued round-robin from one thread (to tell
// the streams' effect from the threads').
//
// The daemon's region as in batch_cpu_probe (memfd, populated, cudaHostRegister Portable |
// Mapped), device memory from cudaMalloc, entries every other entry-size apart on the GPU (no
// two adjacent) and consecutive in the host region. Per case, layout, direction: wall from the
// first call to the last stream's event seen done (spinning on cudaEventQuery), median of reps.
//
//   multi_issue_probe [--reps=5]   (one JSON line per case on stdout)
#include <cuda_runtime_api.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

#include "tests/bench/gpu/probe_common.h"

namespace {

using kvoffload::probe::Check;
using kvoffload::probe::Median;
using kvoffload::probe::Now;

// One cudaMemcpyBatchAsync call, with the daemon's attributes.
void IssueOne(void** dsts, const void** srcs, size_t* sizes, size_t n, cudaStream_t stream) {
  cudaMemcpyAttributes attr;
  std::memset(&attr, 0, sizeof(attr));
  attr.srcAccessOrder = cudaMemcpySrcAccessOrderStream;
  attr.flags = cudaMemcpyFlagPreferOverlapWithCompute;
  size_t attr_index = 0;
  Check(cudaMemcpyBatchAsync(dsts, srcs, sizes, n, &attr, &attr_index, 1, stream),
        "cudaMemcpyBatchAsync");
}

// The daemon's schedule: a first call of 8 entries, then twice as many each call, up to 4096.
void IssueBatches(void** dsts, const void** srcs, size_t* sizes, size_t n, cudaStream_t stream) {
  size_t batch = 8;
  for (size_t i = 0; i < n;) {
    const size_t k = std::min(batch, n - i);
    IssueOne(dsts + i, srcs + i, sizes + i, k, stream);
    i += k;
    batch = std::min<size_t>(batch * 2, 4096);
  }
}

}  // namespace

int main(int argc, char** argv) {
  int reps = 5;
  for (int i = 1; i < argc; ++i) {
    if (std::strncmp(argv[i], "--reps=", 7) == 0) reps = std::atoi(argv[i] + 7);
  }
  const size_t bytes = size_t{512} << 20;
  const size_t dev_bytes = 2 * bytes;
  Check(cudaSetDevice(0), "cudaSetDevice");
  Check(cudaFree(nullptr), "cudaFree(0)");
  uint8_t* host = kvoffload::probe::RegionLikeHostMemory("multi_issue_probe", bytes);
  uint8_t* dev = nullptr;
  Check(cudaMalloc(reinterpret_cast<void**>(&dev), dev_bytes), "cudaMalloc");
  Check(cudaMemset(dev, 7, dev_bytes), "cudaMemset");
  constexpr int kMaxStreams = 8;
  cudaStream_t streams[kMaxStreams];
  cudaEvent_t done[kMaxStreams];
  for (int s = 0; s < kMaxStreams; ++s) {
    Check(cudaStreamCreateWithFlags(&streams[s], cudaStreamNonBlocking), "stream");
    Check(cudaEventCreateWithFlags(&done[s], cudaEventDisableTiming), "event");
  }
  const size_t entries[] = {size_t{4} << 10, size_t{32} << 10, size_t{2} << 20};
  // threads > 1: a thread per stream; streams > 1 with threads == 1: one thread, round-robin.
  struct Layout {
    int threads, streams;
  };
  const Layout layouts[] = {{1, 1}, {1, 2}, {1, 4}, {2, 2}, {4, 4}, {8, 8}};
  for (size_t entry : entries) {
    const size_t n = bytes / entry;
    for (int store = 1; store >= 0; --store) {
      std::vector<void*> dsts(n);
      std::vector<const void*> srcs(n);
      std::vector<size_t> sizes(n, entry);
      for (size_t i = 0; i < n; ++i) {
        uint8_t* gpu = dev + 2 * i * entry;
        uint8_t* h = host + i * entry;
        dsts[i] = store ? static_cast<void*>(h) : gpu;
        srcs[i] = store ? static_cast<const void*>(gpu) : h;
      }
      for (const Layout& lay : layouts) {
        const int k = lay.streams;
        auto share = [&](int s) { return std::make_pair(s * n / k, (s + 1) * n / k); };
        std::vector<double> walls, issue_walls;
        for (int r = -1; r < reps; ++r) {  // r = -1: warm-up
          std::atomic<int> go{0};
          std::vector<double> issued(k, 0);
          const double t0 = Now();
          if (lay.threads == 1) {
            // Round-robin: each stream's calls in turn, in the same doubling schedule.
            std::vector<size_t> next(k), batch(k, 8);
            for (int s = 0; s < k; ++s) next[s] = share(s).first;
            for (bool any = true; any;) {
              any = false;
              for (int s = 0; s < k; ++s) {
                const size_t end = share(s).second;
                if (next[s] >= end) continue;
                const size_t m = std::min(batch[s], end - next[s]);
                IssueOne(dsts.data() + next[s], srcs.data() + next[s], sizes.data() + next[s], m,
                         streams[s]);
                next[s] += m;
                batch[s] = std::min<size_t>(batch[s] * 2, 4096);
                any = true;
              }
            }
            for (int s = 0; s < k; ++s) Check(cudaEventRecord(done[s], streams[s]), "record");
            issued.assign(k, Now() - t0);
          } else {
            std::vector<std::thread> pool;
            for (int s = 0; s < k; ++s) {
              pool.emplace_back([&, s] {
                Check(cudaSetDevice(0), "cudaSetDevice");
                go.fetch_add(1);
                while (go.load() < k) {
                }
                const auto [b, e] = share(s);
                IssueBatches(dsts.data() + b, srcs.data() + b, sizes.data() + b, e - b,
                             streams[s]);
                Check(cudaEventRecord(done[s], streams[s]), "record");
                issued[s] = Now() - t0;
              });
            }
            for (std::thread& t : pool) t.join();
          }
          for (int s = 0; s < k; ++s) {
            cudaError_t q;
            while ((q = cudaEventQuery(done[s])) == cudaErrorNotReady) {
            }
            Check(q, "cudaEventQuery");
          }
          const double t2 = Now();
          if (r >= 0) {
            walls.push_back((t2 - t0) * 1e6);
            issue_walls.push_back(*std::max_element(issued.begin(), issued.end()) * 1e6);
          }
        }
        const double wall = Median(walls);
        std::printf(
            "{\"probe\":\"multi_issue\",\"entry_bytes\":%zu,\"entries\":%zu,\"direction\":\"%s\","
            "\"threads\":%d,\"streams\":%d,\"reps\":%d,\"issue_us\":%.1f,\"wall_us\":%.1f,"
            "\"gbps\":%.2f}\n",
            entry, n, store ? "store" : "load", lay.threads, lay.streams, reps,
            Median(issue_walls), wall, bytes / wall / 1e3);
        std::fflush(stdout);
      }
    }
  }
  return 0;
}
