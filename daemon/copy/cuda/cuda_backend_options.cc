#include "daemon/copy/cuda/cuda_backend_options.h"

#include "absl/strings/str_cat.h"
#include "daemon/copy/cuda/copy_batcher.h"

namespace kvoffload::daemon::cuda {
namespace {

// Threads that may issue one job's copies (the copy engines gain nothing past a few).
constexpr uint32_t kMaxIssueThreads = 16;

}  // namespace

absl::Status ValidateCudaBackendOptions(const CudaBackendOptions& o) {
  if (o.copy_sms < 1) return absl::InvalidArgumentError("copy_sms must be at least 1 (--copy_sms)");
  if (o.staging_chunk_bytes < 4096 || o.staging_chunk_bytes % 4096 != 0) {
    return absl::InvalidArgumentError("staging_chunk_bytes must be a positive multiple of 4096");
  }
  if (o.max_batch_copies < 1 || o.max_batch_copies > kMaxCopiesPerBatch) {
    return absl::InvalidArgumentError(absl::StrCat("max_batch_copies must be 1..",
                                                   kMaxCopiesPerBatch, ", not ", o.max_batch_copies,
                                                   " (--cuda_max_batch_copies)"));
  }
  if (o.first_batch_copies > o.max_batch_copies) {
    return absl::InvalidArgumentError(absl::StrCat(
        "first_batch_copies (", o.first_batch_copies, ") must be at most max_batch_copies (",
        o.max_batch_copies, "); 0 turns it off (--cuda_first_batch_copies)"));
  }
  if (o.issue_threads < 1 || o.issue_threads > kMaxIssueThreads) {
    return absl::InvalidArgumentError(absl::StrCat("issue_threads must be 1..", kMaxIssueThreads,
                                                   ", not ", o.issue_threads,
                                                   " (--cuda_issue_threads)"));
  }
  if (o.parallel_issue_min_copies < 1) {
    return absl::InvalidArgumentError(
        "parallel_issue_min_copies must be at least 1 (--cuda_parallel_issue_min_copies)");
  }
  if (o.staging_bytes_per_device > kMaxStagingBytesPerDevice) {
    return absl::InvalidArgumentError(absl::StrCat(
        "staging_bytes_per_device must be at most ", kMaxStagingBytesPerDevice >> 20,
        " MiB (--staging_mib_per_device)"));
  }
  if (o.staging_idle_release < absl::ZeroDuration()) {
    return absl::InvalidArgumentError("staging_idle_release must not be negative");
  }
  if (o.sm_copies == SmCopies::kNever &&
      (o.forced_path == ForcedPath::kStaged || o.forced_path == ForcedPath::kKernel)) {
    return absl::InvalidArgumentError("a forced staged or kernel path needs SM copies");
  }
  return absl::OkStatus();
}

}  // namespace kvoffload::daemon::cuda
