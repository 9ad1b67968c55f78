#include "client/cuda/cuda_client.h"

#include <cuda.h>

#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/cuda/cuda_status.h"

namespace kvoffload::client::cuda {
namespace {

using MemGetAddressRangeFn = CUresult (*)(CUdeviceptr*, size_t*, CUdeviceptr);

absl::StatusOr<MemGetAddressRangeFn> AddressRangeFunction() {
  void* fn = nullptr;
  cudaDriverEntryPointQueryResult found = cudaDriverEntryPointSymbolNotFound;
  absl::Status s = CudaStatus(cudaGetDriverEntryPointByVersion("cuMemGetAddressRange", &fn, 3020,
                                                              cudaEnableDefault, &found),
                             "cudaGetDriverEntryPointByVersion(cuMemGetAddressRange)");
  if (!s.ok()) return s;
  if (found != cudaDriverEntryPointSuccess || fn == nullptr) {
    return absl::UnavailableError("the CUDA driver has no cuMemGetAddressRange");
  }
  return reinterpret_cast<MemGetAddressRangeFn>(fn);
}

}  // namespace

absl::StatusOr<AllocationRef> ResolveAllocation(uint64_t device_ptr) {
  if (device_ptr == 0) return absl::InvalidArgumentError("null device pointer");
  cudaPointerAttributes attributes;
  absl::Status s = CudaStatus(
      cudaPointerGetAttributes(&attributes, reinterpret_cast<const void*>(device_ptr)),
      "cudaPointerGetAttributes");
  if (!s.ok()) return s;
  if (attributes.type != cudaMemoryTypeDevice) {
    return absl::InvalidArgumentError(absl::StrCat(
        "pointer 0x", absl::Hex(device_ptr), " is not device memory (cudaMemoryType ",
        static_cast<int>(attributes.type), ")"));
  }
  // The driver calls below act on the current context: make it the pointer's device.
  int current = -1;
  s = CudaStatus(cudaGetDevice(&current), "cudaGetDevice");
  if (!s.ok()) return s;
  if (current != attributes.device) {
    s = CudaStatus(cudaSetDevice(attributes.device), "cudaSetDevice");
    if (!s.ok()) return s;
  }
  auto restore = [&] {
    if (current != attributes.device) cudaSetDevice(current);
  };
  absl::StatusOr<MemGetAddressRangeFn> range = AddressRangeFunction();
  if (!range.ok()) {
    restore();
    return range.status();
  }
  CUdeviceptr base = 0;
  size_t bytes = 0;
  const CUresult r = (*range)(&base, &bytes, static_cast<CUdeviceptr>(device_ptr));
  if (r != CUDA_SUCCESS) {
    restore();
    return absl::InvalidArgumentError(
        absl::StrCat("cuMemGetAddressRange(0x", absl::Hex(device_ptr), ") failed: CUresult ", r));
  }
  cudaIpcMemHandle_t handle;
  const cudaError_t err = cudaIpcGetMemHandle(&handle, reinterpret_cast<void*>(base));
  restore();
  if (err != cudaSuccess) {
    return CudaStatus(err, absl::StatusCode::kFailedPrecondition,
                     absl::StrCat("cudaIpcGetMemHandle of the allocation at 0x", absl::Hex(base),
                                  " (", bytes, " bytes); allocations from cuMemCreate (e.g. "
                                  "PyTorch expandable_segments) or memory pools cannot be "
                                  "exported this way"));
  }
  AllocationRef ref;
  ref.ipc_handle.assign(reinterpret_cast<const char*>(&handle), sizeof(handle));
  ref.base = static_cast<uint64_t>(base);
  ref.allocation_bytes = bytes;
  ref.offset = device_ptr - ref.base;
  ref.device = attributes.device;
  return ref;
}

absl::StatusOr<std::string> DeviceUuid(int device) {
  cudaDeviceProp props;
  absl::Status s = CudaStatus(cudaGetDeviceProperties(&props, device),
                             absl::StrCat("cudaGetDeviceProperties(", device, ")"));
  if (!s.ok()) return s;
  return std::string(props.uuid.bytes, sizeof(props.uuid.bytes));
}

absl::StatusOr<std::unique_ptr<EventPool>> EventPool::Create(size_t count) {
  if (count == 0) return absl::InvalidArgumentError("an event pool needs at least one event");
  int device = -1;
  absl::Status s = CudaStatus(cudaGetDevice(&device), "cudaGetDevice");
  if (!s.ok()) return s;
  std::vector<cudaEvent_t> events;
  std::vector<std::string> handles;
  auto cleanup = [&] {
    for (cudaEvent_t e : events) cudaEventDestroy(e);
  };
  for (size_t i = 0; i < count; ++i) {
    cudaEvent_t e = nullptr;
    s = CudaStatus(cudaEventCreateWithFlags(&e, cudaEventInterprocess | cudaEventDisableTiming),
                  "cudaEventCreateWithFlags(cudaEventInterprocess | cudaEventDisableTiming)");
    if (!s.ok()) {
      cleanup();
      return s;
    }
    events.push_back(e);
    cudaIpcEventHandle_t handle;
    s = CudaStatus(cudaIpcGetEventHandle(&handle, e), "cudaIpcGetEventHandle");
    if (!s.ok()) {
      cleanup();
      return s;
    }
    handles.emplace_back(reinterpret_cast<const char*>(&handle), sizeof(handle));
  }
  return std::unique_ptr<EventPool>(new EventPool(device, std::move(events), std::move(handles)));
}

EventPool::EventPool(int device, std::vector<cudaEvent_t> events, std::vector<std::string> handles)
    : device_(device), events_(std::move(events)), handles_(std::move(handles)) {}

EventPool::~EventPool() {
  for (cudaEvent_t e : events_) cudaEventDestroy(e);
}

absl::Status EventPool::CheckIndex(size_t index) const {
  if (index >= events_.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("event index ", index, " outside a pool of ", events_.size()));
  }
  return absl::OkStatus();
}

absl::Status EventPool::Record(size_t index, cudaStream_t stream) {
  absl::Status s = CheckIndex(index);
  if (!s.ok()) return s;
  return CudaStatus(cudaEventRecord(events_[index], stream), "cudaEventRecord");
}

absl::Status EventPool::Wait(size_t index, cudaStream_t stream) {
  absl::Status s = CheckIndex(index);
  if (!s.ok()) return s;
  return CudaStatus(cudaStreamWaitEvent(stream, events_[index], 0), "cudaStreamWaitEvent");
}

absl::StatusOr<bool> EventPool::Query(size_t index) {
  absl::Status s = CheckIndex(index);
  if (!s.ok()) return s;
  const cudaError_t err = cudaEventQuery(events_[index]);
  if (err == cudaErrorNotReady) return false;
  s = CudaStatus(err, "cudaEventQuery");
  if (!s.ok()) return s;
  return true;
}

absl::Status EventPool::Synchronize(size_t index) {
  absl::Status s = CheckIndex(index);
  if (!s.ok()) return s;
  return CudaStatus(cudaEventSynchronize(events_[index]), "cudaEventSynchronize");
}

}  // namespace kvoffload::client::cuda
