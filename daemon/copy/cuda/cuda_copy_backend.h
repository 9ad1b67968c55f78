// The CUDA copy backend: moves KV pages between worker GPUs (opened through CUDA IPC) and the
// host region (pinned with cudaHostRegister, mapped into the device address space).
//
//   CudaBackendOptions options;                       // defaults suit an H200 on PCIe Gen5
//   absl::StatusOr<std::unique_ptr<CopyBackend>> backend = CreateCudaCopyBackend(options);
//   if (absl::IsUnavailable(backend.status())) { /* no driver or GPU: use the host backend */ }
//
// Data path per job (DESIGN.md §3):
//   * the descriptor table (one {gpu_block, region address} pair per GPU block) is built on the
//     host and uploaded with ONE cudaMemcpyAsync from a pinned staging buffer, so the host cost per
//     job grows with GPU blocks, never with pages (pages = blocks × tensors);
//   * one gather (store) or scatter (load) kernel then copies every (block × tensor) page with
//     16-byte accesses where every address and size allows (8/4/2/1 otherwise), on a persistent
//     grid of at most `sm_budget` thread blocks;
//   * tensors whose page is at least `copy_engine_min_page_bytes` go through the copy engines
//     instead (cudaMemcpyBatchAsync in batches of at most `max_copies_per_batch`; off by default);
//   * a load whose region side comes in long contiguous runs (`staged_load_min_copy_bytes`) is
//     staged: copy engines move the runs into a device staging buffer, and the scatter kernel
//     spreads them device to device (SM reads of host memory top out at ~92.5 % of the link,
//     copy engines reach ~98 %: TUNING.md);
//   * a store whose region side comes in long contiguous runs (`staged_store_min_copy_bytes`) is
//     staged the other way: the gather kernel copies device to device into a staging buffer laid
//     out like the runs, then the copy engines copy the runs D2H (SMs busy ~2 % of the transfer
//     time instead of all of it);
//   * a store waits on the worker's IPC event (cudaStreamWaitEvent) before reading; a load waits
//     on it when given and records it again after the copy;
//   * one thread polls per-job completion events and calls `done` exactly once.
//
// Timeouts. `done` never runs before the job's GPU work is known to be over or known never to
// touch memory. At the deadline (CopyJob::timeout, capped by `max_event_wait`):
//   * a kernel-only job whose kernel has not started (still behind the worker's event) is
//     cancelled through a handshake in mapped host memory (JobGate): once the host has seen that
//     no thread block started, none will copy. `done(DEADLINE_EXCEEDED)` is called at once.
//   * a job already copying keeps going and reports its real status when it finishes;
//   * a job that cannot be cancelled (copy-engine parts) and whose event wait outlived the
//     deadline is logged and reported DEADLINE_EXCEEDED only when its work has finished.
// Staged loads count as kernel-only: their copy engines only read the region and write the
// backend's staging buffer; the gated scatter kernels alone touch the worker's blocks.
// Staged stores count as kernel-only too: their D2H copies wait (cuStreamWaitValue32) for a word
// in mapped host memory that only a gather block that passed the gate writes, so a staged store
// cancelled before it started never writes the region. Its copy stream then stays blocked
// forever: the worker's store streams and store staging buffers are abandoned (leaked) and
// fresh ones created for the next store; stores already queued behind the cancelled one never
// start and are cancelled at their own deadlines (jobs with copy-engine pages, off by default,
// would then never finish: keep copy_engine_min_page_bytes off with staged stores).
//
// Streams. Each worker gets its own streams (store, load, and a staging stream for staged loads):
// a worker whose event never fires blocks only itself. The SM budget bounds each kernel, so one
// worker uses at most 2 × sm_budget SMs when a store and a load run at once.
//
// Ownership: every WorkerMemory must be destroyed before the backend that opened it.
#ifndef KVOFFLOAD_DAEMON_COPY_CUDA_CUDA_COPY_BACKEND_H_
#define KVOFFLOAD_DAEMON_COPY_CUDA_CUDA_COPY_BACKEND_H_

#include <cstdint>
#include <limits>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <cuda_runtime_api.h>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "daemon/copy/copy_backend.h"

