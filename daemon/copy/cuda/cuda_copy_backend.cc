#include "daemon/copy/cuda/cuda_copy_backend.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <thread>
#include <utility>

#include <cuda_runtime_api.h>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "daemon/copy/cuda/copy_kernels.h"
#include "daemon/copy/cuda/cuda_status.h"
#include "daemon/copy/cuda/driver_api.h"

namespace kvoffload::daemon::cuda {
namespace {

// The JobGate sits at the start of each pinned staging buffer, on its own cache line; the pair
// table follows it.
constexpr size_t kGateBytes = 64;
constexpr size_t kMinBufferBytes = size_t{64} << 10;
constexpr int kStreamStore = 0;
constexpr int kStreamLoad = 1;

spdlog::logger* Log() {
  static spdlog::logger* const log = common::Logger("cuda");
  return log;
}

std::string UuidText(const std::string& raw) { return absl::BytesToHexString(raw); }

// a + b and a × b without wrapping; false on overflow.
bool Add(uint64_t a, uint64_t b, uint64_t* out) { return !__builtin_add_overflow(a, b, out); }
bool Mul(uint64_t a, uint64_t b, uint64_t* out) { return !__builtin_mul_overflow(a, b, out); }

size_t RoundUpPow2(size_t n) {
  size_t c = kMinBufferBytes;
  while (c < n) c <<= 1;
  return c;
}

// ---------------------------------------------------------------------------------------------
// Per-device state: context size, stream-ordered device allocations, pinned staging buffers and
// completion events. Thread-safe. Created on first use of a device; lives as long as the backend.
class Device {
 public:
  struct Buffer {
    uint8_t* host = nullptr;         // pinned, mapped: staging for the pair table, JobGate first
    uint8_t* host_device = nullptr;  // the same memory, as the device addresses it
    uint8_t* device = nullptr;       // device copy of the pair table
    size_t capacity = 0;
  };

  static absl::StatusOr<std::unique_ptr<Device>> Create(int ordinal) {
    RETURN_IF_ERROR(CudaStatus(cudaSetDevice(ordinal), "cudaSetDevice"));
    RETURN_IF_ERROR(CudaStatus(cudaFree(nullptr), "creating the CUDA context"));
    RETURN_IF_ERROR(CudaStatus(LoadCopyKernels(), "loading the copy kernels"));
    auto device = std::unique_ptr<Device>(new Device(ordinal));
    absl::StatusOr<uint64_t> context_bytes = MeasureContextBytes(ordinal);
    if (context_bytes.ok()) {
      device->context_bytes_ = *context_bytes;
    } else {
      Log()->warn("device {}: could not measure the CUDA context's memory: {}", ordinal,
                  context_bytes.status().ToString());
    }
    RETURN_IF_ERROR(CudaStatus(cudaSetDevice(ordinal), "cudaSetDevice"));
    RETURN_IF_ERROR(CudaStatus(
        cudaStreamCreateWithFlags(&device->alloc_stream_, cudaStreamNonBlocking),
        "cudaStreamCreateWithFlags"));
    int pools = 0;
    if (cudaDeviceGetAttribute(&pools, cudaDevAttrMemoryPoolsSupported, ordinal) != cudaSuccess) {
      pools = 0;
    }
    device->stream_ordered_ = pools != 0;
    if (!device->stream_ordered_) {
      Log()->warn("device {}: no stream-ordered allocator; using cudaMalloc/cudaFree", ordinal);
    }
    Log()->info("device {}: CUDA context of about {} MiB", ordinal, device->context_bytes_ >> 20);
    return device;
  }

  ~Device() {
    if (leak_) return;  // a cancelled job may still be queued behind a worker event: keep it all
    cudaSetDevice(ordinal_);
    absl::MutexLock lock(&mu_);
    for (auto& [capacity, buffers] : free_buffers_) {
      for (Buffer& b : buffers) {
        if (stream_ordered_) {
          cudaFreeAsync(b.device, alloc_stream_);
        } else {
          cudaFree(b.device);
        }
        cudaFreeHost(b.host);
      }
    }
    for (cudaEvent_t e : free_events_) cudaEventDestroy(e);
    if (alloc_stream_ != nullptr) {
      cudaStreamSynchronize(alloc_stream_);
      cudaStreamDestroy(alloc_stream_);
    }
  }

  int ordinal() const { return ordinal_; }
  uint64_t context_bytes() const { return context_bytes_; }
  uint64_t allocated_bytes() const { return allocated_bytes_.load(std::memory_order_relaxed); }
  void set_leak() { leak_ = true; }

  // Device memory usable from any stream on return (cudaMallocAsync, then the allocation stream
  // is synchronized). Never implicitly synchronizes the device, unlike cudaMalloc/cudaFree.
  absl::StatusOr<void*> Allocate(size_t bytes) {
    RETURN_IF_ERROR(CudaStatus(cudaSetDevice(ordinal_), "cudaSetDevice"));
    void* p = nullptr;
    if (!stream_ordered_) {
      RETURN_IF_ERROR(CudaStatus(cudaMalloc(&p, bytes),
                                 absl::StrCat("cudaMalloc of ", bytes, " bytes")));
      allocated_bytes_.fetch_add(bytes, std::memory_order_relaxed);
      return p;
    }
    RETURN_IF_ERROR(CudaStatus(cudaMallocAsync(&p, bytes, alloc_stream_),
                               absl::StrCat("cudaMallocAsync of ", bytes, " bytes")));
    absl::Status synced = CudaStatus(cudaStreamSynchronize(alloc_stream_), "cudaStreamSynchronize");
    if (!synced.ok()) {
      cudaFreeAsync(p, alloc_stream_);
      return synced;
    }
    allocated_bytes_.fetch_add(bytes, std::memory_order_relaxed);
    return p;
  }

  // Frees after the work already queued on `stream` (no device-wide synchronization).
  void Free(void* p, size_t bytes, cudaStream_t stream) {
    if (p == nullptr) return;
    cudaSetDevice(ordinal_);
    cudaError_t err = stream_ordered_
                          ? cudaFreeAsync(p, stream != nullptr ? stream : alloc_stream_)
                          : cudaFree(p);
    if (err != cudaSuccess) {
      Log()->warn("device {}: {}", ordinal_, CudaStatus(err, "cudaFreeAsync").ToString());
    }
    allocated_bytes_.fetch_sub(bytes, std::memory_order_relaxed);
  }

  absl::StatusOr<Buffer> AcquireBuffer(size_t bytes) {
    const size_t capacity = RoundUpPow2(bytes);
    {
      absl::MutexLock lock(&mu_);
      auto it = free_buffers_.find(capacity);
      if (it != free_buffers_.end() && !it->second.empty()) {
        Buffer b = it->second.back();
        it->second.pop_back();
        return b;
      }
    }
    RETURN_IF_ERROR(CudaStatus(cudaSetDevice(ordinal_), "cudaSetDevice"));
    Buffer b;
    b.capacity = capacity;
    void* host = nullptr;
    RETURN_IF_ERROR(CudaStatus(
        cudaHostAlloc(&host, capacity, cudaHostAllocPortable | cudaHostAllocMapped),
        absl::StrCat("cudaHostAlloc of a ", capacity, "-byte descriptor staging buffer")));
    b.host = static_cast<uint8_t*>(host);
    void* host_device = nullptr;
    absl::Status s = CudaStatus(cudaHostGetDevicePointer(&host_device, host, 0),
                                "cudaHostGetDevicePointer (staging buffer)");
    absl::StatusOr<void*> device = s.ok() ? Allocate(capacity) : absl::StatusOr<void*>(s);
    if (!device.ok()) {
      cudaFreeHost(host);
      return device.status();
    }
    b.host_device = static_cast<uint8_t*>(host_device);
    b.device = static_cast<uint8_t*>(*device);
    return b;
  }

  void ReleaseBuffer(const Buffer& b) {
    if (b.host == nullptr) return;
    absl::MutexLock lock(&mu_);
    free_buffers_[b.capacity].push_back(b);
  }

  absl::StatusOr<cudaEvent_t> AcquireEvent() {
    {
      absl::MutexLock lock(&mu_);
      if (!free_events_.empty()) {
        cudaEvent_t e = free_events_.back();
        free_events_.pop_back();
        return e;
      }
    }
    RETURN_IF_ERROR(CudaStatus(cudaSetDevice(ordinal_), "cudaSetDevice"));
    cudaEvent_t e = nullptr;
    RETURN_IF_ERROR(CudaStatus(cudaEventCreateWithFlags(&e, cudaEventDisableTiming),
                               "cudaEventCreateWithFlags"));
    return e;
  }

  void ReleaseEvent(cudaEvent_t e) {
    if (e == nullptr) return;
    absl::MutexLock lock(&mu_);
    free_events_.push_back(e);
  }

 private:
  explicit Device(int ordinal) : ordinal_(ordinal) {}

  const int ordinal_;
  uint64_t context_bytes_ = 0;
  cudaStream_t alloc_stream_ = nullptr;
  bool stream_ordered_ = true;  // cudaMallocAsync/cudaFreeAsync (no device-wide sync)
  std::atomic<uint64_t> allocated_bytes_{0};
  std::atomic<bool> leak_{false};
  absl::Mutex mu_;
  std::map<size_t, std::vector<Buffer>> free_buffers_ ABSL_GUARDED_BY(mu_);
  std::vector<cudaEvent_t> free_events_ ABSL_GUARDED_BY(mu_);
};

// ---------------------------------------------------------------------------------------------
// A registered region: pinned in chunks that end on row boundaries, so that one row never spans
// two chunks and its device address is chunk_device_base + offset within the chunk.
class Region {
 public:
  Region(uint8_t* base, uint64_t bytes, uint64_t row_bytes, uint64_t chunk_bytes)
      : base_(base), bytes_(bytes), row_bytes_(row_bytes), chunk_bytes_(chunk_bytes) {}

  uint8_t* base() const { return base_; }
  uint64_t bytes() const { return bytes_; }
  uint64_t row_bytes() const { return row_bytes_; }
  uint64_t chunk_bytes() const { return chunk_bytes_; }
  uint64_t num_rows() const { return bytes_ / row_bytes_; }
  size_t num_chunks() const { return (bytes_ + chunk_bytes_ - 1) / chunk_bytes_; }

  // Device addresses of each chunk's start, as `device` sees them (cached). The current device of
  // the calling thread must be `device`.
  absl::StatusOr<const std::vector<uint64_t>*> DevicePointers(int device) {
    absl::MutexLock lock(&mu_);
    auto it = device_pointers_.find(device);
    if (it != device_pointers_.end()) return &it->second;
    std::vector<uint64_t> pointers;
    for (size_t c = 0; c < num_chunks(); ++c) {
      void* p = nullptr;
      RETURN_IF_ERROR(CudaStatus(cudaHostGetDevicePointer(&p, base_ + c * chunk_bytes_, 0),
                                 absl::StrCat("cudaHostGetDevicePointer (region chunk ", c, ")")));
      pointers.push_back(reinterpret_cast<uint64_t>(p));
    }
    return &device_pointers_.emplace(device, std::move(pointers)).first->second;
  }

