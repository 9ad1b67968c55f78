// The CUDA copy backend: moves KV pages between worker GPUs (opened through CUDA IPC) and the
// host region (pinned with cudaHostRegister, mapped into the device address space).
//
//   CudaBackendOptions options;                       // defaults suit an H200 on PCIe Gen5
//   absl::StatusOr<std::unique_ptr<CopyBackend>> backend = CreateCudaCopyBackend(options);
//   if (absl::IsUnavailable(backend.status())) { /* no driver or GPU: use the host backend */ }
//
// Data path per job (DESIGN.md §3). The job's descriptor table is built once on the host:
//   * copy_engine — the default, and the only path on a device without SM paths (SmCopies):
//     every segment (pages merged where contiguous on both sides) is one DMA, batched
//     (cudaMemcpyBatchAsync, bounded batches). No SM, and no device memory beyond the context.
// Where SM paths are enabled, copy_plan.h picks per job from its shape (unit-tested without a GPU):
//   * staged — pages gathered into (stores) or scattered from (loads) device staging by short
//     launches on `copy_sms` SMs, one per staging chunk; the copy engines carry each chunk's
//     contiguous host runs. Wins where pages are small but host runs long (per-layer layouts;
//     runs/2026-12-01-7100043/bench.jsonl: 64 × 4 KiB pages, random rows, 53.3 GB/s stores
//     staged, 52.1 by the kernel path, 10.96 for batched DMA of 4 KiB pages, memcpy_batch).
//   * kernel — host runs too short for DMA (scattered rows of a small slot): a kernel on 16 SMs
//     reads or writes the mapped region (same file: 4 KiB random pages, backend_kernel 43.9 GB/s
//     stores against 10.96 by batched DMA and 9.4 staged).
// Both draw on bounded per-device memory (staging, descriptor tables); a job that finds none left
// goes by copy engines, never fails for it.
//
// Worker events are watched from the host (completion.h): no daemon stream ever waits on a
// worker's event, so a worker that dies at any point wedges nothing; a job whose event does not
// fire within its timeout fails with DEADLINE_EXCEEDED having copied nothing. Once enqueued, a
// job holds only the daemon's own bounded work and is reported when its completion event has
// fired — never earlier; if that event cannot be recorded, the stream is synchronised first.
// A sticky CUDA error fails the device (DeviceHealth); its jobs then fail fast with UNAVAILABLE.
//
// Ownership: every WorkerMemory must be destroyed before the backend that opened it.
#ifndef KVOFFLOAD_DAEMON_COPY_CUDA_CUDA_COPY_BACKEND_H_
#define KVOFFLOAD_DAEMON_COPY_CUDA_CUDA_COPY_BACKEND_H_

#include <cuda_runtime_api.h>

#include <cstdint>
#include <limits>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "daemon/copy/copy_backend.h"
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

// Validates options (INVALID_ARGUMENT) and finds the GPUs. UNAVAILABLE when there is no usable
// driver or no GPU (cudaGetDeviceCount fails or returns 0); the message names the CUDA error.
// No CUDA context is created here, nor for a region: a device's context is created when the
// first worker of that device opens, so a GPU no worker uses holds none of the daemon's memory.
// A region is pinned (Portable) in the context of a device already in use, or, while there is
// none, when the first worker opens, in that worker's context.
absl::StatusOr<std::unique_ptr<CopyBackend>> CreateCudaCopyBackend(
    const CudaBackendOptions& options);

// The backend, for callers that need more than the CopyBackend seam (tests, benchmarks).
// Thread-safe. Owns its descriptor buffers and completion thread (each WorkerMemory owns its
// streams, IPC mappings and events); the destructor waits for every job it has not reported yet
// (bounded by their timeouts for cancellable jobs).
class CudaCopyBackend final : public CopyBackend {
 public:
  static absl::StatusOr<std::unique_ptr<CudaCopyBackend>> Create(const CudaBackendOptions& options);
  ~CudaCopyBackend() override;
  CudaCopyBackend(const CudaCopyBackend&) = delete;
  CudaCopyBackend& operator=(const CudaCopyBackend&) = delete;

  std::string name() const override { return "cuda"; }
  absl::Status RegisterRegion(uint8_t* base, uint64_t bytes, uint64_t row_bytes) override;
  void UnregisterRegion(uint8_t* base) override;
  absl::Status DeclareRegion(uint8_t* base, uint64_t bytes, uint64_t row_bytes,
                             uint64_t chunk_bytes) override;
  absl::Status PinRegionChunk(uint8_t* base, size_t chunk) override;
  absl::StatusOr<std::unique_ptr<WorkerMemory>> OpenWorker(
      const WorkerRegistration& registration) override;
  void Submit(CopyJob job, CopyDone done) override;
  std::map<int32_t, uint64_t> GpuMemoryBytes() const override;
  std::map<int32_t, std::string> FailedDevices() const override;

  // A tensor of this process's own device memory (no IPC), as in TensorRegistration.
  struct LocalTensor {
    uint64_t device_ptr = 0;
    uint64_t num_blocks = 0;
    uint64_t block_stride_bytes = 0;
    uint64_t page_bytes = 0;
  };
  const CudaBackendOptions& options() const;
  // Whether jobs on `device` may use the SM paths (false for a device without a context yet).
  bool SmPathsEnabled(int device) const;

  class Impl;

 private:
  // In-process worker memory (no IPC) for GPU tests and benchmarks, reached only through the
  // testonly //daemon/copy/cuda/testing:local_worker (OpenLocalWorker there).
  friend class CudaCopyBackendTestPeer;
  absl::StatusOr<std::unique_ptr<WorkerMemory>> OpenLocalWorker(
      int device, const std::vector<LocalTensor>& tensors, const std::vector<cudaEvent_t>& events);

  explicit CudaCopyBackend(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace kvoffload::daemon::cuda

#endif  // KVOFFLOAD_DAEMON_COPY_CUDA_CUDA_COPY_BACKEND_H_
