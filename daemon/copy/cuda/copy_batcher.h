// CopyBatcher: copies handed to the copy engines in batches — cudaMemcpyBatchAsync of at most
// `max` copies per call (vLLM #49276: one call of ~52K descriptors crashed), or page by page with
// cudaMemcpyAsync where the driver has no batch copies (remembered in `*unsupported`, shared by
// every batcher of the backend).
//
//   CopyBatcher batcher(kMaxCopiesPerBatch, stream, &batch_unsupported);
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

namespace kvoffload::daemon::cuda {

// Bound on one cudaMemcpyBatchAsync call.
inline constexpr size_t kMaxCopiesPerBatch = 4096;

class CopyBatcher {
 public:
  CopyBatcher(size_t max, cudaStream_t stream, std::atomic<bool>* unsupported);
  CopyBatcher(const CopyBatcher&) = delete;
  CopyBatcher& operator=(const CopyBatcher&) = delete;

  absl::Status Add(void* dst, const void* src, size_t bytes);
  absl::Status Flush();

 private:
  const size_t max_;
  cudaStream_t stream_;
  std::atomic<bool>* unsupported_;
  cudaMemcpyAttributes attr_;
  std::vector<void*> dsts_;
  std::vector<const void*> srcs_;
  std::vector<size_t> sizes_;
};

}  // namespace kvoffload::daemon::cuda

#endif  // KVOFFLOAD_DAEMON_COPY_CUDA_COPY_BATCHER_H_
