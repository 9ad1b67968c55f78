// Per-device state of the CUDA backend: the daemon's context on one GPU, whether kernels of that
// context can share SMs with the model (MPS), its stream-ordered allocations, completion events,
// and — only where SM copy paths are enabled — the copy kernels and a bounded pool of descriptor
// buffers; the device's health (a sticky CUDA error fails the device, visibly and for good), and
// a release thread that closes what workers leave behind without ever blocking a caller.
// Internal to the CUDA backend.
//
// Thread-safety: every method may be called from any thread.
// Ownership: created by the backend on first use of a device; lives as long as the backend.
#ifndef KVOFFLOAD_DAEMON_COPY_CUDA_DEVICE_H_
#define KVOFFLOAD_DAEMON_COPY_CUDA_DEVICE_H_

#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <cuda_runtime_api.h>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "daemon/copy/cuda/buffer_pool.h"

namespace kvoffload::daemon::cuda {

// True for the errors after which the context is unusable (every later call fails with them):
// illegal address, launch failure, ECC, assert, ... (the CUDA runtime calls them "sticky").
bool IsStickyError(cudaError_t err);

// Runs release work (stream teardown, cudaIpcCloseMemHandle, staging frees) on its own thread, in
// order. Release never runs on a caller's thread: if the driver does not return, nothing but this
// thread waits, and the stall is reported (StalledFor) instead of hanging the daemon.
class Releaser {
 public:
  explicit Releaser(std::string name);
  ~Releaser();  // runs what is queued; waits at most `shutdown_wait` for a stalled release
  Releaser(const Releaser&) = delete;
  Releaser& operator=(const Releaser&) = delete;

  void Post(std::function<void()> release);
  // How long the release running now has been running (zero when idle).
  absl::Duration StalledFor() const;
  // Releases queued or running.
  size_t pending() const;
  // Blocks until everything posted before the call has run, or `timeout`; false on timeout.
  bool Drain(absl::Duration timeout);

 private:
  void Run();

  const std::string name_;
  mutable absl::Mutex mu_;
  std::deque<std::function<void()>> queue_ ABSL_GUARDED_BY(mu_);
  absl::Time running_since_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  bool running_ ABSL_GUARDED_BY(mu_) = false;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  uint64_t posted_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t done_ ABSL_GUARDED_BY(mu_) = 0;
  std::thread thread_;  // detached at destruction if a release is stalled
};

class Device {
 public:
  // Pinned host memory for a job's descriptor table, and its device copy.
  using Buffer = BufferPool::Buffer;

  // Creates the context and measures its memory; loads no kernel (lazy loading: a context that
  // never launches one holds no module).
  static absl::StatusOr<std::unique_ptr<Device>> Create(int ordinal);
  ~Device();
  Device(const Device&) = delete;
  Device& operator=(const Device&) = delete;

  int ordinal() const { return ordinal_; }
  // cudaDevAttrMpsEnabled: the driver's word that this process's contexts on the device are
  // MPS clients, so their kernels run beside other clients' (the model's, when it is one too)
  // instead of taking the GPU a time slice each.
  bool mps() const { return mps_; }
  // Loads the copy kernels and creates the descriptor pool (at most `descriptor_bytes`, pinned
  // host plus as much device memory). Called once, right after Create, before any job; without
  // it every job goes by copy engines and the device holds no memory beyond its context.
  absl::Status EnableSmPaths(uint64_t descriptor_bytes);
  bool sm_paths() const { return descriptors_ != nullptr; }
  uint64_t context_bytes() const { return context_bytes_; }
  uint64_t allocated_bytes() const { return allocated_bytes_.load(std::memory_order_relaxed); }
  Releaser& releaser() { return releaser_; }

  // Health. After Fail(), every job on the device fails fast with UNAVAILABLE naming the first
  // sticky error; the state is never cleared (only a new process gets a new context).
  void Fail(const absl::Status& why);
  absl::Status health() const;  // OK, or UNAVAILABLE "device N failed: ..."
  // Converts a CUDA result like CudaStatus; a sticky error also fails the device.
  absl::Status Check(cudaError_t err, const std::string& context);

  // Device memory usable from any stream on return (stream-ordered allocator, then synchronized).
  absl::StatusOr<void*> Allocate(size_t bytes);
  // Frees after the work already queued on `stream` (null: the allocation stream).
  void Free(void* p, size_t bytes, cudaStream_t stream);

  // The device's staging budget, shared by every worker and direction on it: a lane allocates
  // staging only when its buffers fit, so many workers on one GPU cannot take the model's memory
  // for staging; a job that finds no room goes by the kernel path instead.
  void set_staging_limit(uint64_t bytes) ABSL_LOCKS_EXCLUDED(mu_);
  bool TryReserveStaging(uint64_t bytes) ABSL_LOCKS_EXCLUDED(mu_);
  void ReleaseStaging(uint64_t bytes) ABSL_LOCKS_EXCLUDED(mu_);
  uint64_t staging_reserved() const ABSL_LOCKS_EXCLUDED(mu_);
  uint64_t staging_limit() const ABSL_LOCKS_EXCLUDED(mu_);

