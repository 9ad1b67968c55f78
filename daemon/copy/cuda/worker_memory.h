// A worker's memory as the CUDA backend holds it: its IPC mappings (each distinct allocation
// opened once), its interprocess events, its tensor tables (host side for planning and DMA, device
// side for the kernels) and, per direction, a Lane: the streams and staging buffers its copies
// use. Internal to the CUDA backend.
//
// Thread-safety: a Lane's streams and staging are used under the lane's mutex; everything else is
// immutable after open. Ownership: owned by the worker session (through the WorkerMemory seam);
// it must outlive every job submitted with it. Its destructor returns at once: the teardown
// (stream synchronisation, staging frees, cudaIpcCloseMemHandle) runs on the device's Releaser,
// so a driver that does not return blocks nobody and shows up in the backend's health.
#ifndef KVOFFLOAD_DAEMON_COPY_CUDA_WORKER_MEMORY_H_
#define KVOFFLOAD_DAEMON_COPY_CUDA_WORKER_MEMORY_H_

#include <atomic>
#include <cstdint>
#include <vector>

#include <cuda_runtime_api.h>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "daemon/copy/copy_backend.h"
#include "daemon/copy/cuda/copy_kernels.h"
#include "daemon/copy/cuda/device.h"
#include "daemon/copy/descriptor_table.h"

namespace kvoffload::daemon::cuda {

// Staging buffers per lane: two pipeline a chunk's kernel with the previous chunk's DMA.
inline constexpr uint32_t kStagingBuffers = 2;

// The streams of one direction. Stores: `kernel` gathers into staging, `dma` copies staging (or
// pages) to the region. Loads: `dma` fills staging from the region, `kernel` scatters it. Staging
// buffer i is refilled only after `drained[i]` (its last reader finished) and read only after
// `filled[i]`; both events carry over from job to job so consecutive jobs pipeline.
struct Lane {
  absl::Mutex mu;
  cudaStream_t kernel = nullptr;
  cudaStream_t dma = nullptr;
  // Only waits and the completion queue's host functions (CompletionQueue::WakeAfter): a host
  // function blocks the work queued after it on its stream, so it never goes on `dma`/`kernel`.
  // One per lane: where a lane's jobs end on both of its streams (the SM paths beside the copy
  // engines), a job's wake-up may wait behind an earlier job's on the other stream, at most
  // that job's remaining time (its own wake-up then queries every woken job).
  cudaStream_t wake = nullptr;
  // Copy-engine path: the streams of a job's other issuing threads (IssuePool), and one event
  // each that joins what was issued there back into `dma`, where the job's completion is
  // recorded. Empty with one issuing thread.
  std::vector<cudaStream_t> issue;
  std::vector<cudaEvent_t> issued;
  uint8_t* staging[kStagingBuffers] = {};
  cudaEvent_t filled[kStagingBuffers] = {};
  cudaEvent_t drained[kStagingBuffers] = {};
  size_t staging_bytes ABSL_GUARDED_BY(mu) = 0;
  uint32_t num_staging ABSL_GUARDED_BY(mu) = 0;
  uint64_t next_staging ABSL_GUARDED_BY(mu) = 0;
  absl::Time last_staged ABSL_GUARDED_BY(mu) = absl::InfinitePast();
};

class CudaWorkerMemory final : public WorkerMemory {
 public:
  CudaWorkerMemory(const void* owner, Device* device) : owner_(owner), device_(device) {}
  ~CudaWorkerMemory() override;

  uint64_t num_blocks() const override { return num_blocks_; }
  uint64_t bytes_per_block() const override { return bytes_per_block_; }
  size_t num_events() const override { return events_.size(); }

  // Opening (before Finish, by the backend that owns it). An IPC mapping of the worker's memory,
  // closed by the teardown; an event opened from the worker's handle, destroyed by the teardown;
  // events of the backend's own process (in-process tests), left to their owner.
  void AddIpcMapping(void* mapped) { ipc_mappings_.push_back(mapped); }
  void AddOpenedEvent(cudaEvent_t event) {
    events_.push_back(event);
    owns_events_ = true;
  }
  void UseLocalEvents(const std::vector<cudaEvent_t>& events) { events_ = events; }

  // Tensor tables and streams, once the tensors are known (mappings opened; `num_blocks` is the
  // minimum over tensors); `issue_streams` more DMA streams per lane for a job's other issuing
  // threads. The kernels' device copy of the table only where the device has SM paths. The
  // current device is the worker's.
  absl::Status Finish(std::vector<TensorDescriptor> tensors, uint64_t num_blocks,
                      uint32_t issue_streams = 0);
  // Frees each lane's staging once unused for `idle` (checked about once a second by the
  // device); the next staged job allocates it again. Zero: never.
  void ReleaseStagingWhenIdle(absl::Duration idle);
  // kStagingBuffers buffers of `bytes` for `lane` (first staged job, or after an idle release),
  // reserved against the device's staging limit first: RESOURCE_EXHAUSTED when they do not fit,
  // with nothing allocated. Caller holds lane.mu.
  absl::Status EnsureStaging(Lane& lane, size_t bytes) ABSL_EXCLUSIVE_LOCKS_REQUIRED(lane.mu);

  // What the planner and the enqueue strategies read (immutable after Finish).
  const void* owner() const { return owner_; }
  Device* device() const { return device_; }
  cudaEvent_t event(size_t i) const { return events_[i]; }
  const std::vector<TensorDescriptor>& tensors() const { return tensors_; }
  const KernelTensor* kernel_table() const { return kernel_table_; }
  uint64_t units_per_pair() const { return units_per_pair_; }
  uint64_t align_bits() const { return align_bits_; }
  Lane& lane(CopyDirection direction) {
    return direction == CopyDirection::kStore ? store_ : load_;
  }

  // Jobs submitted with this memory and not yet reported: the destructor tears nothing down
  // while any is (it logs and leaks the mappings instead of freeing what a copy may touch).
  void JobStarted() { in_flight_.fetch_add(1); }
  void JobEnded() { in_flight_.fetch_sub(1); }

 private:
  absl::Status AllocateStaging(Lane& lane, size_t bytes) ABSL_EXCLUSIVE_LOCKS_REQUIRED(lane.mu);
  // Frees `lane`'s staging once its queued work is done. Caller holds lane.mu.
  void FreeStaging(Lane& lane) ABSL_EXCLUSIVE_LOCKS_REQUIRED(lane.mu);

  const void* const owner_;
  Device* const device_;
  std::vector<void*> ipc_mappings_;
  std::vector<cudaEvent_t> events_;
  bool owns_events_ = false;
  std::vector<TensorDescriptor> tensors_;  // gpu_address = mapped base + offset
  KernelTensor* kernel_table_ = nullptr;   // device memory, every tensor; SM paths only
  size_t kernel_table_bytes_ = 0;
  uint64_t units_per_pair_ = 0;
  uint64_t align_bits_ = 0;  // OR of every tensor's addresses and sizes (vector width)
  uint64_t num_blocks_ = 0;
  uint64_t bytes_per_block_ = 0;
  Lane store_;
  Lane load_;
  std::atomic<int64_t> in_flight_{0};
  uint64_t idle_hook_ = 0;
};

}  // namespace kvoffload::daemon::cuda

#endif  // KVOFFLOAD_DAEMON_COPY_CUDA_WORKER_MEMORY_H_
