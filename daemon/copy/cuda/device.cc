#include "daemon/copy/cuda/device.h"

#include <algorithm>

#include <utility>

#include "absl/strings/str_cat.h"
#include "daemon/copy/cuda/log.h"
#include "common/status_macros.h"
#include "daemon/copy/cuda/copy_kernels.h"
#include "common/cuda/cuda_status.h"
#include "common/thread_name.h"
#include "daemon/copy/cuda/driver_api.h"

namespace kvoffload::daemon::cuda {
bool IsStickyError(cudaError_t err) {
  switch (err) {
    case cudaErrorIllegalAddress:
    case cudaErrorLaunchFailure:
    case cudaErrorHardwareStackError:
    case cudaErrorIllegalInstruction:
    case cudaErrorMisalignedAddress:
    case cudaErrorInvalidAddressSpace:
    case cudaErrorInvalidPc:
    case cudaErrorAssert:
    case cudaErrorECCUncorrectable:
    case cudaErrorLaunchTimeout:
    case cudaErrorContextIsDestroyed:
    case cudaErrorCudartUnloading:
    case cudaErrorDevicesUnavailable:
      return true;
    default:
      return false;
  }
}

// ----- Releaser -----

Releaser::Releaser(std::string name) : name_(std::move(name)), thread_([this] { Run(); }) {}

Releaser::~Releaser() {
  const bool drained = Drain(absl::Seconds(10));
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  if (drained) {
    thread_.join();
  } else {
    // A release the driver never returns from: do not hang the daemon's exit behind it.
    Log()->error("{}: a release has not returned for {}; leaving it behind at shutdown", name_,
                 absl::FormatDuration(StalledFor()));
    thread_.detach();
  }
}

void Releaser::Post(std::function<void()> release) {
  absl::MutexLock lock(&mu_);
  queue_.push_back(std::move(release));
  ++posted_;
}

absl::Duration Releaser::StalledFor() const {
  absl::MutexLock lock(&mu_);
  return running_ ? absl::Now() - running_since_ : absl::ZeroDuration();
}

size_t Releaser::pending() const {
  absl::MutexLock lock(&mu_);
  return queue_.size() + (running_ ? 1 : 0);
}

bool Releaser::Drain(absl::Duration timeout) {
  absl::MutexLock lock(&mu_);
  const uint64_t target = posted_;
  auto done = [this, target]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return done_ >= target; };
  return mu_.AwaitWithTimeout(absl::Condition(&done), timeout);
}

void Releaser::Run() {
  common::SetThreadName("kvo-release");
  for (;;) {
    std::function<void()> release;
    {
      absl::MutexLock lock(&mu_);
      auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return !queue_.empty() || stop_;
      };
      mu_.Await(absl::Condition(&ready));
      if (queue_.empty()) return;  // stop_ and nothing left
      release = std::move(queue_.front());
      queue_.pop_front();
      running_ = true;
      running_since_ = absl::Now();
    }
    release();
    absl::MutexLock lock(&mu_);
    running_ = false;
    ++done_;
  }
}

// ----- Device -----

Device::Device(int ordinal)
    : ordinal_(ordinal), releaser_(absl::StrCat("device ", ordinal, " releaser")) {}

absl::StatusOr<std::unique_ptr<Device>> Device::Create(int ordinal) {
  RETURN_IF_ERROR(CudaStatus(cudaSetDevice(ordinal), "cudaSetDevice"));
  RETURN_IF_ERROR(CudaStatus(cudaFree(nullptr), "creating the CUDA context"));
  auto device = std::unique_ptr<Device>(new Device(ordinal));
  int mps = 0;
  const cudaError_t mps_err = cudaDeviceGetAttribute(&mps, cudaDevAttrMpsEnabled, ordinal);
  if (mps_err != cudaSuccess) {
    // A driver that cannot say: taken as no MPS, so no kernel of ours can time-slice the model.
    cudaGetLastError();
    Log()->warn("device {}: {}; taking it as no MPS", ordinal,
                CudaStatus(mps_err, "cudaDeviceGetAttribute(cudaDevAttrMpsEnabled)").ToString());
    mps = 0;
  }
  device->mps_ = mps != 0;
  absl::StatusOr<uint64_t> context_bytes = MeasureContextBytes(ordinal);
  if (context_bytes.ok()) {
    device->context_bytes_ = *context_bytes;
  } else {
    Log()->warn("device {}: could not measure the CUDA context's memory: {}", ordinal,
                context_bytes.status().ToString());
  }
  RETURN_IF_ERROR(CudaStatus(cudaSetDevice(ordinal), "cudaSetDevice"));
  RETURN_IF_ERROR(
      CudaStatus(cudaStreamCreateWithFlags(&device->alloc_stream_, cudaStreamNonBlocking),
                 "cudaStreamCreateWithFlags"));
  int pools = 0;
  if (cudaDeviceGetAttribute(&pools, cudaDevAttrMemoryPoolsSupported, ordinal) != cudaSuccess) {
    pools = 0;
  }
  device->stream_ordered_ = pools != 0;
  if (!device->stream_ordered_) {
    Log()->warn("device {}: no stream-ordered allocator; using cudaMalloc/cudaFree", ordinal);
  }
  Log()->info("device {}: CUDA context of about {} MiB; MPS {}", ordinal,
              device->context_bytes_ >> 20, device->mps_ ? "on" : "off");
  return device;
}