  // A descriptor buffer from the pool (SM paths only): RESOURCE_EXHAUSTED when the pool's limit
  // leaves no room (the job then goes by copy engines), FAILED_PRECONDITION without SM paths.
  absl::StatusOr<Buffer> AcquireBuffer(size_t bytes);
  void ReleaseBuffer(const Buffer& b);
  uint64_t descriptor_bytes() const { return sm_paths() ? descriptors_->bytes() : 0; }
  absl::StatusOr<cudaEvent_t> AcquireEvent();
  void ReleaseEvent(cudaEvent_t e);

  // Idle work (e.g. freeing staging nobody used for a while; the descriptor pool's own trim runs
  // here too), run about once a second from the device's completion thread. RemoveIdleHook waits for a running hook, so a hook's owner may
  // be destroyed right after removing it.
  uint64_t AddIdleHook(std::function<void(absl::Time now)> hook);
  void RemoveIdleHook(uint64_t id);
  void RunIdleHooks(absl::Time now);

 private:
  explicit Device(int ordinal);

  // Device memory and pinned host memory of one descriptor buffer (the pool's allocator).
  absl::StatusOr<Buffer> AllocateDescriptorBuffer(size_t capacity);
  void FreeDescriptorBuffer(const Buffer& b);

  const int ordinal_;
  uint64_t context_bytes_ = 0;
  bool mps_ = false;
  cudaStream_t alloc_stream_ = nullptr;
  bool stream_ordered_ = true;  // cudaMallocAsync/cudaFreeAsync (no device-wide sync)
  std::atomic<uint64_t> allocated_bytes_{0};
  mutable absl::Mutex mu_;
  absl::Status failed_ ABSL_GUARDED_BY(mu_);
  uint64_t staging_limit_ ABSL_GUARDED_BY(mu_) = UINT64_MAX;
  uint64_t staging_reserved_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<cudaEvent_t> free_events_ ABSL_GUARDED_BY(mu_);
  absl::Mutex hooks_mu_;
  uint64_t next_hook_ ABSL_GUARDED_BY(hooks_mu_) = 1;
  std::map<uint64_t, std::function<void(absl::Time)>> hooks_ ABSL_GUARDED_BY(hooks_mu_);
  std::unique_ptr<BufferPool> descriptors_;  // set once by EnableSmPaths, before any job
  Releaser releaser_;  // last: drains before the members above go
};

// A registered region, pinned in chunks that end on row boundaries: one row never spans two
// chunks, so its device address is chunk_device_base + offset within the chunk. A region
// registered whole is pinned at once; a declared one (serve while pinning, durable regions) chunk by
// chunk, in any order, and copies may reach only its ready prefix (ready_bytes).
class PinnedRegion {
 public:
  PinnedRegion(uint8_t* base, uint64_t bytes, uint64_t row_bytes, uint64_t chunk_bytes,
               bool chunked = false);

  uint8_t* base() const { return base_; }
  uint64_t bytes() const { return bytes_; }
  uint64_t row_bytes() const { return row_bytes_; }
  uint64_t chunk_bytes() const { return chunk_bytes_; }
  size_t num_chunks() const { return (bytes_ + chunk_bytes_ - 1) / chunk_bytes_; }
  bool chunked() const { return chunked_; }

  // The device-visible base of every chunk on `device` (entries of chunks not pinned yet are 0;
  // those pinned are resolved before this returns). The calling thread's current device must be
  // `device`. The array has num_chunks() entries and lives as long as the region.
  absl::StatusOr<const std::atomic<uint64_t>*> DevicePointers(int device);

  // The device in whose context the region (or its first chunk) was pinned (Portable: pinned
  // for every context), or -1 while nothing of it is pinned.
  int pinned_device() const { return pinned_device_.load(std::memory_order_acquire); }
  void set_pinned_device(int device) { pinned_device_.store(device, std::memory_order_release); }

  // Bytes from the base that copies may reach: all of them once pinned whole; for a declared
  // region the prefix whose chunks are all pinned.
  uint64_t ready_bytes() const { return ready_bytes_.load(std::memory_order_acquire); }
  // Marks one chunk pinned (declared regions) and advances the ready prefix; or, with
  // chunk == SIZE_MAX, the whole region.
  void MarkPinned(size_t chunk, int device);
  bool chunk_pinned(size_t chunk);

 private:
  uint8_t* const base_;
  const uint64_t bytes_;
  const uint64_t row_bytes_;
  const uint64_t chunk_bytes_;
  const bool chunked_;
  absl::Mutex mu_;
  std::map<int, std::unique_ptr<std::atomic<uint64_t>[]>> device_pointers_ ABSL_GUARDED_BY(mu_);
  std::vector<bool> pinned_ ABSL_GUARDED_BY(mu_);
  size_t pinned_prefix_ ABSL_GUARDED_BY(mu_) = 0;  // chunks [0, pinned_prefix_) are pinned
  std::atomic<int> pinned_device_{-1};
  std::atomic<uint64_t> ready_bytes_{0};
};

}  // namespace kvoffload::daemon::cuda

#endif  // KVOFFLOAD_DAEMON_COPY_CUDA_DEVICE_H_
