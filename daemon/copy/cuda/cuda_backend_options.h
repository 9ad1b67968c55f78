// CudaBackendOptions: the CUDA copy backend's settings (--copy_sms, --cuda_* and the staging
// flags take their defaults from here, daemon/main.cc) and the one function that checks them.
//
//   CudaBackendOptions options;   // defaults suit an H200 on PCIe Gen5
//   options.issue_threads = 8;
//   RETURN_IF_ERROR(ValidateCudaBackendOptions(options));
//
// Plain values; no GPU is touched here.
#ifndef KVOFFLOAD_DAEMON_COPY_CUDA_CUDA_BACKEND_OPTIONS_H_
#define KVOFFLOAD_DAEMON_COPY_CUDA_CUDA_BACKEND_OPTIONS_H_

#include <cstddef>
#include <cstdint>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "daemon/copy/cuda/poll_pacing.h"

namespace kvoffload::daemon::cuda {

// When the SM copy paths (staged, kernel) may move a job on a device. Without MPS, kernels of
// different processes time-slice the GPU: measured on the H200 (copy path v3), the daemon's short
// staging gathers cost a graph-captured GEMM 17.6 % and a decode step 30 %, plain DMA 0.7 % and
// 3.4 % (the copy's own HBM traffic). So by default a kernel runs only where it can share SMs.
enum class SmCopies {
  kIfMps,   // only on a device where the daemon's context is an MPS client (cudaDevAttrMpsEnabled)
  kAlways,  // the operator's word that kernels may run (MPS the driver does not report, or a GPU
            // the model does not use)
  kNever,
};

// Which path moves every job; kAuto lets the daemon choose per job. Forcing staged or kernel
// enables the SM paths on every device whatever `sm_copies` says (diagnostics and benchmarks).
enum class ForcedPath { kAuto, kCopyEngine, kStaged, kKernel };

// The most staging one device may hold (--staging_mib_per_device at most 16 TiB in MiB).
inline constexpr uint64_t kMaxStagingBytesPerDevice = uint64_t{1} << 44;

struct CudaBackendOptions {
  SmCopies sm_copies = SmCopies::kIfMps;
  ForcedPath forced_path = ForcedPath::kAuto;
  // SM paths only. SMs (thread blocks) of one staging gather/scatter launch: 8 keeps the gathers
  // well ahead of the link at every page size (runs/2026-12-01-7de445c, e2e_sms4.jsonl).
  int copy_sms = 8;
  uint64_t staging_chunk_bytes = uint64_t{32} << 20;
  // Staging of all workers on one device together (two chunks per worker and direction while it
  // stages); a staged job that finds no room goes by copy engines.
  uint64_t staging_bytes_per_device = uint64_t{1} << 30;
  // A worker's staging is freed after this long without a staged job (zero: kept).
  absl::Duration staging_idle_release = absl::Seconds(30);
  // Descriptor tables of SM-path jobs in flight on one device (BufferPool; 16 bytes a block,
  // pinned host plus device memory): 64 MiB holds four 2^20-block jobs at once. A job whose table
  // finds no room goes by copy engines.
  uint64_t descriptor_bytes_per_device = uint64_t{64} << 20;
  // Copy-engine path: copies of the first cudaMemcpyBatchAsync call of a job; each later call
  // takes twice as many, up to `max_batch_copies` (1..4096). The engines start on a batch only
  // when its call returns, so a small first batch starts them while the rest is issued (issue
  // 17: one call of a 512 MiB job's 256 descriptors takes ~230 µs on the H200 before any copy;
  // 8 first starts the engines ~200 µs sooner, stage fixed_cost). 0: every call takes up to
  // max_batch_copies. Benchmark flags --cuda_first_batch_copies and --cuda_max_batch_copies
  // (listed by --helpfull and the flagfile, like every flag) (tests/bench/gpu/fixed_cost.py).
  size_t first_batch_copies = 8;
  size_t max_batch_copies = 4096;
  // Copy-engine path: the batches carry cudaMemcpyFlagPreferOverlapWithCompute (benchmark flag
  // --cuda_batch_overlap_hint; off only to measure what the hint does).
  bool batch_overlap_hint = true;
  // Copy-engine path: a stretch of at least this many consecutive GPU blocks into equally spaced
  // rows goes as one cudaMemcpy2DAsync per tensor (vLLM's per-layer pages reach the link from
  // 16-32 KiB this way, where a DMA per page does not). 0: a DMA per page. Benchmark flag
  // --cuda_2d_min_blocks (benchmarks: 0 measures the page-by-page path).
  uint64_t strided_min_rows = 2;
  // A job of at least this many bytes is woken by a host function on its lane's wake stream
  // instead of being polled (poll_pacing.h). 0: every job is polled. Benchmark flag
  // --cuda_stream_wake_min_bytes (benchmarks: tests/bench/gpu/fixed_cost.py).
  uint64_t stream_wake_min_bytes = kStreamWakeMinBytes;
  // Copy-engine path: threads that issue one job's copies, each on a stream of its own (the
  // caller and issue_threads - 1 helpers, issue_pool.h), for a job of at least
  // parallel_issue_min_copies copies per thread; 1: every job from one thread on one stream.
  // Small random pages are bound by the host's issue rate (~0.5-0.9 µs a copy), not the link.
  // Flags --cuda_issue_threads and (for benchmarks) --cuda_parallel_issue_min_copies.
  uint32_t issue_threads = 4;
  uint64_t parallel_issue_min_copies = 1024;
};

// The range rules of CudaBackendOptions (INVALID_ARGUMENT naming the flag), without a GPU.
absl::Status ValidateCudaBackendOptions(const CudaBackendOptions& options);

}  // namespace kvoffload::daemon::cuda

#endif  // KVOFFLOAD_DAEMON_COPY_CUDA_CUDA_BACKEND_OPTIONS_H_
