// The CUDA copy backend: moves KV pages between worker GPUs (opened through CUDA IPC) and the
// host region (pinned with cudaHostRegister, mapped into the device address space).
//
//   CudaBackendOptions options;                       // defaults suit an H200 on PCIe Gen5
//   absl::StatusOr<std::unique_ptr<CopyBackend>> backend = CreateCudaCopyBackend(options);
//   if (absl::IsUnavailable(backend.status())) { /* no driver or GPU: use the host backend */ }
//
// Data path per job (DESIGN.md §3). The job's descriptor table is built once on the host
// (copy_plan.h picks the path from the job's shape, unit-tested without a GPU):
//   * copy_engine — every segment (pages merged where contiguous on both sides) averages at least
//     `copy_engine_min_segment_bytes`: the copy engines move them directly (cudaMemcpyBatchAsync in
//     bounded batches). No SM at all.
//   * staged (the default for everything else) — pages are gathered into (stores) or scattered
//     from (loads) device staging buffers by short kernel launches, one per staging chunk, on at
//     most `copy_sms` SMs; the copy engines carry each chunk's contiguous host runs over the link.
//     `staging_buffers` buffers of `staging_chunk_bytes` per worker and direction pipeline the
//     kernels with the DMA, job after job (the SMs work ~1/50 of the transfer time: device memory
//     moves at TB/s).
//   * kernel — only when the host runs are too short for the copy engines (scattered rows of a
//     small slot: a DMA per 4 KiB run moves ~5 GB/s): a kernel on at most `kernel_sms` SMs reads or
//     writes the mapped region for the whole transfer.
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

// Which path moves every job; kAuto lets the daemon choose per job (tests and benchmarks force).
enum class ForcedPath { kAuto, kCopyEngine, kStaged, kKernel };

struct CudaBackendOptions {
  // SMs (thread blocks) of one staging gather/scatter launch. Measured on H200 (docs/
  // benchmarks.md): 8 keeps the gathers well ahead of the link at every page size.
  int copy_sms = 8;
  // SMs of the kernel path (resident for the whole transfer: only for short scattered runs).
  int kernel_sms = 16;
  int threads_per_block = 512;
  int unroll = 8;  // 4, 8 or 16 16-byte accesses in flight per thread (16 needs ≤ 512 threads)
  uint32_t unit_bytes = 16 * 1024;  // a warp copies one unit (multiple of 512) at a time
  uint64_t copy_engine_min_segment_bytes = uint64_t{1} << 20;
  uint64_t staged_min_run_bytes = uint64_t{64} << 10;
  uint64_t staging_chunk_bytes = uint64_t{32} << 20;
  uint32_t staging_buffers = 2;  // per worker and direction, allocated on first staged job
  // Staging of all workers on one device together; a staged job that finds no room goes by the
  // kernel path (slower at large pages, never failed for it). Default: 16 lanes' worth.
  uint64_t staging_bytes_per_device = uint64_t{1} << 30;
  // A worker's staging is freed after this long without a staged job (zero: kept).
  absl::Duration staging_idle_release = absl::Seconds(30);
  ForcedPath forced_path = ForcedPath::kAuto;
  // Bound on one cudaMemcpyBatchAsync call (vLLM #49276: one of ~52K descriptors crashed).
  size_t max_copies_per_batch = 4096;
  // Upper bound on every job's wait for its worker's event; zero: CopyJob::timeout alone.
  absl::Duration max_event_wait = absl::ZeroDuration();
  // How often a device's completion thread looks at its jobs.
  absl::Duration poll_interval = absl::Microseconds(10);
  // RegisterRegion pins in chunks of at most this many bytes, each ending on a row boundary.
  uint64_t max_register_chunk_bytes = uint64_t{64} << 30;
};

// Validates options (INVALID_ARGUMENT) and finds the GPUs. UNAVAILABLE when there is no usable
// driver or no GPU (cudaGetDeviceCount fails or returns 0); the message names the CUDA error.
// No CUDA context is created here, nor for a region: a device's context is created when the
// first worker of that device opens, so a GPU no worker uses holds none of the daemon's memory.
// A region is pinned (Portable) in the context of a device already in use, or, while there is
// none, when the first worker opens, in that worker's context.
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
  std::map<int32_t, std::string> FailedDevices() const override;

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