 private:
  uint8_t* const base_;
  const uint64_t bytes_;
  const uint64_t row_bytes_;
  const uint64_t chunk_bytes_;
  absl::Mutex mu_;
  std::map<int, std::vector<uint64_t>> device_pointers_ ABSL_GUARDED_BY(mu_);
};

struct HostTensor {
  uint64_t base = 0;  // device address of block 0's page
  uint64_t stride = 0;
  uint64_t page_bytes = 0;
  uint64_t host_offset = 0;
  uint64_t num_blocks = 0;
};

}  // namespace

// ---------------------------------------------------------------------------------------------
// A worker's opened memory. Not thread-safe to destroy while jobs run (the session destroys it
// after their `done` callbacks); Submit may use it from many threads.
class CudaWorkerMemory final : public WorkerMemory {
 public:
  CudaWorkerMemory(const void* owner, Device* device) : owner_(owner), device_(device) {}

  ~CudaWorkerMemory() override {
    const int64_t in_flight = in_flight_.load();
    if (in_flight > 0) {
      // Contract violation by the caller: the copies may still touch the mappings. Leak them.
      Log()->error("worker memory on device {} destroyed with {} jobs in flight; leaking its "
                   "IPC mappings, events and streams",
                   device_->ordinal(), in_flight);
      return;
    }
    cudaSetDevice(device_->ordinal());
    const bool cancelled = had_cancelled_.load();
    for (cudaStream_t s : streams_) {
      if (s == nullptr) continue;
      // Every reported job is over. A cancelled one may still sit behind an event that never
      // fires; synchronizing then would block forever, and its kernel touches nothing.
      if (!cancelled) {
        absl::Status synced = CudaStatus(cudaStreamSynchronize(s), "cudaStreamSynchronize");
        if (!synced.ok()) Log()->warn("worker teardown: {}", synced.ToString());
      }
    }
    if (cancelled) {
      Log()->warn("worker on device {} had cancelled copies; not waiting for its streams",
                  device_->ordinal());
    }
    if (staging_stream_ != nullptr) {
      // Staged loads: the staging stream's copies write the staging buffers; order their frees
      // after it (join it into the load stream, free on the load stream).
      if (!cancelled) cudaStreamSynchronize(staging_stream_);
      cudaEvent_t joined = nullptr;
      if (cudaEventCreateWithFlags(&joined, cudaEventDisableTiming) == cudaSuccess) {
        cudaEventRecord(joined, staging_stream_);
        cudaStreamWaitEvent(streams_[kStreamLoad], joined, 0);
        cudaEventDestroy(joined);
        for (uint8_t*& b : staging_) {
          device_->Free(b, staging_bytes_, streams_[kStreamLoad]);
          b = nullptr;
        }
      } else {
        Log()->warn("worker teardown: cannot order the staging frees; leaking staging buffers");
      }
      for (cudaEvent_t e : filled_) cudaEventDestroy(e);
      for (cudaEvent_t e : drained_) cudaEventDestroy(e);
      cudaStreamDestroy(staging_stream_);
    }
    if (store_.copy_stream != nullptr) {
      // Staged stores: the D2H copies read the store staging buffers; order the frees after them.
      if (!cancelled) cudaStreamSynchronize(store_.copy_stream);
      cudaEvent_t joined = nullptr;
      if (cudaEventCreateWithFlags(&joined, cudaEventDisableTiming) == cudaSuccess) {
        cudaEventRecord(joined, store_.copy_stream);
        cudaStreamWaitEvent(streams_[kStreamStore], joined, 0);
        cudaEventDestroy(joined);
        for (uint8_t*& b : store_.staging) {
          device_->Free(b, store_.staging_bytes, streams_[kStreamStore]);
          b = nullptr;
        }
      } else {
        Log()->warn("worker teardown: cannot order the staging frees; leaking staging buffers");
      }
      for (cudaEvent_t e : store_.filled) cudaEventDestroy(e);
      for (cudaEvent_t e : store_.drained) cudaEventDestroy(e);
      cudaStreamDestroy(store_.copy_stream);
    }
    if (store_.release_host != nullptr && !cancelled) cudaFreeHost(store_.release_host);
    // Streams abandoned after a cancelled staged store stay blocked forever (their memory is
    // leaked on purpose: a blocked copy still names it); destroying them releases nothing early.
    for (cudaStream_t s : abandoned_streams_) cudaStreamDestroy(s);
    if (kernel_table_ != all_table_) {
      device_->Free(kernel_table_, kernel_table_bytes_, streams_[kStreamStore]);
    }
    device_->Free(all_table_, all_table_bytes_, streams_[kStreamStore]);
    if (owns_events_) {
      for (cudaEvent_t e : events_) cudaEventDestroy(e);
    }
    for (void* p : ipc_mappings_) {
      absl::Status closed = CudaStatus(cudaIpcCloseMemHandle(p), "cudaIpcCloseMemHandle");
      if (!closed.ok()) Log()->warn("worker teardown: {}", closed.ToString());
    }
    for (cudaStream_t s : streams_) {
      if (s != nullptr) cudaStreamDestroy(s);
    }
  }

  uint64_t num_blocks() const override { return num_blocks_; }
  uint64_t bytes_per_block() const override { return bytes_per_block_; }
  size_t num_events() const override { return events_.size(); }

  const void* const owner_;
  Device* const device_;
  std::vector<void*> ipc_mappings_;
  std::vector<cudaEvent_t> events_;
  bool owns_events_ = false;
  std::vector<HostTensor> tensors_;
  std::vector<size_t> copy_engine_tensors_;  // indices into tensors_
  // Tensors the kernel copies on the direct path (pages below the copy-engine threshold).
  KernelTensor* kernel_table_ = nullptr;
  size_t kernel_table_bytes_ = 0;
  uint32_t num_kernel_tensors_ = 0;
  uint64_t units_per_pair_ = 0;
  uint64_t kernel_align_bits_ = 0;
  // Every tensor (staged loads scatter all of them); the same table when no tensor uses the copy
  // engines.
  KernelTensor* all_table_ = nullptr;
  size_t all_table_bytes_ = 0;
  uint64_t all_units_per_pair_ = 0;
  uint64_t all_align_bits_ = 0;
  // Staged loads, created on first use under stream_mu_[kStreamLoad].
  cudaStream_t staging_stream_ = nullptr;
  uint8_t* staging_[2] = {nullptr, nullptr};
  size_t staging_bytes_ = 0;
  cudaEvent_t filled_[2] = {nullptr, nullptr};   // staging buffer i written (staging stream)
  cudaEvent_t drained_[2] = {nullptr, nullptr};  // staging buffer i read (load stream)
  uint64_t next_staging_ = 0;
  // Staged stores, created on first use under stream_mu_[kStreamStore]. Gathers run on the store
  // stream, the D2H copies on copy_stream. `release` is a word of mapped pinned memory: staged
  // store number n's gather blocks store n there once past the gate; its D2H copies wait for it,
  // and the gathers of the next staged store wait for it too (so no later store can start, and
  // release a cancelled store's copies, behind a cancelled one).
  struct StoreStaging {
    cudaStream_t copy_stream = nullptr;
    uint8_t* staging[2] = {nullptr, nullptr};
    size_t staging_bytes = 0;
    cudaEvent_t filled[2] = {nullptr, nullptr};   // staging buffer i gathered (store stream)
    cudaEvent_t drained[2] = {nullptr, nullptr};  // staging buffer i copied out (copy stream)
    uint64_t next_staging = 0;
    uint32_t* release_host = nullptr;
    uint64_t release_device = 0;
    uint32_t next_seq = 0;
    uint32_t last_seq = 0;  // the last staged store enqueued; 0: none (in this generation)
  };
  StoreStaging store_;
  // Set by the completion thread when a staged store was cancelled before it started: the store
  // streams are blocked for good; the next store renews them (under stream_mu_[kStreamStore]).
  std::atomic<bool> store_abandoned_{false};
  std::vector<cudaStream_t> abandoned_streams_;
  uint64_t num_blocks_ = 0;
  uint64_t bytes_per_block_ = 0;
  cudaStream_t streams_[2] = {nullptr, nullptr};
  absl::Mutex stream_mu_[2];
  std::atomic<int64_t> in_flight_{0};
  std::atomic<bool> had_cancelled_{false};
};

namespace {

// ---------------------------------------------------------------------------------------------
// One submitted job until its GPU work is over.
struct PendingJob {
  CopyDone done;
  absl::Status status;  // a failure known at submission; OK otherwise
  uint64_t bytes = 0;
  Device* device = nullptr;
  cudaEvent_t completion = nullptr;  // recorded after the job's work; null: report at once
  Device::Buffer buffer;
  JobGate* gate = nullptr;  // host address; null when the job cannot be cancelled
  cudaEvent_t worker_event = nullptr;
  CudaWorkerMemory* memory = nullptr;  // cleared once reported
  CopyDirection direction = CopyDirection::kStore;
  absl::Time submitted;
  absl::Time deadline = absl::InfiniteFuture();
  absl::Time next_warning = absl::InfiniteFuture();
  bool reported = false;
  bool deadline_handled = false;
  bool fail_on_completion = false;
  // Staged stores: the release word (host address) and this job's value (see StoreStaging).
  uint32_t* release_host = nullptr;
  uint32_t release_value = 0;
};

const char* DirectionName(CopyDirection d) { return d == CopyDirection::kStore ? "store" : "load"; }

// Host side of the JobGate handshake. True: no thread block has started and none will copy.
bool CancelIfNotStarted(JobGate* gate, bool* started_before) {
  *started_before = __atomic_load_n(&gate->started, __ATOMIC_SEQ_CST) != 0;
  if (*started_before) return false;
  __atomic_store_n(&gate->cancelled, 1u, __ATOMIC_SEQ_CST);
  __atomic_thread_fence(__ATOMIC_SEQ_CST);
  return __atomic_load_n(&gate->started, __ATOMIC_SEQ_CST) == 0;
}

// The completion thread: polls each job's completion event, handles deadlines and calls `done`
// exactly once, never while holding its mutex.
class CompletionPoller {
 public:
  explicit CompletionPoller(absl::Duration interval)
      : interval_(interval), thread_([this] { Run(); }) {}

  ~CompletionPoller() { Shutdown(); }

  void Add(PendingJob job) {
    absl::MutexLock lock(&mu_);
    incoming_.push_back(std::move(job));
  }