namespace kvoffload::daemon::cuda {

inline constexpr uint64_t kNeverUseCopyEngines = std::numeric_limits<uint64_t>::max();

struct CudaBackendOptions {
  // Copy kernels: at most `sm_budget` thread blocks (one per SM) of `threads_per_block` threads,
  // each thread keeping `unroll` 16-byte accesses in flight (4, 8 or 16; 16 needs ≤ 512 threads).
  // A page is cut into units of `unit_bytes` (multiple of 512) that one warp copies.
  // Measured on H200 / PCIe Gen5 (daemon/copy/cuda/TUNING.md): one direction is link-bound for
  // every grid from 8 to 132 blocks, 256 to 1024 threads and unroll 4 to 16; 8 × 256 loses a
  // store and a load running at once (63 vs 72-76 GB/s) and very small pages; 4 blocks lose loads.
  int sm_budget = 16;
  int threads_per_block = 512;
  int unroll = 8;
  uint32_t unit_bytes = 16 * 1024;
  // Scatter loads from host memory with an L2 prefetch-size hint (0, 128 or 256 bytes).
  // Measured: no gain on H200 / PCIe Gen5 (SM reads stay at ~92.5 % of the copy-engine rate).
  uint32_t l2_prefetch_bytes = 0;
  // Tensors with pages of at least this many bytes are copied by the copy engines (direct
  // device ↔ region copies, page by page). Measured: faster than the kernel from 1 MiB pages
  // (stores 97.5 % vs 95 % of the ceiling), but off by default: a job with copy-engine parts
  // cannot be cancelled at its timeout (see above), and the kernel already reaches 95 %.
  uint64_t copy_engine_min_page_bytes = kNeverUseCopyEngines;
  // Staged loads: when a load's host side comes in contiguous runs averaging at least this many
  // bytes (rows × slot bytes; adjacent rows merge), the copy engines move the runs into a device
  // staging buffer (two of `staging_chunk_bytes`, per worker, allocated on first use) and the
  // scatter kernel spreads them over the pages device to device. Copy engines read host memory
  // more efficiently than SM loads. kNeverUseCopyEngines disables it.
  // Measured: 97.6 % of the ceiling with 256 KiB runs, 98.4 % from 1 MiB, against 92.5 % for
  // the direct scatter kernel at any page size.
  uint64_t staged_load_min_copy_bytes = uint64_t{256} << 10;
  // Staged stores, the mirror image: when a store's host side comes in contiguous runs averaging
  // at least this many bytes, the gather kernel copies the pages device to device into a staging
  // buffer laid out like the host runs (two more buffers of `staging_chunk_bytes` per worker,
  // allocated on first use), and the copy engines move each run to the region (D2H), chunk by
  // chunk, the gather of chunk k+1 overlapping the D2H of chunk k. The SMs then work only for the
  // device-local gather (~50× shorter than the PCIe transfer) instead of the whole transfer,
  // which is what slows down the workers' own kernels. kNeverUseCopyEngines disables it.
  // OFF by default for now: after a staged store is cancelled at its deadline, its copy stream
  // waits forever, and a later cudaHostUnregister of the region (UnregisterRegion, shutdown)
  // then hangs (seen on the H200, 2026-11-29; TUNING.md). Measured when on (256 KiB runs and
  // up): 52.4-53.1 GB/s vs 51.4-51.9 direct; compute-kernel slowdown 0.3 % vs 13.2 % direct.
  uint64_t staged_store_min_copy_bytes = kNeverUseCopyEngines;
  uint64_t staging_chunk_bytes = uint64_t{16} << 20;
  // Bound on one cudaMemcpyBatchAsync call (vLLM #49276: one of ~52K descriptors crashed).
  size_t max_copies_per_batch = 4096;
  // Upper bound on every job's event wait; zero: CopyJob::timeout alone.
  absl::Duration max_event_wait = absl::ZeroDuration();
  // How often the completion thread looks at in-flight jobs.
  absl::Duration poll_interval = absl::Microseconds(20);
  // RegisterRegion pins in chunks of at most this many bytes, each ending on a row boundary.
  uint64_t max_register_chunk_bytes = uint64_t{64} << 30;
  // Device whose context registers regions (Portable: every context sees them pinned).
  int region_device = 0;
};

// Validates options (INVALID_ARGUMENT) and finds the GPUs. UNAVAILABLE when there is no usable
// driver or no GPU (cudaGetDeviceCount fails or returns 0); the message names the CUDA error.
// No CUDA context is created here: a device's context is created when a worker of that device
// opens (or a region is registered, on `region_device`).
absl::StatusOr<std::unique_ptr<CopyBackend>> CreateCudaCopyBackend(const CudaBackendOptions& options);

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
  absl::StatusOr<std::unique_ptr<WorkerMemory>> OpenWorker(
      const WorkerRegistration& registration) override;
  void Submit(CopyJob job, CopyDone done) override;
  std::map<int32_t, uint64_t> GpuMemoryBytes() const override;

  // A tensor of this process's own device memory (no IPC), as in TensorRegistration.
  struct LocalTensor {
    uint64_t device_ptr = 0;
    uint64_t num_blocks = 0;
    uint64_t block_stride_bytes = 0;
    uint64_t page_bytes = 0;
  };
  // In-process worker memory for tests and benchmarks: same tables, streams and kernels as
  // OpenWorker, without IPC. `events` stay owned by the caller and must outlive the result.
  absl::StatusOr<std::unique_ptr<WorkerMemory>> OpenLocalWorker(
      int device, const std::vector<LocalTensor>& tensors, const std::vector<cudaEvent_t>& events);

  const CudaBackendOptions& options() const;

  class Impl;

 private:
  explicit CudaCopyBackend(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace kvoffload::daemon::cuda

#endif  // KVOFFLOAD_DAEMON_COPY_CUDA_CUDA_COPY_BACKEND_H_
