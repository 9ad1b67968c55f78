// Gather/scatter kernels that move KV pages between a worker's GPU memory and the (mapped,
// pinned) host region. Plain C++: gcc-compiled code includes this header; the kernels themselves
// live in copy_kernels.cu (nvcc).
//
// A job is a table of `PagePair`s (one per GPU block) times a table of `KernelTensor`s (one per
// KV tensor of the worker): page (pair i, tensor t) is `page_bytes` at
//   GPU:  tensors[t].base + pairs[i].gpu_block × tensors[t].block_stride
//   host: pairs[i].host + tensors[t].host_offset          (device-visible address of mapped memory)
// Each page is cut into units of at most `unit_bytes`; a warp copies one unit at a time, lanes
// moving `vector_bytes` per access with `unroll` accesses in flight. The grid is persistent and
// bounded by `max_blocks` (the copy SM budget).
//
//   KernelTensor t{base, stride, page_bytes, /*host_offset=*/0, 0};
//   uint64_t units_per_pair = AssignUnits(&t, 1, 16384);
//   CopyPagesArgs args{...};
//   RETURN_IF_ERROR(CudaStatus(LaunchCopyPages(args, config, stream), "copy kernel"));
#ifndef KVOFFLOAD_DAEMON_COPY_CUDA_COPY_KERNELS_H_
#define KVOFFLOAD_DAEMON_COPY_CUDA_COPY_KERNELS_H_

#include <cstddef>
#include <cstdint>

#include <cuda_runtime_api.h>

namespace kvoffload::daemon::cuda {

// One KV tensor, as the kernel sees it (device memory, read-only during a launch).
struct KernelTensor {
  uint64_t base = 0;          // device address of block 0's page
  uint64_t block_stride = 0;  // bytes between consecutive blocks
  uint64_t page_bytes = 0;    // bytes of one block in this tensor
  uint64_t host_offset = 0;   // offset of this tensor's page within the worker's bytes of a block
  uint64_t unit_begin = 0;    // index of this tensor's first unit within a pair (AssignUnits)
};

// One GPU block of a job and where its bytes live in the region (device-visible address).
struct PagePair {
  uint64_t gpu_block = 0;
  uint64_t host = 0;
};

// Bytes a warp copies at a time. Measured (docs/TUNING.md, run 1): 4, 16 and 64 KiB
// units, like every grid, thread and unroll choice swept, give the same link-bound rates.
inline constexpr uint32_t kUnitBytes = 16384;

struct CopyPagesArgs {
  bool store = true;                      // true: GPU → host (gather); false: host → GPU (scatter)
  const KernelTensor* tensors = nullptr;  // device memory
  uint32_t num_tensors = 0;
  uint64_t units_per_pair = 0;            // Σ over tensors of ceil(page_bytes / unit_bytes)
  const PagePair* pairs = nullptr;        // device memory
  uint64_t num_pairs = 0;
  uint32_t unit_bytes = kUnitBytes;       // multiple of 16
  uint32_t vector_bytes = 16;             // 16, 8, 4, 2 or 1; must divide every address and size
};

struct CopyKernelConfig {
  int max_blocks = 16;          // grid bound: the copy SM budget (one block per SM)
  int threads_per_block = 512;  // multiple of 32; at most 1024 (512 with unroll 16)
  int unroll = 8;               // 4, 8 or 16 vector accesses in flight per thread
};

// Assigns `unit_begin` to each tensor and returns units per pair.
inline uint64_t AssignUnits(KernelTensor* tensors, uint32_t num_tensors, uint32_t unit_bytes) {
  uint64_t units = 0;
  for (uint32_t t = 0; t < num_tensors; ++t) {
    tensors[t].unit_begin = units;
    units += (tensors[t].page_bytes + unit_bytes - 1) / unit_bytes;
  }
  return units;
}

// Largest access width in {16, 8, 4, 2, 1} that divides `bits` (an OR of addresses and sizes).
inline uint32_t VectorBytesFor(uint64_t bits) {
  for (uint32_t v = 16; v > 1; v /= 2) {
    if ((bits & (v - 1)) == 0) return v;
  }
  return 1;
}

// Largest thread count per block that `unroll` supports.
int MaxThreadsPerBlock(int unroll);

// Enqueues the copy on `stream`. Returns cudaErrorInvalidValue for a bad config or arguments and
// cudaSuccess without launching for an empty job. Never synchronizes.
cudaError_t LaunchCopyPages(const CopyPagesArgs& args, const CopyKernelConfig& config,
                            cudaStream_t stream);

// Loads every kernel instantiation of the module on the current device (lazy loading would
// otherwise load them at first launch), so that memory measurements include them.
cudaError_t LoadCopyKernels();

}  // namespace kvoffload::daemon::cuda

#endif  // KVOFFLOAD_DAEMON_COPY_CUDA_COPY_KERNELS_H_
