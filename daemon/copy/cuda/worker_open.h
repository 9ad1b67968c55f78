// Opening a worker's GPU memory from its registration (WorkerRegistration, copy_backend.h): which
// device it names, its CUDA IPC allocations and its IPC events. The backend calls these in order:
//
//   ASSIGN_OR_RETURN(int ordinal, ResolveOrdinal(registration, uuids));
//   RETURN_IF_ERROR(CheckWorkerHandles(registration));        // no GPU touched yet
//   ... the device's context current, a CudaWorkerMemory made ...
//   ASSIGN_OR_RETURN(OpenedTensors opened, OpenIpcTensors(registration, ordinal, memory.get()));
//   RETURN_IF_ERROR(OpenIpcEvents(registration, memory.get()));
//
// Every mapping and event is handed to `memory` as soon as it is opened, so a registration that
// fails halfway leaves nothing open once `memory` is destroyed. Each distinct allocation handle is
// opened once, and every tensor is checked against the allocation's real extent as the driver
// reports it, never the client's word for it. Errors: INVALID_ARGUMENT naming the tensor or event.
//
// Thread-safety: free functions; `memory` is the caller's alone while it is being opened.
#ifndef KVOFFLOAD_DAEMON_COPY_CUDA_WORKER_OPEN_H_
#define KVOFFLOAD_DAEMON_COPY_CUDA_WORKER_OPEN_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "daemon/copy/copy_backend.h"
#include "daemon/copy/cuda/worker_memory.h"
#include "daemon/copy/descriptor_table.h"

namespace kvoffload::daemon::cuda {

// The sizes of the handles and the tensors' geometry against their declared allocation sizes.
absl::Status CheckWorkerHandles(const WorkerRegistration& registration);

// The device the registration names: by its 16-byte uuid among `uuids` (one per ordinal), else
// by ordinal.
absl::StatusOr<int> ResolveOrdinal(const WorkerRegistration& registration,
                                   const std::vector<std::string>& uuids);

struct OpenedTensors {
  std::vector<TensorDescriptor> tensors;  // device addresses in this process
  uint64_t num_blocks = 0;                // the blocks every tensor has
  size_t allocations = 0;                 // distinct allocations opened
};
// Opens the tensors' allocations on `ordinal` (its context current) into `memory`.
absl::StatusOr<OpenedTensors> OpenIpcTensors(const WorkerRegistration& registration, int ordinal,
                                             CudaWorkerMemory* memory);

// Opens the worker's events into `memory`.
absl::Status OpenIpcEvents(const WorkerRegistration& registration, CudaWorkerMemory* memory);

}  // namespace kvoffload::daemon::cuda

#endif  // KVOFFLOAD_DAEMON_COPY_CUDA_WORKER_OPEN_H_
