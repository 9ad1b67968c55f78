#include "daemon/copy/cuda/worker_memory.h"

#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "daemon/copy/cuda/log.h"
#include "common/status_macros.h"
#include "common/cuda/cuda_status.h"

namespace kvoffload::daemon::cuda {
namespace {

// What a lane leaves to release, taken out of it (a Lane holds a mutex and cannot move).
struct LaneLeftovers {
  std::vector<cudaStream_t> streams;
  std::vector<uint8_t*> staging;
  size_t staging_bytes = 0;
  std::vector<cudaEvent_t> events;
};

LaneLeftovers TakeLane(Lane& lane) {
  LaneLeftovers out;
  absl::MutexLock lock(&lane.mu);
  out.streams = {lane.kernel, lane.dma, lane.wake};
  out.streams.insert(out.streams.end(), lane.issue.begin(), lane.issue.end());
  out.events = lane.issued;
  for (uint32_t i = 0; i < kStagingBuffers; ++i) {
    if (lane.staging[i] != nullptr) out.staging.push_back(lane.staging[i]);
    if (lane.filled[i] != nullptr) out.events.push_back(lane.filled[i]);
    if (lane.drained[i] != nullptr) out.events.push_back(lane.drained[i]);
  }
  out.staging_bytes = lane.staging_bytes;
  return out;
}

}  // namespace

CudaWorkerMemory::~CudaWorkerMemory() {
  if (idle_hook_ != 0) device_->RemoveIdleHook(idle_hook_);  // waits for a running sweep
  const int64_t in_flight = in_flight_.load();
  if (in_flight > 0) {
    // Contract violation by the caller: copies may still touch the mappings. Leak them.
    Log()->error("worker memory on device {} destroyed with {} jobs in flight; leaking its IPC "
                 "mappings, events and streams",
                 device_->ordinal(), in_flight);
    return;
  }
  // Every job has been reported, so the streams hold only finished work of the daemon's own (no
  // stream ever waits on a worker's event): the teardown below is bounded unless the driver
  // itself stalls, and then only the device's release thread waits.
  Device* device = device_;
  LaneLeftovers lanes[2] = {TakeLane(store_), TakeLane(load_)};
  std::vector<void*> mappings = std::move(ipc_mappings_);
  std::vector<cudaEvent_t> events;
  if (owns_events_) events = std::move(events_);
  KernelTensor* table = kernel_table_;
  const size_t table_bytes = kernel_table_bytes_;
  device->releaser().Post([device, lanes = std::move(lanes[0]), lanes1 = std::move(lanes[1]),
                           mappings = std::move(mappings), events = std::move(events), table,
                           table_bytes]() mutable {
    cudaSetDevice(device->ordinal());
    for (LaneLeftovers* lane : {&lanes, &lanes1}) {
      for (cudaStream_t s : lane->streams) {
        if (s != nullptr) cudaStreamSynchronize(s);
      }
      for (uint8_t* b : lane->staging) device->Free(b, lane->staging_bytes, nullptr);
      for (cudaEvent_t e : lane->events) cudaEventDestroy(e);
      for (cudaStream_t s : lane->streams) {
        if (s != nullptr) cudaStreamDestroy(s);
      }
    }
    device->Free(table, table_bytes, nullptr);
    for (cudaEvent_t e : events) cudaEventDestroy(e);
    for (void* p : mappings) {
      absl::Status closed = CudaStatus(cudaIpcCloseMemHandle(p), "cudaIpcCloseMemHandle");
      if (!closed.ok()) Log()->warn("worker teardown: {}", closed.ToString());
    }
  });
}

absl::Status CudaWorkerMemory::Finish(std::vector<TensorDescriptor> tensors,
                                      uint64_t num_blocks, uint32_t issue_streams) {
  if (tensors.size() > std::numeric_limits<uint32_t>::max()) {
    return absl::InvalidArgumentError("too many tensors");
  }
  uint64_t host_offset = 0;
  std::vector<KernelTensor> kernel_tensors;
  for (TensorDescriptor& t : tensors) {
    t.host_offset = host_offset;
    if (__builtin_add_overflow(host_offset, t.page_bytes, &host_offset)) {
      return absl::InvalidArgumentError("bytes per block overflow");
    }
    KernelTensor k;
    k.base = t.gpu_address;
    k.block_stride = t.block_stride_bytes;
    k.page_bytes = t.page_bytes;
    k.host_offset = t.host_offset;
    kernel_tensors.push_back(k);
    align_bits_ |= t.gpu_address | t.page_bytes | t.host_offset | t.block_stride_bytes;
  }
  units_per_pair_ = AssignUnits(kernel_tensors.data(),
                                static_cast<uint32_t>(kernel_tensors.size()), kUnitBytes);
  tensors_ = std::move(tensors);
  bytes_per_block_ = host_offset;
  num_blocks_ = num_blocks;
  for (Lane* lane : {&store_, &load_}) {
    RETURN_IF_ERROR(CudaStatus(cudaStreamCreateWithFlags(&lane->kernel, cudaStreamNonBlocking),
                               "cudaStreamCreateWithFlags"));
    RETURN_IF_ERROR(CudaStatus(cudaStreamCreateWithFlags(&lane->dma, cudaStreamNonBlocking),
                               "cudaStreamCreateWithFlags"));
    RETURN_IF_ERROR(CudaStatus(cudaStreamCreateWithFlags(&lane->wake, cudaStreamNonBlocking),
                               "cudaStreamCreateWithFlags"));
    for (uint32_t i = 0; i < issue_streams; ++i) {
      cudaStream_t s = nullptr;
      RETURN_IF_ERROR(CudaStatus(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking),
                                 "cudaStreamCreateWithFlags"));
      lane->issue.push_back(s);
      cudaEvent_t e = nullptr;
      RETURN_IF_ERROR(CudaStatus(cudaEventCreateWithFlags(&e, cudaEventDisableTiming),
                                 "cudaEventCreateWithFlags"));
      lane->issued.push_back(e);
    }
  }
  if (!device_->sm_paths()) return absl::OkStatus();  // copy engines need no device table
  const size_t bytes = kernel_tensors.size() * sizeof(KernelTensor);
  ASSIGN_OR_RETURN(void* d, device_->Allocate(bytes));
  absl::Status s = CudaStatus(cudaMemcpy(d, kernel_tensors.data(), bytes, cudaMemcpyHostToDevice),
                              "uploading the tensor table");
  if (!s.ok()) {
    device_->Free(d, bytes, nullptr);
    return s;
  }
  kernel_table_ = static_cast<KernelTensor*>(d);
  kernel_table_bytes_ = bytes;
  return absl::OkStatus();
}

