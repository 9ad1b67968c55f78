#include "daemon/backend_factory.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "daemon/copy/cuda/cuda_copy_backend.h"
#include "daemon/copy/host/host_copy_backend.h"

namespace kvoffload::daemon {
namespace {

template <typename Enum, size_t N>
absl::StatusOr<Enum> Parse(const char* flag, const std::pair<Enum, const char*> (&words)[N],
                           absl::string_view word) {
  for (const auto& [value, name] : words) {
    if (word == name) return value;
  }
  std::vector<const char*> names;
  for (const auto& entry : words) names.push_back(entry.second);
  return absl::InvalidArgumentError(absl::StrCat("--", flag, " must be ",
                                                 absl::StrJoin(names, ", "), " (got '", word,
                                                 "')"));
}

template <typename Enum, size_t N>
const char* Name(const std::pair<Enum, const char*> (&words)[N], Enum value) {
  for (const auto& entry : words) {
    if (entry.first == value) return entry.second;
  }
  return "?";
}

constexpr std::pair<BackendKind, const char*> kKinds[] = {
    {BackendKind::kAuto, "auto"}, {BackendKind::kCuda, "cuda"}, {BackendKind::kHost, "host"}};
constexpr std::pair<cuda::ForcedPath, const char*> kPaths[] = {
    {cuda::ForcedPath::kAuto, "auto"},
    {cuda::ForcedPath::kCopyEngine, "copy_engine"},
    {cuda::ForcedPath::kStaged, "staged"},
    {cuda::ForcedPath::kKernel, "kernel"}};
constexpr std::pair<cuda::SmCopies, const char*> kSmCopies[] = {
    {cuda::SmCopies::kIfMps, "if_mps"},
    {cuda::SmCopies::kAlways, "always"},
    {cuda::SmCopies::kNever, "never"}};

}  // namespace

absl::StatusOr<BackendKind> ParseBackendKind(absl::string_view word) {
  return Parse("backend", kKinds, word);
}
absl::StatusOr<cuda::ForcedPath> ParseCopyPath(absl::string_view word) {
  return Parse("copy_path", kPaths, word);
}
absl::StatusOr<cuda::SmCopies> ParseSmCopies(absl::string_view word) {
  return Parse("sm_copies", kSmCopies, word);
}
const char* BackendKindName(BackendKind kind) { return Name(kKinds, kind); }
const char* CopyPathName(cuda::ForcedPath path) { return Name(kPaths, path); }
const char* SmCopiesName(cuda::SmCopies sm_copies) { return Name(kSmCopies, sm_copies); }

BackendOptions EffectiveBackendOptions(BackendOptions options) {
  options.cuda.first_batch_copies =
      std::min(options.cuda.first_batch_copies, options.cuda.max_batch_copies);
  return options;
}

absl::Status ValidateBackendOptions(const BackendOptions& options) {
  if (options.host_copy_threads <= 0) {
    return absl::InvalidArgumentError("--host_copy_threads must be > 0");
  }
  if (options.kind == BackendKind::kHost) return absl::OkStatus();
  return cuda::ValidateCudaBackendOptions(EffectiveBackendOptions(options).cuda);
}

absl::StatusOr<std::unique_ptr<CopyBackend>> CreateBackend(const BackendOptions& given) {
  RETURN_IF_ERROR(ValidateBackendOptions(given));
  const BackendOptions options = EffectiveBackendOptions(given);
  if (options.kind == BackendKind::kHost) return CreateHostCopyBackend(options.host_copy_threads);
  absl::StatusOr<std::unique_ptr<CopyBackend>> backend = cuda::CreateCudaCopyBackend(options.cuda);
  if (backend.ok() || options.kind == BackendKind::kCuda) return backend;
  if (backend.status().code() != absl::StatusCode::kUnavailable) return backend.status();
  // auto without a GPU: said once, loudly, so nobody mistakes it for a GPU node.
  common::Logger("daemon")->warn("no usable GPU ({}): using the host copy backend",
                                 backend.status().ToString());
  return CreateHostCopyBackend(options.host_copy_threads);
}

}  // namespace kvoffload::daemon
