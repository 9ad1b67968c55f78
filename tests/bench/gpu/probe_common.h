// What the copy probes (batch_cpu_probe, multi_issue_probe) share: exiting on a CUDA error, a
// steady clock, a median, and host memory set up as the daemon sets up a region (a memfd, shared,
// huge pages advised, populated, cudaHostRegister Portable | Mapped). Header-only; probes only.
#ifndef KVOFFLOAD_TESTS_GPU_PROBE_COMMON_H_
#define KVOFFLOAD_TESTS_GPU_PROBE_COMMON_H_

#include <cuda_runtime_api.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

namespace kvoffload::probe {

inline void Check(cudaError_t err, const char* what) {
  if (err != cudaSuccess) {
    std::fprintf(stderr, "%s: %s\n", what, cudaGetErrorString(err));
    std::exit(1);
  }
}

inline double Now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

inline double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

// `bytes` of host memory as the daemon's region is; exits on failure.
inline uint8_t* RegionLikeHostMemory(const char* name, size_t bytes) {
  const int fd = memfd_create(name, 0);
  if (fd < 0 || ftruncate(fd, bytes) != 0) {
    std::perror("memfd");
    std::exit(1);
  }
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) {
    std::perror("mmap");
    std::exit(1);
  }
  auto* host = static_cast<uint8_t*>(p);
  madvise(host, bytes, MADV_HUGEPAGE);
  if (madvise(host, bytes, 23 /* MADV_POPULATE_WRITE */) != 0) std::memset(host, 1, bytes);
  Check(cudaHostRegister(host, bytes, cudaHostRegisterPortable | cudaHostRegisterMapped),
        "cudaHostRegister");
  return host;
}

}  // namespace kvoffload::probe

#endif  // KVOFFLOAD_TESTS_GPU_PROBE_COMMON_H_
