// Gather (GPU → mapped host) and scatter (mapped host → GPU) kernels over (pair × tensor) pages.
// See copy_kernels.h for the data layout. One kernel template covers both directions, every
// access width and three unroll depths; LaunchCopyPages picks the instantiation.
#include "daemon/copy/cuda/copy_kernels.h"

#include <cuda_runtime.h>

namespace kvoffload::daemon::cuda {
namespace {

// Host destination (store): streaming stores, nothing on the GPU reads these lines again.
// Device destination (load): ordinary stores, the engine reads the blocks next.
template <typename V, bool kToHost>
__device__ __forceinline__ void StoreTo(V* p, const V& v) {
  if constexpr (kToHost) {
    __stcs(p, v);
  } else {
    *p = v;
  }
}

// Copies n elements of V; the 32 lanes of a warp take interleaved elements (coalesced), each lane
// keeping kUnroll loads in flight before its stores.
template <typename V, int kUnroll, bool kToHost>
__device__ __forceinline__ void CopyWarp(V* __restrict__ dst, const V* __restrict__ src, uint64_t n,
                                         uint32_t lane) {
  for (uint64_t i = lane; i < n; i += 32u * kUnroll) {
    V r[kUnroll];
#pragma unroll
    for (int k = 0; k < kUnroll; ++k) {
      const uint64_t idx = i + 32u * k;
      if (idx < n) r[k] = __ldcs(src + idx);
    }
#pragma unroll
    for (int k = 0; k < kUnroll; ++k) {
      const uint64_t idx = i + 32u * k;
      if (idx < n) StoreTo<V, kToHost>(dst + idx, r[k]);
    }
  }
}

template <int kUnroll>
struct UnrollTraits {
  static constexpr int kMaxThreads = kUnroll >= 16 ? 512 : 1024;
};

template <typename V, int kUnroll, bool kStore>
__global__ void __launch_bounds__(UnrollTraits<kUnroll>::kMaxThreads)
    CopyPagesKernel(const CopyPagesArgs a) {
  const uint32_t lane = threadIdx.x & 31u;
  const uint64_t warps_per_block = blockDim.x >> 5;
  const uint64_t num_warps = gridDim.x * warps_per_block;
  const uint64_t total = a.num_pairs * a.units_per_pair;
  const uint64_t units_per_pair = a.units_per_pair;
  for (uint64_t u = blockIdx.x * warps_per_block + (threadIdx.x >> 5); u < total; u += num_warps) {
    uint64_t pair = u;
    uint64_t unit = 0;
    if (units_per_pair != 1) {
      pair = u / units_per_pair;
      unit = u - pair * units_per_pair;
    }
    // Last tensor whose first unit is <= unit.
    uint32_t lo = 0;
    uint32_t hi = a.num_tensors;
    while (hi - lo > 1) {
      const uint32_t mid = (lo + hi) >> 1;
      if (__ldg(reinterpret_cast<const unsigned long long*>(&a.tensors[mid].unit_begin)) <= unit) {
        lo = mid;
      } else {
        hi = mid;
      }
    }
    const KernelTensor* t = &a.tensors[lo];
    const uint64_t base = __ldg(reinterpret_cast<const unsigned long long*>(&t->base));
    const uint64_t stride = __ldg(reinterpret_cast<const unsigned long long*>(&t->block_stride));
    const uint64_t page = __ldg(reinterpret_cast<const unsigned long long*>(&t->page_bytes));
    const uint64_t host_offset = __ldg(reinterpret_cast<const unsigned long long*>(&t->host_offset));
    const uint64_t unit_begin = __ldg(reinterpret_cast<const unsigned long long*>(&t->unit_begin));
    const uint64_t gpu_block = __ldg(reinterpret_cast<const unsigned long long*>(&a.pairs[pair].gpu_block));
    const uint64_t host = __ldg(reinterpret_cast<const unsigned long long*>(&a.pairs[pair].host));

    const uint64_t offset = (unit - unit_begin) * a.unit_bytes;
    const uint64_t remaining = page - offset;
    const uint64_t bytes = remaining < a.unit_bytes ? remaining : a.unit_bytes;
    char* gpu = reinterpret_cast<char*>(base + gpu_block * stride + offset);
    char* mapped = reinterpret_cast<char*>(host + host_offset + offset);
    if constexpr (kStore) {
      CopyWarp<V, kUnroll, true>(reinterpret_cast<V*>(mapped), reinterpret_cast<const V*>(gpu),
                                 bytes / sizeof(V), lane);
    } else {
      CopyWarp<V, kUnroll, false>(reinterpret_cast<V*>(gpu),
                                             reinterpret_cast<const V*>(mapped),
                                  bytes / sizeof(V), lane);
    }
  }
}

template <typename V, int kUnroll>
cudaError_t LaunchTyped(const CopyPagesArgs& a, int grid, int threads, cudaStream_t stream) {
  if (a.store) {
    CopyPagesKernel<V, kUnroll, true><<<grid, threads, 0, stream>>>(a);
  } else {
    CopyPagesKernel<V, kUnroll, false><<<grid, threads, 0, stream>>>(a);
  }
  return cudaGetLastError();
}

template <typename V>
cudaError_t LaunchUnrolled(const CopyPagesArgs& a, int unroll, int grid, int threads,
                           cudaStream_t stream) {
  switch (unroll) {
    case 4:
      return LaunchTyped<V, 4>(a, grid, threads, stream);
    case 8:
      return LaunchTyped<V, 8>(a, grid, threads, stream);
    case 16:
      return LaunchTyped<V, 16>(a, grid, threads, stream);
    default:
      return cudaErrorInvalidValue;
  }
}

template <typename V, int kUnroll>
cudaError_t LoadTyped() {
  cudaFuncAttributes attr;
  cudaError_t err = cudaFuncGetAttributes(&attr, CopyPagesKernel<V, kUnroll, true>);
  if (err != cudaSuccess) return err;
  return cudaFuncGetAttributes(&attr, CopyPagesKernel<V, kUnroll, false>);
}

template <typename V>
cudaError_t LoadAllUnrolls() {
  cudaError_t err = LoadTyped<V, 4>();
  if (err == cudaSuccess) err = LoadTyped<V, 8>();
  if (err == cudaSuccess) err = LoadTyped<V, 16>();
  return err;
}

}  // namespace

int MaxThreadsPerBlock(int unroll) {
  return unroll >= 16 ? UnrollTraits<16>::kMaxThreads : UnrollTraits<8>::kMaxThreads;
}

cudaError_t LaunchCopyPages(const CopyPagesArgs& a, const CopyKernelConfig& c,
                            cudaStream_t stream) {
  if (c.threads_per_block < 32 || c.threads_per_block % 32 != 0 ||
      c.threads_per_block > MaxThreadsPerBlock(c.unroll) || c.max_blocks < 1) {
    return cudaErrorInvalidValue;
  }
  if (a.unit_bytes == 0 || a.unit_bytes % 16 != 0 || a.num_tensors == 0 ||
      a.tensors == nullptr) {
    return cudaErrorInvalidValue;
  }
  const uint64_t total = a.num_pairs * a.units_per_pair;
  if (total == 0) return cudaSuccess;
  if (a.pairs == nullptr) return cudaErrorInvalidValue;
  const uint64_t warps_per_block = static_cast<uint64_t>(c.threads_per_block) / 32;
  const uint64_t wanted = (total + warps_per_block - 1) / warps_per_block;
  const int grid = static_cast<int>(wanted < static_cast<uint64_t>(c.max_blocks) ? wanted
                                                                                  : c.max_blocks);
  switch (a.vector_bytes) {
    case 16:
      return LaunchUnrolled<uint4>(a, c.unroll, grid, c.threads_per_block, stream);
    case 8:
      return LaunchUnrolled<uint2>(a, c.unroll, grid, c.threads_per_block, stream);
    case 4:
      return LaunchUnrolled<unsigned int>(a, c.unroll, grid, c.threads_per_block, stream);
    case 2:
      return LaunchUnrolled<unsigned short>(a, c.unroll, grid, c.threads_per_block, stream);
    case 1:
      return LaunchUnrolled<unsigned char>(a, c.unroll, grid, c.threads_per_block, stream);
    default:
      return cudaErrorInvalidValue;
  }
}

cudaError_t LoadCopyKernels() {
  cudaError_t err = LoadAllUnrolls<uint4>();
  if (err == cudaSuccess) err = LoadAllUnrolls<uint2>();
  if (err == cudaSuccess) err = LoadAllUnrolls<unsigned int>();
  if (err == cudaSuccess) err = LoadAllUnrolls<unsigned short>();
  if (err == cudaSuccess) err = LoadAllUnrolls<unsigned char>();
  return err;
}

}  // namespace kvoffload::daemon::cuda