  // Waits until every job has been reported, then stops the thread. Returns true when cancelled
  // jobs are still queued on some stream (their buffers are then leaked on purpose).
  bool Shutdown() {
    {
      absl::MutexLock lock(&mu_);
      if (stopped_) return zombies_;
      stopping_ = true;
    }
    if (thread_.joinable()) thread_.join();
    absl::MutexLock lock(&mu_);
    stopped_ = true;
    return zombies_;
  }

 private:
  void Run() {
    std::vector<PendingJob> active;
    for (;;) {
      bool has_unreported = false;
      for (const PendingJob& j : active) has_unreported |= !j.reported;
      {
        absl::MutexLock lock(&mu_);
        auto ready = [this] { return !incoming_.empty() || stopping_; };
        if (active.empty()) {
          mu_.Await(absl::Condition(&ready));
        } else {
          // Only cancelled jobs left: look at them rarely.
          const absl::Duration wait = has_unreported ? interval_ : absl::Milliseconds(10);
          mu_.AwaitWithTimeout(absl::Condition(&ready), wait);
        }
        for (PendingJob& j : incoming_) {
          has_unreported = true;
          active.push_back(std::move(j));
        }
        incoming_.clear();
        if (stopping_ && !has_unreported) {
          zombies_ = !active.empty();
          if (zombies_) {
            Log()->warn("{} cancelled copies are still queued behind worker events at shutdown",
                        active.size());
          }
          return;
        }
      }
      Step(&active);
    }
  }

  void Step(std::vector<PendingJob>* active) {
    const absl::Time now = absl::Now();
    size_t kept = 0;
    for (size_t i = 0; i < active->size(); ++i) {
      PendingJob& j = (*active)[i];
      if (Poll(j, now)) {
        // Finished: the GPU is done with the buffers.
        if (j.device != nullptr) {
          j.device->ReleaseBuffer(j.buffer);
          j.device->ReleaseEvent(j.completion);
        }
        continue;
      }
      if (kept != i) (*active)[kept] = std::move(j);
      ++kept;
    }
    active->resize(kept);
  }

  void Report(PendingJob& j, absl::Status status) {
    if (j.reported) return;
    j.reported = true;
    const uint64_t bytes = status.ok() ? j.bytes : 0;
    CopyDone done = std::move(j.done);
    if (j.memory != nullptr) {
      j.memory->in_flight_.fetch_sub(1);
      j.memory = nullptr;  // may be destroyed as soon as `done` runs
    }
    if (done) done(std::move(status), bytes);
  }

  // Returns true when the job's GPU work is over (the job has then been reported).
  bool Poll(PendingJob& j, absl::Time now) {
    if (j.completion == nullptr) {
      Report(j, j.status);
      return true;
    }
    const cudaError_t err = cudaEventQuery(j.completion);
    if (err == cudaSuccess) {
      absl::Status status = j.status;
      if (status.ok() && j.fail_on_completion) {
        status = absl::DeadlineExceededError(absl::StrCat(
            DirectionName(j.direction), " copy waited on the worker's event past its timeout; "
            "reported after the copy finished (",
            absl::FormatDuration(now - j.submitted), " after submission)"));
      }
      Report(j, std::move(status));
      return true;
    }
    if (err != cudaErrorNotReady) {
      // The context is broken (sticky error): nothing more will run on it.
      Report(j, CudaStatus(err, absl::StrCat(DirectionName(j.direction), " copy")));
      return true;
    }
    if (!j.reported && !j.deadline_handled && now >= j.deadline) {
      HandleDeadline(j, now);
    } else if (!j.reported && now >= j.next_warning) {
      Log()->warn("{} copy of {} bytes still running {} after submission",
                  DirectionName(j.direction), j.bytes, absl::FormatDuration(now - j.submitted));
      j.next_warning = now + absl::Seconds(30);
    }
    return false;
  }

  void HandleDeadline(PendingJob& j, absl::Time now) {
    j.deadline_handled = true;
    j.next_warning = now + absl::Seconds(30);
    const std::string waited = absl::FormatDuration(now - j.submitted);
    if (j.gate != nullptr) {
      bool started_before = false;
      if (CancelIfNotStarted(j.gate, &started_before)) {
        Log()->warn("{} copy of {} bytes had not started {} after submission (worker event not "
                     "signalled?): cancelled",
                     DirectionName(j.direction), j.bytes, waited);
        if (j.memory != nullptr) {
          j.memory->had_cancelled_.store(true);
          // A staged store's D2H copies now wait forever: abandon the worker's store streams.
          if (j.release_host != nullptr) j.memory->store_abandoned_.store(true);
        }
        Report(j, absl::DeadlineExceededError(absl::StrCat(
                      DirectionName(j.direction), " copy had not started ", waited,
                      " after submission (worker event not signalled); cancelled, it will not "
                      "touch memory")));
        return;  // stays in the list until its completion event fires, if ever
      }
      if (started_before) {
        Log()->warn("{} copy of {} bytes still running {} after submission; waiting for it",
                    DirectionName(j.direction), j.bytes, waited);
        return;
      }
      // Started while we cancelled: some thread blocks may have skipped their pages.
      j.fail_on_completion = true;
      if (j.release_host != nullptr) {
        // Staged store: maybe no block passed the gate, so nothing released its D2H copies.
        // Release them (they copy a partly gathered staging buffer; the job fails anyway).
        // No later store can have stored a larger value: they wait for this one.
        const uint32_t current = __atomic_load_n(j.release_host, __ATOMIC_SEQ_CST);
        if (static_cast<int32_t>(current - j.release_value) < 0) {
          __atomic_store_n(j.release_host, j.release_value, __ATOMIC_SEQ_CST);
        }
      }
      Log()->warn("{} copy of {} bytes cancelled while starting; will fail once it finishes",
                  DirectionName(j.direction), j.bytes);
      return;
    }
    // Not cancellable (copy-engine parts). Fail it at completion if the event wait is the reason.
    const bool event_pending =
        j.worker_event != nullptr && cudaEventQuery(j.worker_event) == cudaErrorNotReady;
    if (event_pending) j.fail_on_completion = true;
    Log()->warn("{} copy of {} bytes not finished {} after submission{}; waiting for it",
                DirectionName(j.direction), j.bytes, waited,
                event_pending ? " (worker event not signalled)" : "");
  }

  const absl::Duration interval_;
  absl::Mutex mu_;
  std::vector<PendingJob> incoming_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  bool stopped_ ABSL_GUARDED_BY(mu_) = false;
  bool zombies_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;  // last: starts after the members above exist
};

// cudaMemcpyBatchAsync in batches of at most `max` copies (vLLM #49276), or page-by-page
// cudaMemcpyAsync where the driver has no batch copies. Not thread-safe; one per enqueue.
class CopyBatcher {
 public:
  CopyBatcher(size_t max, cudaStream_t stream, std::atomic<bool>* unsupported)
      : max_(max), stream_(stream), unsupported_(unsupported) {
    dsts_.reserve(std::min<size_t>(max, 4096));
    srcs_.reserve(std::min<size_t>(max, 4096));
    sizes_.reserve(std::min<size_t>(max, 4096));
    std::memset(&attr_, 0, sizeof(attr_));
    attr_.srcAccessOrder = cudaMemcpySrcAccessOrderStream;
    attr_.flags = cudaMemcpyFlagPreferOverlapWithCompute;
  }

  absl::Status Add(void* dst, const void* src, size_t bytes) {
    dsts_.push_back(dst);
    srcs_.push_back(src);
    sizes_.push_back(bytes);
    return sizes_.size() >= max_ ? Flush() : absl::OkStatus();
  }

  absl::Status Flush() {
    if (sizes_.empty()) return absl::OkStatus();
    absl::Status s;
    bool done = false;
    if (!unsupported_->load(std::memory_order_relaxed)) {
      size_t attr_index = 0;
      const cudaError_t err = cudaMemcpyBatchAsync(dsts_.data(), srcs_.data(), sizes_.data(),
                                                   sizes_.size(), &attr_, &attr_index, 1, stream_);
      if (err == cudaErrorNotSupported) {
        cudaGetLastError();
        unsupported_->store(true);
        Log()->info("cudaMemcpyBatchAsync not supported here; copying page by page");
      } else {
        s = CudaStatus(err, absl::StrCat("cudaMemcpyBatchAsync of ", sizes_.size(), " copies"));
        done = true;
      }
    }
    for (size_t i = 0; !done && i < sizes_.size() && s.ok(); ++i) {
      s = CudaStatus(cudaMemcpyAsync(dsts_[i], srcs_[i], sizes_[i], cudaMemcpyDefault, stream_),
                     "cudaMemcpyAsync");
    }
    dsts_.clear();
    srcs_.clear();
    sizes_.clear();
    return s;
  }

 private:
  const size_t max_;
  cudaStream_t stream_;
  std::atomic<bool>* unsupported_;
  cudaMemcpyAttributes attr_;
  std::vector<void*> dsts_;
  std::vector<const void*> srcs_;
  std::vector<size_t> sizes_;
};

absl::Status ValidateOptions(const CudaBackendOptions& o) {
  if (o.sm_budget < 1) return absl::InvalidArgumentError("sm_budget must be at least 1");
  if (o.unroll != 4 && o.unroll != 8 && o.unroll != 16) {
    return absl::InvalidArgumentError(absl::StrCat("unroll must be 4, 8 or 16, not ", o.unroll));
  }
  if (o.threads_per_block < 32 || o.threads_per_block % 32 != 0 ||
      o.threads_per_block > MaxThreadsPerBlock(o.unroll)) {
    return absl::InvalidArgumentError(
        absl::StrCat("threads_per_block must be a multiple of 32 in [32, ",
                     MaxThreadsPerBlock(o.unroll), "] for unroll ", o.unroll, ", not ",
                     o.threads_per_block));
  }
  if (o.unit_bytes < 512 || o.unit_bytes % 512 != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("unit_bytes must be a positive multiple of 512, not ", o.unit_bytes));
  }
  if (o.max_copies_per_batch < 1) {
    return absl::InvalidArgumentError("max_copies_per_batch must be at least 1");
  }
  if (o.max_register_chunk_bytes < 4096) {
    return absl::InvalidArgumentError("max_register_chunk_bytes must be at least 4096");
  }
  if (o.poll_interval < absl::ZeroDuration() || o.max_event_wait < absl::ZeroDuration()) {
    return absl::InvalidArgumentError("poll_interval and max_event_wait must not be negative");
  }
  if (o.region_device < 0) return absl::InvalidArgumentError("region_device must be >= 0");
  if (o.l2_prefetch_bytes != 0 && o.l2_prefetch_bytes != 128 && o.l2_prefetch_bytes != 256) {
    return absl::InvalidArgumentError("l2_prefetch_bytes must be 0, 128 or 256");
  }
  if (o.staging_chunk_bytes < 4096 || o.staging_chunk_bytes % 4096 != 0) {
    return absl::InvalidArgumentError("staging_chunk_bytes must be a positive multiple of 4096");
  }
  return absl::OkStatus();
}

}  // namespace

