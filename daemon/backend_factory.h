// Picks the copy backend for --backend=auto|cuda|host. auto: CUDA when a GPU and driver are
// present, else the host backend (logged). An explicit `cuda` without a GPU is an error.
// BackendOptions is the one home of the backend's defaults: the flags of daemon/main.cc take
// theirs from a default-constructed one, and the words of the enum flags are parsed here.
#ifndef KVOFFLOAD_DAEMON_BACKEND_FACTORY_H_
#define KVOFFLOAD_DAEMON_BACKEND_FACTORY_H_

#include <memory>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "daemon/copy/copy_backend.h"
#include "daemon/copy/cuda/cuda_backend_options.h"

namespace kvoffload::daemon {

enum class BackendKind { kAuto, kCuda, kHost };

struct BackendOptions {
  BackendKind kind = BackendKind::kAuto;
  int host_copy_threads = 4;       // host backend (and auto without a GPU): memcpy threads
  cuda::CudaBackendOptions cuda;   // cuda backend (and auto with a GPU)
};

// The flags' words for the enums: --backend (auto, cuda, host), --copy_path (auto, copy_engine,
// staged, kernel) and --sm_copies (if_mps, always, never). Parse*: INVALID_ARGUMENT naming the
// flag and its words for any other.
absl::StatusOr<BackendKind> ParseBackendKind(absl::string_view word);
absl::StatusOr<cuda::ForcedPath> ParseCopyPath(absl::string_view word);
absl::StatusOr<cuda::SmCopies> ParseSmCopies(absl::string_view word);
const char* BackendKindName(BackendKind kind);
const char* CopyPathName(cuda::ForcedPath path);
const char* SmCopiesName(cuda::SmCopies sm_copies);

// The options CreateBackend uses: `cuda.first_batch_copies` clamped to `max_batch_copies` (the
// default first call, 8, must not make a smaller --cuda_max_batch_copies an error).
BackendOptions EffectiveBackendOptions(BackendOptions options);

// Every range rule of BackendOptions, without looking for a GPU (INVALID_ARGUMENT).
absl::Status ValidateBackendOptions(const BackendOptions& options);

absl::StatusOr<std::unique_ptr<CopyBackend>> CreateBackend(const BackendOptions& options);

}  // namespace kvoffload::daemon

#endif  // KVOFFLOAD_DAEMON_BACKEND_FACTORY_H_
