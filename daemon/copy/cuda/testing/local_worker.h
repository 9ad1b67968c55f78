// In-process worker memory of the CUDA backend, for GPU tests and benchmarks: the same tables,
// streams and copy paths as CudaCopyBackend::OpenWorker, over this process's own device memory
// (no CUDA IPC). A testonly target, so no production binary can open a worker this way;
// CudaCopyBackend names CudaCopyBackendTestPeer its friend for this alone.
//
//   ASSIGN_OR_RETURN(std::unique_ptr<WorkerMemory> memory,
//                    OpenLocalWorker(*backend, /*device=*/0, {{ptr, blocks, stride, page}}));
//
// `events` stay owned by the caller and must outlive the returned memory.
// Thread-safety: as CudaCopyBackend::OpenWorker.
#ifndef KVOFFLOAD_DAEMON_COPY_CUDA_TESTING_LOCAL_WORKER_H_
#define KVOFFLOAD_DAEMON_COPY_CUDA_TESTING_LOCAL_WORKER_H_

#include <cuda_runtime_api.h>

#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "daemon/copy/copy_backend.h"
#include "daemon/copy/cuda/cuda_copy_backend.h"

namespace kvoffload::daemon::cuda {

class CudaCopyBackendTestPeer {
 public:
  static absl::StatusOr<std::unique_ptr<WorkerMemory>> OpenLocalWorker(
      CudaCopyBackend& backend, int device,
      const std::vector<CudaCopyBackend::LocalTensor>& tensors,
      const std::vector<cudaEvent_t>& events) {
    return backend.OpenLocalWorker(device, tensors, events);
  }
};

inline absl::StatusOr<std::unique_ptr<WorkerMemory>> OpenLocalWorker(
    CudaCopyBackend& backend, int device, const std::vector<CudaCopyBackend::LocalTensor>& tensors,
    const std::vector<cudaEvent_t>& events = {}) {
  return CudaCopyBackendTestPeer::OpenLocalWorker(backend, device, tensors, events);
}

}  // namespace kvoffload::daemon::cuda

#endif  // KVOFFLOAD_DAEMON_COPY_CUDA_TESTING_LOCAL_WORKER_H_
