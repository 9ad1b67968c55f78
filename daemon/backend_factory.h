// Picks the copy backend for --backend=auto|cuda|host. auto: CUDA when a GPU and driver are
// present, else the host backend (logged). An explicit `cuda` without a GPU is an error.
#ifndef KVOFFLOAD_DAEMON_BACKEND_FACTORY_H_
#define KVOFFLOAD_DAEMON_BACKEND_FACTORY_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "daemon/copy/copy_backend.h"

namespace kvoffload::daemon {

struct BackendOptions {
  std::string kind = "auto";  // auto | cuda | host
  int host_copy_threads = 4;
  int copy_sms = 8;  // CUDA: SMs of one staging gather/scatter launch
  std::string copy_path = "auto";  // CUDA: auto | copy_engine | staged | kernel
  std::string sm_copies = "if_mps";  // CUDA: if_mps | always | never
  uint64_t staging_mib_per_device = 1024;  // CUDA: staging of all workers on one GPU
  // CUDA, copy-engine path: copies of a job's first / largest cudaMemcpyBatchAsync call
  // (CudaBackendOptions; benchmarks only).
  uint64_t first_batch_copies = 8;  // 0: every call up to max_batch_copies
  uint64_t max_batch_copies = 4096;
  bool batch_overlap_hint = true;  // CUDA: cudaMemcpyFlagPreferOverlapWithCompute on batches
  uint64_t strided_min_rows = 2;   // CUDA: consecutive blocks as 2D copies from this many; 0 off
  uint64_t stream_wake_min_bytes = uint64_t{32} << 20;  // CUDA: jobs this large woken; 0 off
  uint32_t issue_threads = 4;  // CUDA: threads issuing one job's many copies (IssuePool)
  uint64_t parallel_issue_min_copies = 1024;  // CUDA: copies per thread before a job is split
};

absl::StatusOr<std::unique_ptr<CopyBackend>> CreateBackend(const BackendOptions& options);

}  // namespace kvoffload::daemon

#endif  // KVOFFLOAD_DAEMON_BACKEND_FACTORY_H_