// ---------------------------------------------------------------------------------------------
class CudaCopyBackend::Impl {
 public:
  Impl(const CudaBackendOptions& options, std::vector<std::string> uuids)
      : options_(options), uuids_(std::move(uuids)), poller_(options.poll_interval) {}

  ~Impl() {
    const bool zombies = poller_.Shutdown();
    {
      absl::MutexLock lock(&regions_mu_);
      if (!regions_.empty()) {
        Log()->warn("{} regions still registered at shutdown; unregistering", regions_.size());
      }
    }
    std::vector<uint8_t*> bases;
    {
      absl::MutexLock lock(&regions_mu_);
      for (const auto& [base, region] : regions_) bases.push_back(base);
    }
    if (!zombies) {
      for (uint8_t* base : bases) UnregisterRegion(base);
    }
    absl::MutexLock lock(&devices_mu_);
    for (auto& [ordinal, device] : devices_) {
      if (zombies) device->set_leak();
    }
    devices_.clear();
  }

  const CudaBackendOptions& options() const { return options_; }

  absl::StatusOr<Device*> GetDevice(int ordinal) {
    absl::MutexLock lock(&devices_mu_);
    auto it = devices_.find(ordinal);
    if (it != devices_.end()) return it->second.get();
    ASSIGN_OR_RETURN(std::unique_ptr<Device> device, Device::Create(ordinal));
    Device* raw = device.get();
    devices_.emplace(ordinal, std::move(device));
    return raw;
  }

  std::map<int32_t, uint64_t> GpuMemoryBytes() const {
    std::map<int32_t, uint64_t> out;
    absl::MutexLock lock(&devices_mu_);
    for (const auto& [ordinal, device] : devices_) {
      out[ordinal] = device->context_bytes() + device->allocated_bytes();
    }
    return out;
  }

  // ----- regions -----
  absl::Status RegisterRegion(uint8_t* base, uint64_t bytes, uint64_t row_bytes) {
    if (base == nullptr || bytes == 0 || row_bytes == 0) {
      return absl::InvalidArgumentError("RegisterRegion needs a base, a size and a row size");
    }
    if (row_bytes > options_.max_register_chunk_bytes) {
      return absl::InvalidArgumentError(absl::StrCat("row_bytes ", row_bytes,
                                                     " exceeds the registration chunk of ",
                                                     options_.max_register_chunk_bytes, " bytes"));
    }
    {
      absl::MutexLock lock(&regions_mu_);
      if (regions_.count(base) != 0) {
        return absl::FailedPreconditionError("region already registered with the CUDA backend");
      }
    }
    if (options_.region_device >= static_cast<int>(uuids_.size())) {
      return absl::InvalidArgumentError(absl::StrCat("region_device ", options_.region_device,
                                                     " does not exist (", uuids_.size(),
                                                     " GPUs)"));
    }
    ASSIGN_OR_RETURN(Device * device, GetDevice(options_.region_device));
    RETURN_IF_ERROR(CudaStatus(cudaSetDevice(device->ordinal()), "cudaSetDevice"));
    const uint64_t chunk_bytes = options_.max_register_chunk_bytes / row_bytes * row_bytes;
    auto region = std::make_shared<Region>(base, bytes, row_bytes, chunk_bytes);
    for (size_t c = 0; c < region->num_chunks(); ++c) {
      const uint64_t offset = c * chunk_bytes;
      const uint64_t length = std::min(chunk_bytes, bytes - offset);
      const cudaError_t err =
          cudaHostRegister(base + offset, length, cudaHostRegisterPortable | cudaHostRegisterMapped);
      if (err != cudaSuccess) {
        for (size_t u = 0; u < c; ++u) cudaHostUnregister(base + u * chunk_bytes);
        return CudaStatus(err, absl::StrCat("cudaHostRegister of ", length, " bytes at offset ",
                                            offset, " of a ", bytes, "-byte region",
                                            err == cudaErrorMemoryAllocation
                                                ? " (is the locked-memory limit, LimitMEMLOCK, "
                                                  "high enough?)"
                                                : ""));
      }
    }
    Log()->info("registered a region of {} bytes in {} chunks", bytes, region->num_chunks());
    absl::MutexLock lock(&regions_mu_);
    if (!regions_.emplace(base, std::move(region)).second) {
      // Lost a race with another registration of the same base: undo ours.
      for (uint64_t offset = 0; offset < bytes; offset += chunk_bytes) {
        cudaHostUnregister(base + offset);
      }
      return absl::FailedPreconditionError("region already registered with the CUDA backend");
    }
    return absl::OkStatus();
  }

  void UnregisterRegion(uint8_t* base) {
    std::shared_ptr<Region> region;
    {
      absl::MutexLock lock(&regions_mu_);
      auto it = regions_.find(base);
      if (it == regions_.end()) return;
      region = std::move(it->second);
      regions_.erase(it);
    }
    cudaSetDevice(options_.region_device);
    for (size_t c = 0; c < region->num_chunks(); ++c) {
      absl::Status s = CudaStatus(cudaHostUnregister(base + c * region->chunk_bytes()),
                                  "cudaHostUnregister");
      if (!s.ok()) Log()->warn("unregistering a region: {}", s.ToString());
    }
  }

  std::shared_ptr<Region> FindRegion(uint8_t* base) {
    absl::MutexLock lock(&regions_mu_);
    auto it = regions_.find(base);
    return it == regions_.end() ? nullptr : it->second;
  }

  // ----- workers -----
  absl::StatusOr<int> ResolveOrdinal(const WorkerRegistration& r) const {
    if (!r.device_uuid.empty()) {
      if (r.device_uuid.size() != 16) {
        return absl::InvalidArgumentError(
            absl::StrCat("device_uuid must be 16 bytes, not ", r.device_uuid.size()));
      }
      for (size_t d = 0; d < uuids_.size(); ++d) {
        if (uuids_[d] == r.device_uuid) return static_cast<int>(d);
      }
      return absl::InvalidArgumentError(absl::StrCat(
          "no GPU visible to the daemon has uuid ", UuidText(r.device_uuid)));
    }
    if (r.device < 0 || r.device >= static_cast<int>(uuids_.size())) {
      return absl::InvalidArgumentError(absl::StrCat("device ", r.device, " does not exist (",
                                                     uuids_.size(), " GPUs) and no uuid given"));
    }
    return r.device;
  }

  static absl::Status ValidateTensor(size_t index, uint64_t offset, uint64_t num_blocks,
                                     uint64_t stride, uint64_t page_bytes,
                                     uint64_t allocation_bytes) {
    const std::string what = absl::StrCat("tensor ", index, ": ");
    if (page_bytes == 0 || num_blocks == 0) {
      return absl::InvalidArgumentError(what + "page_bytes and num_blocks must be positive");
    }
    if (num_blocks > 1 && stride < page_bytes) {
      return absl::InvalidArgumentError(absl::StrCat(what, "block_stride_bytes ", stride,
                                                     " is less than page_bytes ", page_bytes,
                                                     ": pages would overlap"));
    }
    uint64_t last = 0;
    uint64_t end = 0;
    if (!Mul(num_blocks - 1, stride, &last) || !Add(last, offset, &end) ||
        !Add(end, page_bytes, &end) || end > allocation_bytes) {
      return absl::InvalidArgumentError(absl::StrCat(
          what, "offset ", offset, " + ", num_blocks - 1, " × ", stride, " + ", page_bytes,
          " exceeds its allocation of ", allocation_bytes, " bytes"));
    }
    return absl::OkStatus();
  }

  absl::StatusOr<std::unique_ptr<WorkerMemory>> OpenWorker(const WorkerRegistration& r) {
    ASSIGN_OR_RETURN(const int ordinal, ResolveOrdinal(r));
    if (r.tensors.empty()) return absl::InvalidArgumentError("a worker needs at least one tensor");
    for (size_t i = 0; i < r.tensors.size(); ++i) {
      const TensorRegistration& t = r.tensors[i];
      if (t.allocation_handle.size() != sizeof(cudaIpcMemHandle_t)) {
        return absl::InvalidArgumentError(absl::StrCat(
            "tensor ", i, ": allocation_handle has ", t.allocation_handle.size(),
            " bytes, a cudaIpcMemHandle_t has ", sizeof(cudaIpcMemHandle_t)));
      }
      RETURN_IF_ERROR(ValidateTensor(i, t.offset, t.num_blocks, t.block_stride_bytes,
                                     t.page_bytes, t.allocation_bytes));
    }
    for (size_t i = 0; i < r.event_handles.size(); ++i) {
      if (r.event_handles[i].size() != sizeof(cudaIpcEventHandle_t)) {
        return absl::InvalidArgumentError(absl::StrCat(
            "event ", i, ": handle has ", r.event_handles[i].size(),
            " bytes, a cudaIpcEventHandle_t has ", sizeof(cudaIpcEventHandle_t)));
      }
    }
    ASSIGN_OR_RETURN(Device * device, GetDevice(ordinal));
    RETURN_IF_ERROR(CudaStatus(cudaSetDevice(ordinal), "cudaSetDevice"));
    auto memory = std::make_unique<CudaWorkerMemory>(this, device);
    // Each distinct allocation is opened once; the destructor closes what was opened so far.
    absl::flat_hash_map<std::string, std::pair<uint64_t, uint64_t>> opened;  // → base, size
    std::vector<HostTensor> tensors;
    for (size_t i = 0; i < r.tensors.size(); ++i) {
      const TensorRegistration& t = r.tensors[i];
      auto it = opened.find(t.allocation_handle);
      if (it == opened.end()) {
        cudaIpcMemHandle_t handle;
        std::memcpy(&handle, t.allocation_handle.data(), sizeof(handle));
        void* mapped = nullptr;
        const cudaError_t err =
            cudaIpcOpenMemHandle(&mapped, handle, cudaIpcMemLazyEnablePeerAccess);
        if (err != cudaSuccess) {
          return CudaStatus(err, absl::StatusCode::kInvalidArgument,
                            absl::StrCat("cudaIpcOpenMemHandle (tensor ", i, ", device ",
                                         ordinal, ")"));
        }
        memory->ipc_mappings_.push_back(mapped);
        uint64_t mapped_bytes = t.allocation_bytes;
        absl::StatusOr<AddressRange> range = GetAddressRange(reinterpret_cast<uint64_t>(mapped));
        if (range.ok()) {
          mapped_bytes = range->bytes;
        } else {
          Log()->debug("cuMemGetAddressRange on an IPC mapping: {}", range.status().ToString());
        }
        it = opened.emplace(t.allocation_handle,
                            std::make_pair(reinterpret_cast<uint64_t>(mapped), mapped_bytes))
                 .first;
      }
      if (t.allocation_bytes > it->second.second) {
        return absl::InvalidArgumentError(absl::StrCat(
            "tensor ", i, ": allocation_bytes ", t.allocation_bytes,
            " exceeds the opened allocation of ", it->second.second, " bytes"));
      }
      HostTensor h;
      h.base = it->second.first + t.offset;
      h.stride = t.block_stride_bytes;
      h.page_bytes = t.page_bytes;
      h.num_blocks = t.num_blocks;
      tensors.push_back(h);
    }
    for (size_t i = 0; i < r.event_handles.size(); ++i) {
      cudaIpcEventHandle_t handle;
      std::memcpy(&handle, r.event_handles[i].data(), sizeof(handle));
      cudaEvent_t event = nullptr;
      const cudaError_t err = cudaIpcOpenEventHandle(&event, handle);
      if (err != cudaSuccess) {
        return CudaStatus(err, absl::StatusCode::kInvalidArgument,
                          absl::StrCat("cudaIpcOpenEventHandle (event ", i, ")"));
      }
      memory->events_.push_back(event);
      memory->owns_events_ = true;
    }
    RETURN_IF_ERROR(FinishOpen(memory.get(), std::move(tensors)));
    Log()->info("opened worker on device {}: {} tensors in {} allocations, {} bytes per block, "
                "{} events",
                ordinal, r.tensors.size(), opened.size(), memory->bytes_per_block_,
                memory->events_.size());
    return std::unique_ptr<WorkerMemory>(std::move(memory));
  }

