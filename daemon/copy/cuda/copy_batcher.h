// CopyBatcher: copies handed to the copy engines in batches — cudaMemcpyBatchAsync of at most
// `max` copies per call (vLLM #49276: one call of ~52K descriptors crashed), or page by page with
// cudaMemcpyAsync where the driver has no batch copies (remembered in `*unsupported`, shared by
// every batcher of the backend). With `first` > 0 the batches grow from `first` copies to `max`
// (BatchSchedule: the copy engines start on the first one while the rest is issued).
//
//   CopyBatcher batcher(kMaxCopiesPerBatch, stream, &batch_unsupported, /*first=*/8);
//   RETURN_IF_ERROR(batcher.Add(dst, src, bytes));   // may flush
//   RETURN_IF_ERROR(batcher.Flush());
//
// Thread-safety: not thread-safe; one per enqueue, on the thread that owns `stream` (under its
// lane's mutex). `*unsupported` is an atomic shared across threads.
#ifndef KVOFFLOAD_DAEMON_COPY_CUDA_COPY_BATCHER_H_
#define KVOFFLOAD_DAEMON_COPY_CUDA_COPY_BATCHER_H_

#include <atomic>
#include <cstddef>
#include <vector>

#include <cuda_runtime_api.h>

#include "absl/status/status.h"
#include "daemon/copy/cuda/batch_schedule.h"

namespace kvoffload::daemon::cuda {

// Bound on one cudaMemcpyBatchAsync call.
inline constexpr size_t kMaxCopiesPerBatch = 4096;

class CopyBatcher {
 public:
  // first == 0: every batch takes up to `max` copies. overlap_hint: the batches' attribute
  // carries cudaMemcpyFlagPreferOverlapWithCompute (off only to measure what it does).
  CopyBatcher(size_t max, cudaStream_t stream, std::atomic<bool>* unsupported, size_t first = 0,
              bool overlap_hint = true);
  CopyBatcher(const CopyBatcher&) = delete;
  CopyBatcher& operator=(const CopyBatcher&) = delete;

  absl::Status Add(void* dst, const void* src, size_t bytes);
  absl::Status Flush();

  // Copies issued and batches flushed so far; when the first flush returned (JobClockNanos,
  // 0 before it).
  uint64_t copies() const { return copies_; }
  uint64_t batches() const { return batches_; }
  int64_t first_flush_returned() const { return first_flush_returned_; }

 private:
  BatchSchedule schedule_;
  size_t limit_;  // of the batch being filled
  cudaStream_t stream_;
  std::atomic<bool>* unsupported_;
  cudaMemcpyAttributes attr_;
  std::vector<void*> dsts_;
  std::vector<const void*> srcs_;
  std::vector<size_t> sizes_;
  uint64_t copies_ = 0;
  uint64_t batches_ = 0;
  int64_t first_flush_returned_ = 0;
};

}  // namespace kvoffload::daemon::cuda

#endif  // KVOFFLOAD_DAEMON_COPY_CUDA_COPY_BATCHER_H_
