#include "tests/gpu_e2e/bench_kernels.h"

namespace kvoffload::testing {
namespace {

__global__ void DelayKernel(uint64_t nanoseconds) {
  uint64_t start;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
  for (;;) {
    uint64_t now;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
    if (now - start >= nanoseconds) break;
  }
}

__global__ void BusyFmaKernel(float* sink, int iterations) {
  float a = threadIdx.x * 1e-3f, b = 1.000001f, c = 0.999999f, d = blockIdx.x * 1e-4f;
  for (int i = 0; i < iterations; ++i) {
    a = fmaf(a, b, c);
    d = fmaf(d, c, b);
    b = fmaf(b, a, -d) * 1e-9f + 1.000001f;
  }
  sink[blockIdx.x * blockDim.x + threadIdx.x] = a + b + d;
}

}  // namespace

cudaError_t LaunchDelay(uint64_t nanoseconds, cudaStream_t stream) {
  DelayKernel<<<1, 1, 0, stream>>>(nanoseconds);
  return cudaGetLastError();
}

cudaError_t LaunchSpin(uint64_t nanoseconds, int blocks, int threads, cudaStream_t stream) {
  DelayKernel<<<blocks, threads, 0, stream>>>(nanoseconds);
  return cudaGetLastError();
}

cudaError_t LaunchBusyFma(float* sink, int blocks, int threads, int iterations,
                          cudaStream_t stream) {
  BusyFmaKernel<<<blocks, threads, 0, stream>>>(sink, iterations);
  return cudaGetLastError();
}

}  // namespace kvoffload::testing