void CudaWorkerMemory::ReleaseStagingWhenIdle(absl::Duration idle) {
  if (idle <= absl::ZeroDuration()) return;
  idle_hook_ = device_->AddIdleHook([this, idle](absl::Time now) {
    for (Lane* lane : {&store_, &load_}) {
      if (!lane->mu.TryLock()) continue;  // in use right now: not idle
      if (lane->num_staging != 0 && now - lane->last_staged >= idle) {
        FreeStaging(*lane);  // stream-ordered: after whatever is still queued
      }
      lane->mu.Unlock();
    }
  });
}

absl::Status CudaWorkerMemory::EnsureStaging(Lane& lane, size_t bytes) {
  lane.last_staged = absl::Now();
  if (lane.num_staging == kStagingBuffers && lane.staging_bytes == bytes) return absl::OkStatus();
  if (lane.num_staging != 0) FreeStaging(lane);
  if (lane.num_staging != 0) {
    return absl::InternalError(absl::StrCat("device ", device_->ordinal(),
                                            ": the lane's old staging could not be released"));
  }
  const uint64_t total = uint64_t{bytes} * kStagingBuffers;
  if (!device_->TryReserveStaging(total)) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "device ", device_->ordinal(), ": ", total, " bytes of staging do not fit the device's ",
        device_->staging_limit(), "-byte staging limit (", device_->staging_reserved(),
        " in use)"));
  }
  absl::Status status = AllocateStaging(lane, bytes);
  if (!status.ok()) device_->ReleaseStaging(total);
  return status;
}

absl::Status CudaWorkerMemory::AllocateStaging(Lane& lane, size_t bytes) {
  const uint32_t count = kStagingBuffers;
  RETURN_IF_ERROR(CudaStatus(cudaSetDevice(device_->ordinal()), "cudaSetDevice"));
  for (uint32_t i = 0; i < count; ++i) {
    if (lane.filled[i] == nullptr) {
      RETURN_IF_ERROR(CudaStatus(cudaEventCreateWithFlags(&lane.filled[i], cudaEventDisableTiming),
                                 "cudaEventCreateWithFlags (staging)"));
    }
    if (lane.drained[i] == nullptr) {
      RETURN_IF_ERROR(
          CudaStatus(cudaEventCreateWithFlags(&lane.drained[i], cudaEventDisableTiming),
                     "cudaEventCreateWithFlags (staging)"));
    }
  }
  for (uint32_t i = 0; i < count; ++i) {
    absl::StatusOr<void*> d = device_->Allocate(bytes);
    if (!d.ok()) {
      for (uint32_t j = 0; j < i; ++j) {
        device_->Free(lane.staging[j], bytes, nullptr);
        lane.staging[j] = nullptr;
      }
      return d.status();
    }
    lane.staging[i] = static_cast<uint8_t*>(*d);
  }
  lane.staging_bytes = bytes;
  lane.num_staging = count;
  lane.next_staging = 0;
  return absl::OkStatus();
}

void CudaWorkerMemory::FreeStaging(Lane& lane) {
  // Stream-ordered frees after everything queued on both streams (the dma stream is joined into
  // the kernel stream first), so no queued copy loses its buffer.
  cudaSetDevice(device_->ordinal());
  cudaEvent_t joined = nullptr;
  if (cudaEventCreateWithFlags(&joined, cudaEventDisableTiming) != cudaSuccess ||
      cudaEventRecord(joined, lane.dma) != cudaSuccess ||
      cudaStreamWaitEvent(lane.kernel, joined, 0) != cudaSuccess) {
    Log()->warn("device {}: cannot order a staging release; keeping the buffers",
                device_->ordinal());
    if (joined != nullptr) cudaEventDestroy(joined);
    return;
  }
  cudaEventDestroy(joined);
  for (uint32_t i = 0; i < lane.num_staging; ++i) {
    device_->Free(lane.staging[i], lane.staging_bytes, lane.kernel);
    lane.staging[i] = nullptr;
  }
  device_->ReleaseStaging(uint64_t{lane.staging_bytes} * lane.num_staging);
  lane.num_staging = 0;
  lane.staging_bytes = 0;
}

}  // namespace kvoffload::daemon::cuda
