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

}  // namespace kvoffload::testing