absl::Status Device::EnableSmPaths(uint64_t descriptor_bytes) {
  RETURN_IF_ERROR(CudaStatus(cudaSetDevice(ordinal_), "cudaSetDevice"));
  RETURN_IF_ERROR(CudaStatus(LoadCopyKernels(), "loading the copy kernels"));
  descriptors_ = std::make_unique<BufferPool>(
      descriptor_bytes,
      BufferPool::Allocator{[this](size_t capacity) { return AllocateDescriptorBuffer(capacity); },
                            [this](const Buffer& b) { FreeDescriptorBuffer(b); }});
  return absl::OkStatus();
}

Device::~Device() {
  if (!health().ok()) {  // a broken context frees nothing; the process is ending anyway
    descriptors_.release();
    return;
  }
  releaser_.Drain(absl::Seconds(10));
  cudaSetDevice(ordinal_);
  descriptors_.reset();  // frees the cached buffers (every job has been reported)
  absl::MutexLock lock(&mu_);
  for (cudaEvent_t e : free_events_) cudaEventDestroy(e);
  if (alloc_stream_ != nullptr) {
    cudaStreamSynchronize(alloc_stream_);
    cudaStreamDestroy(alloc_stream_);
  }
}

void Device::Fail(const absl::Status& why) {
  absl::MutexLock lock(&mu_);
  if (!failed_.ok()) return;
  failed_ = absl::UnavailableError(absl::StrCat("device ", ordinal_, " failed: ", why.message(),
                                                "; restart kvoffloadd to recover it"));
  Log()->error("{}", std::string(failed_.message()));
}

absl::Status Device::health() const {
  absl::MutexLock lock(&mu_);
  return failed_;
}

absl::Status Device::Check(cudaError_t err, const std::string& context) {
  if (err == cudaSuccess) return absl::OkStatus();
  absl::Status s = CudaStatus(err, context);
  if (IsStickyError(err)) Fail(s);
  return s;
}

absl::StatusOr<void*> Device::Allocate(size_t bytes) {
  RETURN_IF_ERROR(CudaStatus(cudaSetDevice(ordinal_), "cudaSetDevice"));
  void* p = nullptr;
  if (!stream_ordered_) {
    RETURN_IF_ERROR(
        CudaStatus(cudaMalloc(&p, bytes), absl::StrCat("cudaMalloc of ", bytes, " bytes")));
    allocated_bytes_.fetch_add(bytes, std::memory_order_relaxed);
    return p;
  }
  RETURN_IF_ERROR(CudaStatus(cudaMallocAsync(&p, bytes, alloc_stream_),
                             absl::StrCat("cudaMallocAsync of ", bytes, " bytes")));
  absl::Status synced = Check(cudaStreamSynchronize(alloc_stream_), "cudaStreamSynchronize");
  if (!synced.ok()) {
    cudaFreeAsync(p, alloc_stream_);
    return synced;
  }
  allocated_bytes_.fetch_add(bytes, std::memory_order_relaxed);
  return p;
}

void Device::Free(void* p, size_t bytes, cudaStream_t stream) {
  if (p == nullptr) return;
  cudaSetDevice(ordinal_);
  const cudaError_t err = stream_ordered_
                              ? cudaFreeAsync(p, stream != nullptr ? stream : alloc_stream_)
                              : cudaFree(p);
  if (err != cudaSuccess) Log()->warn("device {}: {}", ordinal_, CudaStatus(err, "free").ToString());
  allocated_bytes_.fetch_sub(bytes, std::memory_order_relaxed);
}

void Device::set_staging_limit(uint64_t bytes) {
  absl::MutexLock lock(&mu_);
  staging_limit_ = bytes;
}

bool Device::TryReserveStaging(uint64_t bytes) {
  absl::MutexLock lock(&mu_);
  if (bytes > staging_limit_ || staging_reserved_ > staging_limit_ - bytes) return false;
  staging_reserved_ += bytes;
  return true;
}

void Device::ReleaseStaging(uint64_t bytes) {
  absl::MutexLock lock(&mu_);
  staging_reserved_ -= std::min(bytes, staging_reserved_);
}

uint64_t Device::staging_reserved() const {
  absl::MutexLock lock(&mu_);
  return staging_reserved_;
}

