// Worker-side CUDA helpers for the client library: what a worker must send the daemon so that
// the daemon can open its KV tensors and events (DESIGN.md §3). Plain C++ (gcc), no nvcc needed;
// no libcuda link (driver functions are reached through cudaGetDriverEntryPointByVersion).
//
//   // Per KV tensor: the IPC handle of its allocation's BASE plus the tensor's offset in it
//   // (PyTorch's caching allocator sub-allocates, so a tensor is rarely its allocation's base).
//   ASSIGN_OR_RETURN(AllocationRef ref, ResolveAllocation(tensor.data_ptr()));
//   registration.tensors.push_back({ref.ipc_handle, ref.allocation_bytes, ref.offset, ...});
//   ASSIGN_OR_RETURN(registration.device_uuid, DeviceUuid(device));
//
//   // Store ordering: record after the step's KV writes, name the index in the store job.
//   ASSIGN_OR_RETURN(std::unique_ptr<EventPool> events, EventPool::Create(8));
//   registration.event_handles = events->ipc_handles();
//   RETURN_IF_ERROR(events->Record(slot, compute_stream));
//   // Load completion: the daemon records the event after its copy; the worker's stream waits.
//   RETURN_IF_ERROR(events->Wait(slot, compute_stream));
#ifndef KVOFFLOAD_CLIENT_CUDA_CUDA_CLIENT_H_
#define KVOFFLOAD_CLIENT_CUDA_CUDA_CLIENT_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <cuda_runtime_api.h>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace kvoffload::client::cuda {

// Where a device pointer lives: its allocation's IPC handle, that allocation's size, and the
// pointer's offset from the allocation's base.
struct AllocationRef {
  std::string ipc_handle;  // sizeof(cudaIpcMemHandle_t) raw bytes, of the allocation's base
  uint64_t base = 0;       // base address in this process (for logs; meaningless elsewhere)
  uint64_t allocation_bytes = 0;
  uint64_t offset = 0;     // device_ptr − base
  int device = -1;         // CUDA ordinal in this process
};

// cuMemGetAddressRange(device_ptr), then cudaIpcGetMemHandle(base). INVALID_ARGUMENT for a
// pointer that is not device memory of this process; FAILED_PRECONDITION for an allocation that
// cannot be exported with cudaIpcGetMemHandle (e.g. cuMemCreate/expandable segments, or a
// cudaMallocAsync pool); UNAVAILABLE without a driver. Thread-safe.
absl::StatusOr<AllocationRef> ResolveAllocation(uint64_t device_ptr);

// The 16 raw bytes of the device's cudaUUID_t (independent of CUDA_VISIBLE_DEVICES ordering).
absl::StatusOr<std::string> DeviceUuid(int device);

// A pool of interprocess CUDA events (cudaEventInterprocess | cudaEventDisableTiming) on the
// device current at Create. Record/Wait/Query/Synchronize may be called from any thread; the pool
// owns its events and destroys them (move-only). Use a slot for one job at a time: re-recording
// an event the daemon still waits on makes it wait for the newer work.
class EventPool {
 public:
  static absl::StatusOr<std::unique_ptr<EventPool>> Create(size_t count);
  ~EventPool();
  EventPool(const EventPool&) = delete;
  EventPool& operator=(const EventPool&) = delete;

  size_t size() const { return events_.size(); }
  int device() const { return device_; }
  // cudaIpcEventHandle_t bytes of each event, in index order (for the worker's registration).
  const std::vector<std::string>& ipc_handles() const { return handles_; }
  cudaEvent_t event(size_t index) const { return events_.at(index); }

  // cudaEventRecord(event[index], stream): e.g. after the step's KV writes, before a store.
  absl::Status Record(size_t index, cudaStream_t stream);
  // cudaStreamWaitEvent(stream, event[index]): the stream waits for the daemon's load.
  absl::Status Wait(size_t index, cudaStream_t stream);
  // Host-side: true when the event's last record has completed.
  absl::StatusOr<bool> Query(size_t index);
  // Host-side blocking wait (cudaEventSynchronize).
  absl::Status Synchronize(size_t index);

 private:
  EventPool(int device, std::vector<cudaEvent_t> events, std::vector<std::string> handles);
  absl::Status CheckIndex(size_t index) const;

  const int device_;
  std::vector<cudaEvent_t> events_;
  std::vector<std::string> handles_;
};

}  // namespace kvoffload::client::cuda

#endif  // KVOFFLOAD_CLIENT_CUDA_CUDA_CLIENT_H_