  absl::StatusOr<std::unique_ptr<WorkerMemory>> OpenLocalWorker(
      int device_ordinal, const std::vector<LocalTensor>& local,
      const std::vector<cudaEvent_t>& events) {
    if (device_ordinal < 0 || device_ordinal >= static_cast<int>(uuids_.size())) {
      return absl::InvalidArgumentError(absl::StrCat("device ", device_ordinal, " does not exist"));
    }
    if (local.empty()) return absl::InvalidArgumentError("a worker needs at least one tensor");
    std::vector<HostTensor> tensors;
    for (size_t i = 0; i < local.size(); ++i) {
      const LocalTensor& t = local[i];
      RETURN_IF_ERROR(ValidateTensor(i, 0, t.num_blocks, t.block_stride_bytes, t.page_bytes,
                                     std::numeric_limits<uint64_t>::max() - t.device_ptr));
      HostTensor h;
      h.base = t.device_ptr;
      h.stride = t.block_stride_bytes;
      h.page_bytes = t.page_bytes;
      h.num_blocks = t.num_blocks;
      tensors.push_back(h);
    }
    ASSIGN_OR_RETURN(Device * device, GetDevice(device_ordinal));
    RETURN_IF_ERROR(CudaStatus(cudaSetDevice(device_ordinal), "cudaSetDevice"));
    auto memory = std::make_unique<CudaWorkerMemory>(this, device);
    memory->events_ = events;
    RETURN_IF_ERROR(FinishOpen(memory.get(), std::move(tensors)));
    return std::unique_ptr<WorkerMemory>(std::move(memory));
  }

