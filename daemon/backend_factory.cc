#include "daemon/backend_factory.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "daemon/copy/cuda/cuda_copy_backend.h"
#include "daemon/copy/host/host_copy_backend.h"

namespace kvoffload::daemon {

absl::StatusOr<std::unique_ptr<CopyBackend>> CreateBackend(const BackendOptions& options) {
  if (options.host_copy_threads <= 0 || options.copy_sms <= 0) {
    return absl::InvalidArgumentError("--host_copy_threads and --copy_sms must be > 0");
  }
  if (options.kind == "host") return CreateHostCopyBackend(options.host_copy_threads);
  if (options.kind != "cuda" && options.kind != "auto") {
    return absl::InvalidArgumentError(
        absl::StrCat("--backend must be auto, cuda or host (got '", options.kind, "')"));
  }
  cuda::CudaBackendOptions cuda_options;
  cuda_options.copy_sms = options.copy_sms;
  if (options.staging_mib_per_device > (uint64_t{1} << 24)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--staging_mib_per_device must be at most 16777216 (got ", options.staging_mib_per_device,
        ")"));
  }
  cuda_options.staging_bytes_per_device = options.staging_mib_per_device << 20;
  // The default first call (8) must not make a smaller --cuda_max_batch_copies an error: the
  // first call takes at most the largest.
  cuda_options.first_batch_copies = std::min(options.first_batch_copies, options.max_batch_copies);
  cuda_options.max_batch_copies = options.max_batch_copies;
  cuda_options.batch_overlap_hint = options.batch_overlap_hint;
  cuda_options.strided_min_rows = options.strided_min_rows;
  cuda_options.stream_wake_min_bytes = options.stream_wake_min_bytes;
  cuda_options.issue_threads = options.issue_threads;
  cuda_options.parallel_issue_min_copies = options.parallel_issue_min_copies;
  if (options.copy_path == "copy_engine") {
    cuda_options.forced_path = cuda::ForcedPath::kCopyEngine;
  } else if (options.copy_path == "staged") {
    cuda_options.forced_path = cuda::ForcedPath::kStaged;
  } else if (options.copy_path == "kernel") {
    cuda_options.forced_path = cuda::ForcedPath::kKernel;
  } else if (options.copy_path != "auto") {
    return absl::InvalidArgumentError(absl::StrCat(
        "--copy_path must be auto, copy_engine, staged or kernel (got '", options.copy_path, "')"));
  }
  if (options.sm_copies == "if_mps") {
    cuda_options.sm_copies = cuda::SmCopies::kIfMps;
  } else if (options.sm_copies == "always") {
    cuda_options.sm_copies = cuda::SmCopies::kAlways;
  } else if (options.sm_copies == "never") {
    cuda_options.sm_copies = cuda::SmCopies::kNever;
  } else {
    return absl::InvalidArgumentError(absl::StrCat(
        "--sm_copies must be if_mps, always or never (got '", options.sm_copies, "')"));
  }
  absl::StatusOr<std::unique_ptr<CopyBackend>> backend = cuda::CreateCudaCopyBackend(cuda_options);
  if (backend.ok() || options.kind == "cuda") return backend;
  if (backend.status().code() != absl::StatusCode::kUnavailable) return backend.status();
  // auto without a GPU: said once, loudly, so nobody mistakes it for a GPU node.
  common::Logger("daemon")->warn("no usable GPU ({}): using the host copy backend",
                                 backend.status().ToString());
  return CreateHostCopyBackend(options.host_copy_threads);
}

}  // namespace kvoffload::daemon
