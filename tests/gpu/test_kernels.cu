#include "tests/gpu/test_kernels.h"

#include "tests/gpu/test_pattern.h"

namespace kvoffload::testing {
namespace {

__global__ void FillPatternKernel(uint64_t* p, uint64_t words, uint64_t generation) {
  for (uint64_t i = blockIdx.x * uint64_t{blockDim.x} + threadIdx.x; i < words;
       i += uint64_t{gridDim.x} * blockDim.x) {
    p[i] = PatternWord(generation, i);
  }
}

__device__ __forceinline__ uint64_t GlobalTimer() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

__global__ void SpinKernel(uint64_t nanoseconds) {
  const uint64_t start = GlobalTimer();
  while (GlobalTimer() - start < nanoseconds) {
    __nanosleep(1000);
  }
}

}  // namespace

cudaError_t LaunchFillPattern(void* p, uint64_t bytes, uint64_t generation, cudaStream_t stream) {
  if (bytes % 8 != 0 || reinterpret_cast<uintptr_t>(p) % 8 != 0) return cudaErrorInvalidValue;
  const uint64_t words = bytes / 8;
  if (words == 0) return cudaSuccess;
  FillPatternKernel<<<264, 512, 0, stream>>>(static_cast<uint64_t*>(p), words, generation);
  return cudaGetLastError();
}

cudaError_t LaunchSpin(uint64_t nanoseconds, cudaStream_t stream) {
  SpinKernel<<<1, 1, 0, stream>>>(nanoseconds);
  return cudaGetLastError();
}

namespace {
__global__ void __launch_bounds__(256) FmaBurnKernel(uint64_t iters, float* out) {
  float a = threadIdx.x * 1e-3f, b = 1.0001f, c = 0.9999f, d = blockIdx.x * 1e-3f;
  for (uint64_t i = 0; i < iters; ++i) {
    a = fmaf(a, b, c);
    d = fmaf(d, c, b);
    b = fmaf(b, 0.99999f, 1e-6f);
    c = fmaf(c, 1.00001f, -1e-6f);
  }
  if (a + d == 12345.678f) out[0] = a;  // keeps the loop alive
}
}  // namespace

int FmaBurnBlocksPerSm() {
  int blocks = 0;
  if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, FmaBurnKernel, 256, 0) !=
      cudaSuccess) {
    return 0;
  }
  return blocks;
}

cudaError_t LaunchFmaBurn(int grid, uint64_t iters, float* out, cudaStream_t stream) {
  FmaBurnKernel<<<grid, 256, 0, stream>>>(iters, out);
  return cudaGetLastError();
}

}  // namespace kvoffload::testing