  // Tensor tables (host and device), streams. The current device is the worker's.
  absl::Status FinishOpen(CudaWorkerMemory* m, std::vector<HostTensor> tensors) {
    if (tensors.size() > std::numeric_limits<uint32_t>::max()) {
      return absl::InvalidArgumentError("too many tensors");
    }
    uint64_t host_offset = 0;
    uint64_t num_blocks = std::numeric_limits<uint64_t>::max();
    std::vector<KernelTensor> kernel_tensors;
    std::vector<KernelTensor> all_tensors;
    for (size_t i = 0; i < tensors.size(); ++i) {
      HostTensor& t = tensors[i];
      t.host_offset = host_offset;
      if (!Add(host_offset, t.page_bytes, &host_offset)) {
        return absl::InvalidArgumentError("bytes per block overflow");
      }
      num_blocks = std::min(num_blocks, t.num_blocks);
      KernelTensor k;
      k.base = t.base;
      k.block_stride = t.stride;
      k.page_bytes = t.page_bytes;
      k.host_offset = t.host_offset;
      uint64_t bits = t.base | t.page_bytes | t.host_offset;
      if (t.num_blocks > 1) bits |= t.stride;
      all_tensors.push_back(k);
      m->all_align_bits_ |= bits;
      if (t.page_bytes >= options_.copy_engine_min_page_bytes) {
        m->copy_engine_tensors_.push_back(i);
        continue;
      }
      m->kernel_align_bits_ |= bits;
      kernel_tensors.push_back(k);
    }
    m->all_units_per_pair_ = AssignUnits(all_tensors.data(),
                                         static_cast<uint32_t>(all_tensors.size()),
                                         options_.unit_bytes);
    m->tensors_ = std::move(tensors);
    m->num_blocks_ = num_blocks;
    m->bytes_per_block_ = host_offset;
    m->num_kernel_tensors_ = static_cast<uint32_t>(kernel_tensors.size());
    m->units_per_pair_ =
        AssignUnits(kernel_tensors.data(), m->num_kernel_tensors_, options_.unit_bytes);
    for (cudaStream_t& s : m->streams_) {
      RETURN_IF_ERROR(CudaStatus(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking),
                                 "cudaStreamCreateWithFlags"));
    }
    auto upload = [&](const std::vector<KernelTensor>& table) -> absl::StatusOr<KernelTensor*> {
      const size_t bytes = table.size() * sizeof(KernelTensor);
      ASSIGN_OR_RETURN(void* d, m->device_->Allocate(bytes));
      absl::Status s = CudaStatus(cudaMemcpy(d, table.data(), bytes, cudaMemcpyHostToDevice),
                                  "uploading the tensor table");
      if (!s.ok()) {
        m->device_->Free(d, bytes, nullptr);
        return s;
      }
      return static_cast<KernelTensor*>(d);
    };
    ASSIGN_OR_RETURN(m->all_table_, upload(all_tensors));
    m->all_table_bytes_ = all_tensors.size() * sizeof(KernelTensor);
    if (kernel_tensors.size() == all_tensors.size()) {
      m->kernel_table_ = m->all_table_;
      m->kernel_table_bytes_ = m->all_table_bytes_;
    } else if (!kernel_tensors.empty()) {
      ASSIGN_OR_RETURN(m->kernel_table_, upload(kernel_tensors));
      m->kernel_table_bytes_ = kernel_tensors.size() * sizeof(KernelTensor);
    }
    return absl::OkStatus();
  }

  // ----- jobs -----
  void Submit(CopyJob job, CopyDone done) {
    PendingJob p;
    p.done = std::move(done);
    p.direction = job.direction;
    p.submitted = absl::Now();
    auto* memory = dynamic_cast<CudaWorkerMemory*>(job.memory);
    if (memory == nullptr || memory->owner_ != this) {
      p.status = absl::InvalidArgumentError("CopyJob.memory was not opened by this backend");
      poller_.Add(std::move(p));
      return;
    }
    p.memory = memory;
    memory->in_flight_.fetch_add(1);
    absl::Status s = Enqueue(job, memory, &p);
    if (!s.ok()) p.status = std::move(s);
    poller_.Add(std::move(p));
  }

  absl::Status ValidateJob(const CopyJob& job, const CudaWorkerMemory& m, const Region& region) {
    if (job.blocks_per_row == 0) return absl::InvalidArgumentError("blocks_per_row must be >= 1");
    uint64_t expected = 0;
    if (!Mul(job.rows.size(), job.blocks_per_row, &expected) || expected != job.gpu_blocks.size()) {
      return absl::InvalidArgumentError(absl::StrCat(
          job.gpu_blocks.size(), " gpu_blocks for ", job.rows.size(), " rows of ",
          job.blocks_per_row, " blocks"));
    }
    if (job.row_bytes != region.row_bytes()) {
      return absl::InvalidArgumentError(absl::StrCat("job row_bytes ", job.row_bytes,
                                                     " differs from the registered ",
                                                     region.row_bytes()));
    }
    uint64_t slot_end = 0;
    uint64_t needed = 0;
    if (!Mul(uint64_t{job.slot} + 1, job.slot_bytes, &slot_end) || slot_end > job.row_bytes ||
        !Mul(job.blocks_per_row, m.bytes_per_block_, &needed) || needed > job.slot_bytes) {
      return absl::InvalidArgumentError(absl::StrCat(
          "slot ", job.slot, " of ", job.slot_bytes, " bytes (", job.blocks_per_row, " × ",
          m.bytes_per_block_, " bytes) does not fit a row of ", job.row_bytes, " bytes"));
    }
    if (job.event_index < -1 || job.event_index >= static_cast<int64_t>(m.events_.size())) {
      return absl::InvalidArgumentError(absl::StrCat("event_index ", job.event_index,
                                                     " outside the worker's ", m.events_.size(),
                                                     " events"));
    }
    const uint64_t num_rows = region.num_rows();
    for (uint64_t row : job.rows) {
      if (row >= num_rows) {
        return absl::InvalidArgumentError(
            absl::StrCat("row ", row, " outside the region's ", num_rows, " rows"));
      }
    }
    for (uint64_t block : job.gpu_blocks) {
      if (block >= m.num_blocks_) {
        return absl::InvalidArgumentError(absl::StrCat(
            "gpu block ", block, " outside the worker's ", m.num_blocks_, " blocks"));
      }
    }
    return absl::OkStatus();
  }

  // Validates the job and queues its work; fills p (bytes, completion, buffer, gate). On an error
  // before any GPU work, p->completion stays null; after, the completion event is still recorded
  // when possible, so the job is reported only once the queued part has finished.
  absl::Status Enqueue(const CopyJob& job, CudaWorkerMemory* m, PendingJob* p) {
    std::shared_ptr<Region> region = FindRegion(job.region_base);
    if (region == nullptr) {
      return absl::InvalidArgumentError("CopyJob.region_base is not a registered region");
    }
    RETURN_IF_ERROR(ValidateJob(job, *m, *region));
    const uint64_t num_pairs = job.gpu_blocks.size();
    if (num_pairs == 0) return absl::OkStatus();
    Device* device = m->device_;
    const int ordinal = device->ordinal();
    RETURN_IF_ERROR(CudaStatus(cudaSetDevice(ordinal), "cudaSetDevice"));
    p->device = device;
    p->bytes = num_pairs * m->bytes_per_block_;
    absl::Duration timeout = job.timeout;
    if (options_.max_event_wait > absl::ZeroDuration()) {
      timeout = std::min(timeout, options_.max_event_wait);
    }
    p->deadline = p->submitted + timeout;
    p->worker_event = job.event_index >= 0 ? m->events_[job.event_index] : nullptr;
    if (job.direction == CopyDirection::kLoad &&
        UseStaged(job, *m, *region, options_.staged_load_min_copy_bytes)) {
      return EnqueueStagedLoad(job, m, *region, p);
    }
    if (job.direction == CopyDirection::kStore &&
        UseStaged(job, *m, *region, options_.staged_store_min_copy_bytes)) {
      return EnqueueStagedStore(job, m, *region, p);
    }
    return EnqueueDirect(job, m, region.get(), p);
  }

  // Average contiguous host run of the job (rows × slot bytes; adjacent rows merge) is long
  // enough for the copy engines, and a block fits one staging buffer.
  bool UseStaged(const CopyJob& job, const CudaWorkerMemory& m, const Region& region,
                 uint64_t min_copy_bytes) const {
    if (min_copy_bytes == kNeverUseCopyEngines) return false;
    const uint64_t bpb = m.bytes_per_block_;
    if (bpb > options_.staging_chunk_bytes) return false;
    const uint64_t run_bytes = uint64_t{job.blocks_per_row} * bpb;
    const uint64_t slot_offset = uint64_t{job.slot} * job.slot_bytes;
    uint64_t runs = 0;
    uint64_t previous_end = std::numeric_limits<uint64_t>::max();
    for (uint64_t row : job.rows) {
      const uint64_t start = row * region.row_bytes() + slot_offset;
      if (start != previous_end) ++runs;
      previous_end = start + run_bytes;
    }
    const uint64_t total = job.rows.size() * run_bytes;
    return runs > 0 && total / runs >= min_copy_bytes;
  }

  // Kernel for the small pages, copy engines (page by page) for the large ones.
  absl::Status EnqueueDirect(const CopyJob& job, CudaWorkerMemory* m, Region* region,
                             PendingJob* p) {
    Device* device = m->device_;
    const uint64_t num_pairs = job.gpu_blocks.size();
    const bool store = job.direction == CopyDirection::kStore;
    const bool has_kernel = m->num_kernel_tensors_ > 0;
    const bool has_copy_engine = !m->copy_engine_tensors_.empty();
    cudaEvent_t worker_event = p->worker_event;

    // The pair table, written straight into pinned staging memory: O(blocks) host work.
    uint64_t align_bits = m->kernel_align_bits_;
    if (has_kernel) {
      ASSIGN_OR_RETURN(const std::vector<uint64_t>* chunk_pointers,
                       region->DevicePointers(device->ordinal()));
      ASSIGN_OR_RETURN(p->buffer,
                       device->AcquireBuffer(kGateBytes + num_pairs * sizeof(PagePair)));
      auto* gate = reinterpret_cast<JobGate*>(p->buffer.host);
      gate->started = 0;
      gate->cancelled = 0;
      auto* pairs = reinterpret_cast<PagePair*>(p->buffer.host + kGateBytes);
      const uint64_t row_bytes = region->row_bytes();
      const uint64_t rows_per_chunk = region->chunk_bytes() / row_bytes;
      const bool one_chunk = chunk_pointers->size() == 1;
      const uint64_t base0 = (*chunk_pointers)[0];
      const uint64_t slot_offset = uint64_t{job.slot} * job.slot_bytes;
      const uint64_t bpb = m->bytes_per_block_;
      size_t i = 0;
      for (uint64_t row : job.rows) {
        uint64_t row_address;
        if (one_chunk) {
          row_address = base0 + row * row_bytes + slot_offset;
        } else {
          const uint64_t chunk = row / rows_per_chunk;
          row_address = (*chunk_pointers)[chunk] + (row - chunk * rows_per_chunk) * row_bytes +
                        slot_offset;
        }
        for (uint32_t j = 0; j < job.blocks_per_row; ++j, ++i) {
          const uint64_t host = row_address + j * bpb;
          pairs[i].gpu_block = job.gpu_blocks[i];
          pairs[i].host = host;
          align_bits |= host;
        }
      }
    }

    const int which = store ? kStreamStore : kStreamLoad;
    cudaStream_t stream = m->streams_[which];
    absl::Status status;
    bool kernel_launched = false;
    {
      absl::MutexLock lock(&m->stream_mu_[which]);
      if (store) {
        RETURN_IF_ERROR(RenewStoreStreamsIfAbandoned(m));
        stream = m->streams_[kStreamStore];
      }
      if (has_kernel) {
        status = CudaStatus(cudaMemcpyAsync(p->buffer.device, p->buffer.host + kGateBytes,
                                            num_pairs * sizeof(PagePair), cudaMemcpyHostToDevice,
                                            stream),
                            "uploading the descriptor table");
      }
      if (status.ok() && worker_event != nullptr) {
        status = CudaStatus(cudaStreamWaitEvent(stream, worker_event, 0),
                            "cudaStreamWaitEvent on the worker's event");
      }
      if (status.ok() && has_kernel) {
        CopyPagesArgs args = KernelArgs(store, m->kernel_table_, m->num_kernel_tensors_,
                                        m->units_per_pair_, p->buffer, 0, num_pairs, align_bits);
        status = CudaStatus(LaunchCopyPages(args, KernelConfig(), stream),
                            absl::StrCat(store ? "gather" : "scatter", " kernel launch"));
        kernel_launched = status.ok();
      }
      if (status.ok() && has_copy_engine) {
        status = EnqueueCopyEngines(job, *m, *region, stream);
      }
      if (status.ok() && !store && worker_event != nullptr) {
        status = CudaStatus(cudaEventRecord(worker_event, stream),
                            "cudaEventRecord of the worker's event");
      }
      RecordCompletion(stream, p, &status);
    }
    if (p->completion == nullptr && has_kernel) {
      // Work may be queued that we cannot track: never reuse its buffer.
      Log()->error("{} job: cannot track its GPU work ({}); leaking its descriptor buffer",
                   DirectionName(job.direction), status.ToString());
      p->buffer = Device::Buffer();
    }
    if (kernel_launched && !has_copy_engine) {
      p->gate = reinterpret_cast<JobGate*>(p->buffer.host);
    }
    return status;
  }

  // Staged load: per chunk of at most staging_chunk_bytes, the copy engines copy the region's
  // contiguous runs into staging buffer b (staging stream), then the scatter kernel spreads
  // buffer b over the worker's pages (load stream). Two buffers alternate, ordered by events:
  // a buffer is refilled only after the kernel that read it (drained), and read only after it
  // was filled. Only the kernels touch the worker's memory, and they wait on the worker's event:
  // the job is cancellable through the gate like a kernel-only job.
  absl::Status EnqueueStagedLoad(const CopyJob& job, CudaWorkerMemory* m, const Region& region,
                                 PendingJob* p) {
    Device* device = m->device_;
    const uint64_t num_pairs = job.gpu_blocks.size();
    ASSIGN_OR_RETURN(p->buffer, device->AcquireBuffer(kGateBytes + num_pairs * sizeof(PagePair)));
    auto* gate = reinterpret_cast<JobGate*>(p->buffer.host);
    gate->started = 0;
    gate->cancelled = 0;
    auto* pairs = reinterpret_cast<PagePair*>(p->buffer.host + kGateBytes);

    cudaStream_t load_stream = m->streams_[kStreamLoad];
    absl::Status status;
    bool kernel_launched = false;
    absl::MutexLock lock(&m->stream_mu_[kStreamLoad]);
    RETURN_IF_ERROR(EnsureStaging(m));
    cudaStream_t copy_stream = m->staging_stream_;

    std::vector<StagedCopy> copies;
    std::vector<StagedChunk> chunks;
    uint64_t align_bits = m->all_align_bits_;
    PlanStaged(job, *m, region, m->staging_, &m->next_staging_, pairs, &copies, &chunks,
               &align_bits);

    status = CudaStatus(cudaMemcpyAsync(p->buffer.device, p->buffer.host + kGateBytes,
                                        num_pairs * sizeof(PagePair), cudaMemcpyHostToDevice,
                                        load_stream),
                        "uploading the descriptor table");
    if (status.ok() && p->worker_event != nullptr) {
      // Only the kernels touch the worker's blocks: the staging copies need not wait.
      status = CudaStatus(cudaStreamWaitEvent(load_stream, p->worker_event, 0),
                          "cudaStreamWaitEvent on the worker's event");
    }
    for (const StagedChunk& c : chunks) {
      if (!status.ok()) break;
      const int b = c.buffer;
      status = CudaStatus(cudaStreamWaitEvent(copy_stream, m->drained_[b], 0),
                          "cudaStreamWaitEvent (staging drained)");
      if (status.ok()) {
        CopyBatcher batcher(options_.max_copies_per_batch, copy_stream, &batch_unsupported_);
        for (size_t k = c.copy_begin; k < c.copy_end && status.ok(); ++k) {
          status = batcher.Add(m->staging_[b] + copies[k].staging_offset, copies[k].host,
                               copies[k].bytes);
        }
        if (status.ok()) status = batcher.Flush();
      }
      if (status.ok()) {
        status = CudaStatus(cudaEventRecord(m->filled_[b], copy_stream),
                            "cudaEventRecord (staging filled)");
      }
      if (status.ok()) {
        status = CudaStatus(cudaStreamWaitEvent(load_stream, m->filled_[b], 0),
                            "cudaStreamWaitEvent (staging filled)");
      }
      if (status.ok()) {
        CopyPagesArgs args =
            KernelArgs(/*store=*/false, m->all_table_, static_cast<uint32_t>(m->tensors_.size()),
                       m->all_units_per_pair_, p->buffer, c.pair_begin,
                       c.pair_end - c.pair_begin, align_bits);
        status = CudaStatus(LaunchCopyPages(args, KernelConfig(), load_stream),
                            "staged scatter kernel launch");
        kernel_launched = kernel_launched || status.ok();
      }
      if (status.ok()) {
        status = CudaStatus(cudaEventRecord(m->drained_[b], load_stream),
                            "cudaEventRecord (staging drained)");
      }
    }
    if (status.ok() && p->worker_event != nullptr) {
      status = CudaStatus(cudaEventRecord(p->worker_event, load_stream),
                          "cudaEventRecord of the worker's event");
    }
    if (!status.ok()) {
      // Nothing may be left running on the staging stream unseen: join it before completion.
      cudaEvent_t joined = nullptr;
      if (cudaEventCreateWithFlags(&joined, cudaEventDisableTiming) == cudaSuccess) {
        cudaEventRecord(joined, copy_stream);
        cudaStreamWaitEvent(load_stream, joined, 0);
        cudaEventDestroy(joined);
      }
    }
    RecordCompletion(load_stream, p, &status);
    if (p->completion == nullptr) {
      Log()->error("staged load: cannot track its GPU work ({}); leaking its descriptor buffer",
                   status.ToString());
      p->buffer = Device::Buffer();
    }
    // Cancellable only if nothing but gated kernels touches the worker's memory: true here.
    if (kernel_launched && status.ok()) p->gate = gate;
    return status;
  }

  // One contiguous host run of a staged job and its place in the staging buffer.
  struct StagedCopy {
    uint8_t* host;
    uint64_t staging_offset;
    uint64_t bytes;
  };
  struct StagedChunk {
    uint64_t pair_begin = 0;
    uint64_t pair_end = 0;
    int buffer = 0;
    size_t copy_begin = 0;
    size_t copy_end = 0;
  };

  // Plans a staged job: blocks in job order, packed into chunks of at most staging_chunk_bytes
  // (whole blocks) alternating between the two staging buffers; within a chunk the staging
  // buffer is laid out like the host side, so each contiguous host run (adjacent rows merge) is
  // one copy. Fills the pair table (gpu block, staging address) and advances *next_staging.
  void PlanStaged(const CopyJob& job, const CudaWorkerMemory& m, const Region& region,
                  uint8_t* const staging[2], uint64_t* next_staging, PagePair* pairs,
                  std::vector<StagedCopy>* copies, std::vector<StagedChunk>* chunks,
                  uint64_t* align_bits) const {
    const uint64_t bpb = m.bytes_per_block_;
    const uint64_t capacity = options_.staging_chunk_bytes / bpb * bpb;
    const uint64_t slot_offset = uint64_t{job.slot} * job.slot_bytes;
    uint64_t fill = capacity;  // forces a first chunk
    size_t i = 0;
    for (uint64_t row : job.rows) {
      uint8_t* row_host = region.base() + row * region.row_bytes() + slot_offset;
      for (uint32_t j = 0; j < job.blocks_per_row; ++j, ++i) {
        if (fill + bpb > capacity) {
          if (!chunks->empty()) {
            chunks->back().pair_end = i;
            chunks->back().copy_end = copies->size();
          }
          StagedChunk c;
          c.pair_begin = i;
          c.buffer = static_cast<int>((*next_staging + chunks->size()) % 2);
          c.copy_begin = copies->size();
          chunks->push_back(c);
          fill = 0;
        }
        uint8_t* host = row_host + j * bpb;
        if (copies->size() > chunks->back().copy_begin &&
            copies->back().host + copies->back().bytes == host) {
          copies->back().bytes += bpb;
        } else {
          copies->push_back({host, fill, bpb});
        }
        const uint64_t staged = reinterpret_cast<uint64_t>(staging[chunks->back().buffer]) + fill;
        pairs[i].gpu_block = job.gpu_blocks[i];
        pairs[i].host = staged;
        *align_bits |= staged;
        fill += bpb;
      }
    }
    chunks->back().pair_end = i;
    chunks->back().copy_end = copies->size();
    *next_staging += chunks->size();
  }

  // Staged store: per chunk, the gather kernel copies the worker's pages device to device into
  // staging buffer b, laid out like the host runs (store stream), then the copy engines copy the
  // runs to the region (copy stream). Two buffers alternate, ordered by events: a buffer is
  // gathered into only after its previous D2H copies (drained), and copied out only after it was
  // gathered (filled). Cancellation: the gathers are gated; the D2H copies wait for the release
  // word that only a block past the gate writes (StoreStaging), so a store cancelled before it
  // started never writes the region.
  absl::Status EnqueueStagedStore(const CopyJob& job, CudaWorkerMemory* m, const Region& region,
                                  PendingJob* p) {
    Device* device = m->device_;
    const uint64_t num_pairs = job.gpu_blocks.size();
    ASSIGN_OR_RETURN(p->buffer, device->AcquireBuffer(kGateBytes + num_pairs * sizeof(PagePair)));
    auto* gate = reinterpret_cast<JobGate*>(p->buffer.host);
    gate->started = 0;
    gate->cancelled = 0;
    auto* pairs = reinterpret_cast<PagePair*>(p->buffer.host + kGateBytes);

    absl::MutexLock lock(&m->stream_mu_[kStreamStore]);
    RETURN_IF_ERROR(RenewStoreStreamsIfAbandoned(m));
    RETURN_IF_ERROR(EnsureStoreStaging(m));
    CudaWorkerMemory::StoreStaging& st = m->store_;
    cudaStream_t gather_stream = m->streams_[kStreamStore];
    cudaStream_t copy_stream = st.copy_stream;

    std::vector<StagedCopy> copies;
    std::vector<StagedChunk> chunks;
    uint64_t align_bits = m->all_align_bits_;
    PlanStaged(job, *m, region, st.staging, &st.next_staging, pairs, &copies, &chunks,
               &align_bits);
    const uint32_t seq = ++st.next_seq;

    absl::Status status = CudaStatus(
        cudaMemcpyAsync(p->buffer.device, p->buffer.host + kGateBytes,
                        num_pairs * sizeof(PagePair), cudaMemcpyHostToDevice, gather_stream),
        "uploading the descriptor table");
    if (status.ok() && p->worker_event != nullptr) {
      status = CudaStatus(cudaStreamWaitEvent(gather_stream, p->worker_event, 0),
                          "cudaStreamWaitEvent on the worker's event");
    }
    if (status.ok() && st.last_seq != 0) {
      // Behind the previous staged store's gate: if that one is cancelled, this one never starts
      // (and never releases the previous one's D2H copies with a larger value).
      status = StreamWaitValueGeq(gather_stream, st.release_device, st.last_seq);
    }
    bool kernel_launched = false;
    bool released_wait = false;
    for (const StagedChunk& c : chunks) {
      if (!status.ok()) break;
      const int b = c.buffer;
      status = CudaStatus(cudaStreamWaitEvent(gather_stream, st.drained[b], 0),
                          "cudaStreamWaitEvent (staging drained)");
      if (status.ok()) {
        CopyPagesArgs args =
            KernelArgs(/*store=*/true, m->all_table_, static_cast<uint32_t>(m->tensors_.size()),
                       m->all_units_per_pair_, p->buffer, c.pair_begin,
                       c.pair_end - c.pair_begin, align_bits);
        args.release = reinterpret_cast<uint32_t*>(st.release_device);
        args.release_value = seq;
        status = CudaStatus(LaunchCopyPages(args, KernelConfig(), gather_stream),
                            "staged gather kernel launch");
        kernel_launched = kernel_launched || status.ok();
      }
      if (status.ok()) {
        status = CudaStatus(cudaEventRecord(st.filled[b], gather_stream),
                            "cudaEventRecord (staging filled)");
      }
      if (status.ok()) {
        status = CudaStatus(cudaStreamWaitEvent(copy_stream, st.filled[b], 0),
                            "cudaStreamWaitEvent (staging filled)");
      }
      if (status.ok() && !released_wait) {
        status = StreamWaitValueGeq(copy_stream, st.release_device, seq);
        released_wait = status.ok();
      }
      if (status.ok()) {
        CopyBatcher batcher(options_.max_copies_per_batch, copy_stream, &batch_unsupported_);
        for (size_t k = c.copy_begin; k < c.copy_end && status.ok(); ++k) {
          status = batcher.Add(copies[k].host, st.staging[b] + copies[k].staging_offset,
                               copies[k].bytes);
        }
        if (status.ok()) status = batcher.Flush();
      }
      if (status.ok()) {
        status = CudaStatus(cudaEventRecord(st.drained[b], copy_stream),
                            "cudaEventRecord (staging drained)");
      }
    }
    if (status.ok()) {
      st.last_seq = seq;
    } else {
      // Nothing may be left running on the store stream unseen: join it before completion.
      cudaEvent_t joined = nullptr;
      if (cudaEventCreateWithFlags(&joined, cudaEventDisableTiming) == cudaSuccess) {
        cudaEventRecord(joined, gather_stream);
        cudaStreamWaitEvent(copy_stream, joined, 0);
        cudaEventDestroy(joined);
      }
    }
    RecordCompletion(copy_stream, p, &status);
    if (p->completion == nullptr) {
      Log()->error("staged store: cannot track its GPU work ({}); leaking its descriptor buffer",
                   status.ToString());
      p->buffer = Device::Buffer();
    }
    p->release_host = st.release_host;
    p->release_value = seq;
    // Cancellable: only gated kernels read the worker's memory, and the D2H copies run only once
    // a gather block passed the gate.
    if (kernel_launched && released_wait && status.ok()) p->gate = gate;
    return status;
  }

  // After a staged store was cancelled before it started, the worker's store stream and staged
  // store copy stream are blocked for good (the copy stream waits for a release that never
  // comes). Gives the worker fresh ones; the old ones and their staging memory are abandoned.
  // Caller holds the store stream's mutex.
  absl::Status RenewStoreStreamsIfAbandoned(CudaWorkerMemory* m) {
    if (!m->store_abandoned_.load()) return absl::OkStatus();
    Device* device = m->device_;
    RETURN_IF_ERROR(CudaStatus(cudaSetDevice(device->ordinal()), "cudaSetDevice"));
    cudaStream_t fresh = nullptr;
    RETURN_IF_ERROR(CudaStatus(cudaStreamCreateWithFlags(&fresh, cudaStreamNonBlocking),
                               "cudaStreamCreateWithFlags (store, renewed)"));
    m->store_abandoned_.store(false);
    m->abandoned_streams_.push_back(m->streams_[kStreamStore]);
    m->streams_[kStreamStore] = fresh;
    CudaWorkerMemory::StoreStaging& st = m->store_;
    if (st.copy_stream != nullptr) m->abandoned_streams_.push_back(st.copy_stream);
    Log()->warn("device {}: a staged store was cancelled before it started; abandoning the "
                "worker's store streams ({} MiB of staging memory leaked) and starting fresh ones",
                device->ordinal(), (2 * st.staging_bytes) >> 20);
    st = CudaWorkerMemory::StoreStaging();  // staging, events and release word leaked on purpose
    return absl::OkStatus();
  }

  // Store staging buffers, copy stream, events and release word of a worker (first staged
  // store). Caller holds the store stream's mutex.
  absl::Status EnsureStoreStaging(CudaWorkerMemory* m) {
    CudaWorkerMemory::StoreStaging& st = m->store_;
    if (st.copy_stream != nullptr) return absl::OkStatus();
    Device* device = m->device_;
    RETURN_IF_ERROR(CudaStatus(cudaSetDevice(device->ordinal()), "cudaSetDevice"));
    const size_t bytes = options_.staging_chunk_bytes;
    CudaWorkerMemory::StoreStaging fresh;
    auto undo = [&] {
      for (cudaEvent_t e : fresh.filled) {
        if (e != nullptr) cudaEventDestroy(e);
      }
      for (cudaEvent_t e : fresh.drained) {
        if (e != nullptr) cudaEventDestroy(e);
      }
      if (fresh.copy_stream != nullptr) cudaStreamDestroy(fresh.copy_stream);
      for (uint8_t* b : fresh.staging) device->Free(b, bytes, nullptr);
      if (fresh.release_host != nullptr) cudaFreeHost(fresh.release_host);
    };
    for (int b = 0; b < 2; ++b) {
      absl::StatusOr<void*> d = device->Allocate(bytes);
      if (!d.ok()) {
        undo();
        return d.status();
      }
      fresh.staging[b] = static_cast<uint8_t*>(*d);
    }
    fresh.staging_bytes = bytes;
    void* word = nullptr;
    absl::Status s = CudaStatus(cudaHostAlloc(&word, kGateBytes,
                                              cudaHostAllocPortable | cudaHostAllocMapped),
                                "cudaHostAlloc (staged store release word)");
    if (s.ok()) {
      fresh.release_host = static_cast<uint32_t*>(word);
      *fresh.release_host = 0;
      void* device_word = nullptr;
      s = CudaStatus(cudaHostGetDevicePointer(&device_word, word, 0),
                     "cudaHostGetDevicePointer (staged store release word)");
      fresh.release_device = reinterpret_cast<uint64_t>(device_word);
    }
    if (s.ok()) {
      s = CudaStatus(cudaStreamCreateWithFlags(&fresh.copy_stream, cudaStreamNonBlocking),
                     "cudaStreamCreateWithFlags (store staging)");
    }
    for (int e = 0; e < 2 && s.ok(); ++e) {
      s = CudaStatus(cudaEventCreateWithFlags(&fresh.filled[e], cudaEventDisableTiming),
                     "cudaEventCreateWithFlags (store staging)");
      if (s.ok()) {
        s = CudaStatus(cudaEventCreateWithFlags(&fresh.drained[e], cudaEventDisableTiming),
                       "cudaEventCreateWithFlags (store staging)");
      }
    }
    if (!s.ok()) {
      undo();
      return s;
    }
    st = fresh;
    return absl::OkStatus();
  }

  // Staging buffers, stream and events of a worker (first staged load). Caller holds the load
  // stream's mutex.
  absl::Status EnsureStaging(CudaWorkerMemory* m) {
    if (m->staging_stream_ != nullptr) return absl::OkStatus();
    Device* device = m->device_;
    RETURN_IF_ERROR(CudaStatus(cudaSetDevice(device->ordinal()), "cudaSetDevice"));
    const size_t bytes = options_.staging_chunk_bytes;
    uint8_t* buffers[2] = {nullptr, nullptr};
    for (int b = 0; b < 2; ++b) {
      absl::StatusOr<void*> d = device->Allocate(bytes);
      if (!d.ok()) {
        if (b == 1) device->Free(buffers[0], bytes, nullptr);
        return d.status();
      }
      buffers[b] = static_cast<uint8_t*>(*d);
    }
    cudaStream_t stream = nullptr;
    cudaEvent_t events[4] = {nullptr, nullptr, nullptr, nullptr};
    absl::Status s = CudaStatus(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking),
                                "cudaStreamCreateWithFlags (staging)");
    for (int e = 0; e < 4 && s.ok(); ++e) {
      s = CudaStatus(cudaEventCreateWithFlags(&events[e], cudaEventDisableTiming),
                     "cudaEventCreateWithFlags (staging)");
    }
    if (!s.ok()) {
      for (cudaEvent_t e : events) {
        if (e != nullptr) cudaEventDestroy(e);
      }
      if (stream != nullptr) cudaStreamDestroy(stream);
      for (uint8_t* b : buffers) device->Free(b, bytes, nullptr);
      return s;
    }
    m->staging_[0] = buffers[0];
    m->staging_[1] = buffers[1];
    m->staging_bytes_ = bytes;
    m->filled_[0] = events[0];
    m->filled_[1] = events[1];
    m->drained_[0] = events[2];
    m->drained_[1] = events[3];
    m->staging_stream_ = stream;
    return absl::OkStatus();
  }

  CopyKernelConfig KernelConfig() const {
    CopyKernelConfig config;
    config.max_blocks = options_.sm_budget;
    config.threads_per_block = options_.threads_per_block;
    config.unroll = options_.unroll;
    return config;
  }

  CopyPagesArgs KernelArgs(bool store, const KernelTensor* table, uint32_t num_tensors,
                           uint64_t units_per_pair, const Device::Buffer& buffer,
                           uint64_t pair_begin, uint64_t num_pairs, uint64_t align_bits) const {
    CopyPagesArgs args;
    args.store = store;
    args.tensors = table;
    args.num_tensors = num_tensors;
    args.units_per_pair = units_per_pair;
    args.pairs = reinterpret_cast<const PagePair*>(buffer.device) + pair_begin;
    args.num_pairs = num_pairs;
    args.unit_bytes = options_.unit_bytes;
    args.vector_bytes = VectorBytesFor(align_bits);
    args.gate = reinterpret_cast<JobGate*>(buffer.host_device);
    args.l2_prefetch_bytes = store ? 0 : options_.l2_prefetch_bytes;
    return args;
  }

  // Records the job's completion event on `stream` (the last of its work).
  void RecordCompletion(cudaStream_t stream, PendingJob* p, absl::Status* status) {
    absl::StatusOr<cudaEvent_t> completion = p->device->AcquireEvent();
    if (!completion.ok()) {
      if (status->ok()) *status = completion.status();
      return;
    }
    const cudaError_t err = cudaEventRecord(*completion, stream);
    if (err == cudaSuccess) {
      p->completion = *completion;
      return;
    }
    p->device->ReleaseEvent(*completion);
    if (status->ok()) *status = CudaStatus(err, "cudaEventRecord (job completion)");
  }

  // Copy-engine pages: cudaMemcpyBatchAsync in bounded batches. Host pointers of the registered
  // region, device pointers of the worker's tensors.
  absl::Status EnqueueCopyEngines(const CopyJob& job, const CudaWorkerMemory& m,
                                  const Region& region, cudaStream_t stream) {
    const bool store = job.direction == CopyDirection::kStore;
    CopyBatcher batcher(options_.max_copies_per_batch, stream, &batch_unsupported_);
    const uint64_t slot_offset = uint64_t{job.slot} * job.slot_bytes;
    size_t i = 0;
    for (uint64_t row : job.rows) {
      uint8_t* row_host = region.base() + row * region.row_bytes() + slot_offset;
      for (uint32_t j = 0; j < job.blocks_per_row; ++j, ++i) {
        uint8_t* block_host = row_host + j * m.bytes_per_block_;
        const uint64_t gpu_block = job.gpu_blocks[i];
        for (size_t t : m.copy_engine_tensors_) {
          const HostTensor& tensor = m.tensors_[t];
          void* gpu = reinterpret_cast<void*>(tensor.base + gpu_block * tensor.stride);
          void* host = block_host + tensor.host_offset;
          RETURN_IF_ERROR(store ? batcher.Add(host, gpu, tensor.page_bytes)
                                : batcher.Add(gpu, host, tensor.page_bytes));
        }
      }
    }
    return batcher.Flush();
  }

 private:
  const CudaBackendOptions options_;
  const std::vector<std::string> uuids_;  // raw 16-byte uuid per ordinal
  mutable absl::Mutex devices_mu_;
  std::map<int, std::unique_ptr<Device>> devices_ ABSL_GUARDED_BY(devices_mu_);
  absl::Mutex regions_mu_;
  std::map<uint8_t*, std::shared_ptr<Region>> regions_ ABSL_GUARDED_BY(regions_mu_);
  std::atomic<bool> batch_unsupported_{false};
  CompletionPoller poller_;  // last: its thread stops before the rest is torn down
};