uint64_t Device::staging_limit() const {
  absl::MutexLock lock(&mu_);
  return staging_limit_;
}

absl::StatusOr<Device::Buffer> Device::AcquireBuffer(size_t bytes) {
  if (!sm_paths()) {
    return absl::FailedPreconditionError(
        absl::StrCat("device ", ordinal_, ": descriptor buffers exist only for SM copy paths"));
  }
  return descriptors_->Acquire(bytes);
}

void Device::ReleaseBuffer(const Buffer& b) {
  if (b.host != nullptr) descriptors_->Release(b);
}

absl::StatusOr<Device::Buffer> Device::AllocateDescriptorBuffer(size_t capacity) {
  RETURN_IF_ERROR(CudaStatus(cudaSetDevice(ordinal_), "cudaSetDevice"));
  Buffer b;
  void* host = nullptr;
  RETURN_IF_ERROR(CudaStatus(cudaHostAlloc(&host, capacity, cudaHostAllocPortable),
                             absl::StrCat("cudaHostAlloc of a ", capacity,
                                          "-byte descriptor staging buffer")));
  b.host = static_cast<uint8_t*>(host);
  absl::StatusOr<void*> device = Allocate(capacity);
  if (!device.ok()) {
    cudaFreeHost(host);
    return device.status();
  }
  b.device = static_cast<uint8_t*>(*device);
  return b;
}

void Device::FreeDescriptorBuffer(const Buffer& b) {
  Free(b.device, b.capacity, nullptr);
  cudaFreeHost(b.host);
}

absl::StatusOr<cudaEvent_t> Device::AcquireEvent() {
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

void Device::ReleaseEvent(cudaEvent_t e) {
  if (e == nullptr) return;
  absl::MutexLock lock(&mu_);
  free_events_.push_back(e);
}

uint64_t Device::AddIdleHook(std::function<void(absl::Time now)> hook) {
  absl::MutexLock lock(&hooks_mu_);
  const uint64_t id = next_hook_++;
  hooks_.emplace(id, std::move(hook));
  return id;
}

void Device::RemoveIdleHook(uint64_t id) {
  absl::MutexLock lock(&hooks_mu_);
  hooks_.erase(id);
}

void Device::RunIdleHooks(absl::Time now) {
  if (sm_paths()) descriptors_->TrimIfUnused();
  absl::MutexLock lock(&hooks_mu_);
  for (auto& [id, hook] : hooks_) hook(now);
}

// ----- PinnedRegion -----

PinnedRegion::PinnedRegion(uint8_t* base, uint64_t bytes, uint64_t row_bytes,
                           uint64_t chunk_bytes, bool chunked)
    : base_(base),
      bytes_(bytes),
      row_bytes_(row_bytes),
      chunk_bytes_(chunk_bytes),
      chunked_(chunked),
      pinned_(num_chunks(), false) {}

void PinnedRegion::MarkPinned(size_t chunk, int device) {
  absl::MutexLock lock(&mu_);
  if (chunk == SIZE_MAX) {
    pinned_.assign(num_chunks(), true);
  } else {
    pinned_[chunk] = true;
  }
  while (pinned_prefix_ < pinned_.size() && pinned_[pinned_prefix_]) ++pinned_prefix_;
  int expected = -1;
  pinned_device_.compare_exchange_strong(expected, device, std::memory_order_acq_rel);
  ready_bytes_.store(std::min<uint64_t>(bytes_, pinned_prefix_ * chunk_bytes_),
                     std::memory_order_release);
}

bool PinnedRegion::chunk_pinned(size_t chunk) {
  absl::MutexLock lock(&mu_);
  return chunk < pinned_.size() && pinned_[chunk];
}

absl::StatusOr<const std::atomic<uint64_t>*> PinnedRegion::DevicePointers(int device) {
  absl::MutexLock lock(&mu_);
  std::unique_ptr<std::atomic<uint64_t>[]>& pointers = device_pointers_[device];
  if (pointers == nullptr) {
    pointers = std::make_unique<std::atomic<uint64_t>[]>(num_chunks());
    for (size_t c = 0; c < num_chunks(); ++c) pointers[c].store(0, std::memory_order_relaxed);
  }
  for (size_t c = 0; c < num_chunks(); ++c) {
    if (!pinned_[c] || pointers[c].load(std::memory_order_relaxed) != 0) continue;
    void* p = nullptr;
    RETURN_IF_ERROR(CudaStatus(cudaHostGetDevicePointer(&p, base_ + c * chunk_bytes_, 0),
                               absl::StrCat("cudaHostGetDevicePointer (region chunk ", c, ")")));
    pointers[c].store(reinterpret_cast<uint64_t>(p), std::memory_order_release);
  }
  return pointers.get();
}

}  // namespace kvoffload::daemon::cuda
