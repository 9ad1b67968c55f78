// Kernels the CUDA scripted worker uses for tests and benchmarks (plain C++ declarations).
#ifndef KVOFFLOAD_TESTS_GPU_E2E_BENCH_KERNELS_H_
#define KVOFFLOAD_TESTS_GPU_E2E_BENCH_KERNELS_H_

#include <cuda_runtime_api.h>

#include <cstdint>

namespace kvoffload::testing {

// One thread that spins for `nanoseconds`: delays whatever follows on `stream`.
cudaError_t LaunchDelay(uint64_t nanoseconds, cudaStream_t stream);

// `blocks` × `threads` threads that each spin for `nanoseconds` (wall time, %globaltimer): with
// enough blocks, every SM is busy for that long, however the GPU is time-sliced.
cudaError_t LaunchSpin(uint64_t nanoseconds, int blocks, int threads, cudaStream_t stream);

// A compute-bound kernel (dependent FMAs, every SM busy): the "model" whose slowdown under
// concurrent offload traffic the benchmark measures. Writes one float per thread to `sink`.
cudaError_t LaunchBusyFma(float* sink, int blocks, int threads, int iterations,
                          cudaStream_t stream);

}  // namespace kvoffload::testing

#endif  // KVOFFLOAD_TESTS_GPU_E2E_BENCH_KERNELS_H_