// ---------------------------------------------------------------------------------------------
CudaCopyBackend::CudaCopyBackend(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
CudaCopyBackend::~CudaCopyBackend() = default;

absl::StatusOr<std::unique_ptr<CudaCopyBackend>> CudaCopyBackend::Create(
    const CudaBackendOptions& options) {
  RETURN_IF_ERROR(ValidateOptions(options));
  int count = 0;
  const cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) {
    return CudaStatus(err, absl::StatusCode::kUnavailable,
                      "cudaGetDeviceCount (no usable CUDA driver or GPU)");
  }
  if (count <= 0) {
    return absl::UnavailableError("cudaGetDeviceCount: cudaSuccess but no CUDA device");
  }
  std::vector<std::string> uuids;
  for (int d = 0; d < count; ++d) {
    cudaDeviceProp props;
    RETURN_IF_ERROR(CudaStatus(cudaGetDeviceProperties(&props, d),
                               absl::StatusCode::kUnavailable, "cudaGetDeviceProperties"));
    uuids.emplace_back(props.uuid.bytes, sizeof(props.uuid.bytes));
    Log()->info("GPU {}: {} (uuid {}), {} SMs", d, props.name, UuidText(uuids.back()),
                props.multiProcessorCount);
  }
  return std::unique_ptr<CudaCopyBackend>(
      new CudaCopyBackend(std::make_unique<Impl>(options, std::move(uuids))));
}

