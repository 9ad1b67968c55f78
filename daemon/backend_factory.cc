#include "daemon/backend_factory.h"

#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "daemon/copy/host/host_copy_backend.h"

namespace kvoffload::daemon {

absl::StatusOr<std::unique_ptr<CopyBackend>> CreateBackend(const BackendOptions& options) {
  if (options.kind == "host") return CreateHostCopyBackend(options.host_copy_threads);
  if (options.kind == "cuda" || options.kind == "auto") {
    return absl::UnavailableError("the CUDA backend is not built yet");
  }
  return absl::InvalidArgumentError(
      absl::StrCat("--backend must be auto, cuda or host (got '", options.kind, "')"));
}

}  // namespace kvoffload::daemon
