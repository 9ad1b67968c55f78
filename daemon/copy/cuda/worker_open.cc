#include "daemon/copy/cuda/worker_open.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstring>
#include <limits>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "common/cuda/cuda_status.h"
#include "common/status_macros.h"
#include "daemon/copy/copy_plan.h"
#include "daemon/copy/cuda/driver_api.h"

namespace kvoffload::daemon::cuda {

absl::Status CheckWorkerHandles(const WorkerRegistration& r) {
  if (r.tensors.empty()) return absl::InvalidArgumentError("a worker needs at least one tensor");
  for (size_t i = 0; i < r.tensors.size(); ++i) {
    const TensorRegistration& t = r.tensors[i];
    if (t.allocation_handle.size() != sizeof(cudaIpcMemHandle_t)) {
      return absl::InvalidArgumentError(
          absl::StrCat("tensor ", i, ": allocation_handle has ", t.allocation_handle.size(),
                       " bytes, a cudaIpcMemHandle_t has ", sizeof(cudaIpcMemHandle_t)));
    }
    RETURN_IF_ERROR(ValidateTensorGeometry(i, t.offset, t.num_blocks, t.block_stride_bytes,
                                           t.page_bytes, t.allocation_bytes));
  }
  for (size_t i = 0; i < r.event_handles.size(); ++i) {
    if (r.event_handles[i].size() != sizeof(cudaIpcEventHandle_t)) {
      return absl::InvalidArgumentError(
          absl::StrCat("event ", i, ": handle has ", r.event_handles[i].size(),
                       " bytes, a cudaIpcEventHandle_t has ", sizeof(cudaIpcEventHandle_t)));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<int> ResolveOrdinal(const WorkerRegistration& r,
                                   const std::vector<std::string>& uuids) {
  if (!r.device_uuid.empty()) {
    if (r.device_uuid.size() != 16) {
      return absl::InvalidArgumentError(
          absl::StrCat("device_uuid must be 16 bytes, not ", r.device_uuid.size()));
    }
    for (size_t d = 0; d < uuids.size(); ++d) {
      if (uuids[d] == r.device_uuid) return static_cast<int>(d);
    }
    return absl::InvalidArgumentError(absl::StrCat("no GPU visible to the daemon has uuid ",
                                                   absl::BytesToHexString(r.device_uuid)));
  }
  if (r.device < 0 || r.device >= static_cast<int>(uuids.size())) {
    return absl::InvalidArgumentError(absl::StrCat("device ", r.device, " does not exist (",
                                                   uuids.size(), " GPUs) and no uuid given"));
  }
  return r.device;
}

absl::StatusOr<OpenedTensors> OpenIpcTensors(const WorkerRegistration& r, int ordinal,
                                             CudaWorkerMemory* memory) {
  absl::flat_hash_map<std::string, std::pair<uint64_t, uint64_t>> opened;  // → base, size
  OpenedTensors out;
  out.num_blocks = std::numeric_limits<uint64_t>::max();
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
        return CudaStatus(
            err, absl::StatusCode::kInvalidArgument,
            absl::StrCat("cudaIpcOpenMemHandle (tensor ", i, ", device ", ordinal, ")"));
      }
      memory->AddIpcMapping(mapped);
      absl::StatusOr<AddressRange> range = GetAddressRange(reinterpret_cast<uint64_t>(mapped));
      if (!range.ok()) {
        return absl::InvalidArgumentError(
            absl::StrCat("tensor ", i, ": the extent of the opened allocation cannot be read (",
                         range.status().message(), "); refusing to trust the declared size"));
      }
      it = opened
               .emplace(t.allocation_handle,
                        std::make_pair(reinterpret_cast<uint64_t>(mapped), range->bytes))
               .first;
    }
    RETURN_IF_ERROR(ValidateTensorGeometry(i, t.offset, t.num_blocks, t.block_stride_bytes,
                                           t.page_bytes, it->second.second));
    out.tensors.push_back({it->second.first + t.offset, t.block_stride_bytes, t.page_bytes, 0});
    out.num_blocks = std::min(out.num_blocks, t.num_blocks);
  }
  out.allocations = opened.size();
  return out;
}

absl::Status OpenIpcEvents(const WorkerRegistration& r, CudaWorkerMemory* memory) {
  for (size_t i = 0; i < r.event_handles.size(); ++i) {
    cudaIpcEventHandle_t handle;
    std::memcpy(&handle, r.event_handles[i].data(), sizeof(handle));
    cudaEvent_t event = nullptr;
    const cudaError_t err = cudaIpcOpenEventHandle(&event, handle);
    if (err != cudaSuccess) {
      return CudaStatus(err, absl::StatusCode::kInvalidArgument,
                        absl::StrCat("cudaIpcOpenEventHandle (event ", i, ")"));
    }
    memory->AddOpenedEvent(event);
  }
  return absl::OkStatus();
}

}  // namespace kvoffload::daemon::cuda
