// Small kernels the GPU tests' worker processes use (plain C++ declarations; test_kernels.cu).
#ifndef KVOFFLOAD_TESTS_GPU_TEST_KERNELS_H_
#define KVOFFLOAD_TESTS_GPU_TEST_KERNELS_H_

#include <cstdint>

#include <cuda_runtime_api.h>

namespace kvoffload::testing {

// Fills `bytes` (a multiple of 8) at `p` (8-byte aligned) with generation `generation` of the
// test pattern, as if `p` were offset 0.
cudaError_t LaunchFillPattern(void* p, uint64_t bytes, uint64_t generation, cudaStream_t stream);

// One thread that spins for `nanoseconds` (globaltimer): delays what follows on `stream`.
cudaError_t LaunchSpin(uint64_t nanoseconds, cudaStream_t stream);

// A compute-bound kernel (FMA loop, 256 threads per block, no memory traffic): how many of its
// blocks fit one SM, and a launch of `grid` blocks (SMs × FmaBurnBlocksPerSm() = one full wave).
int FmaBurnBlocksPerSm();
cudaError_t LaunchFmaBurn(int grid, uint64_t iters, float* out, cudaStream_t stream);

}  // namespace kvoffload::testing

#endif  // KVOFFLOAD_TESTS_GPU_TEST_KERNELS_H_
