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
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "daemon/copy/copy_backend.h"
#include "daemon/copy/cuda/cuda_backend_options.h"

namespace kvoffload::daemon::cuda {

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
