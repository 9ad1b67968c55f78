#include "daemon/backend_factory.h"

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
  cuda_options.sm_budget = options.copy_sms;
  if (options.staged_store_min_bytes > 0) {
    cuda_options.staged_store_min_copy_bytes = options.staged_store_min_bytes;
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