absl::Status CudaCopyBackend::RegisterRegion(uint8_t* base, uint64_t bytes, uint64_t row_bytes) {
  return impl_->RegisterRegion(base, bytes, row_bytes);
}

void CudaCopyBackend::UnregisterRegion(uint8_t* base) { impl_->UnregisterRegion(base); }

absl::StatusOr<std::unique_ptr<WorkerMemory>> CudaCopyBackend::OpenWorker(
    const WorkerRegistration& registration) {
  return impl_->OpenWorker(registration);
}

absl::StatusOr<std::unique_ptr<WorkerMemory>> CudaCopyBackend::OpenLocalWorker(
    int device, const std::vector<LocalTensor>& tensors, const std::vector<cudaEvent_t>& events) {
  return impl_->OpenLocalWorker(device, tensors, events);
}

void CudaCopyBackend::Submit(CopyJob job, CopyDone done) {
  impl_->Submit(std::move(job), std::move(done));
}

std::map<int32_t, uint64_t> CudaCopyBackend::GpuMemoryBytes() const {
  return impl_->GpuMemoryBytes();
}

const CudaBackendOptions& CudaCopyBackend::options() const { return impl_->options(); }

absl::StatusOr<std::unique_ptr<CopyBackend>> CreateCudaCopyBackend(
    const CudaBackendOptions& options) {
  ASSIGN_OR_RETURN(std::unique_ptr<CudaCopyBackend> backend, CudaCopyBackend::Create(options));
  return std::unique_ptr<CopyBackend>(std::move(backend));
}

}  // namespace kvoffload::daemon::cuda
