#include "daemon/copy/cuda/copy_batcher.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/cuda/cuda_status.h"
#include "daemon/copy/cuda/log.h"
#include "daemon/copy/cuda/job_times.h"

namespace kvoffload::daemon::cuda {
CopyBatcher::CopyBatcher(size_t max, cudaStream_t stream, std::atomic<bool>* unsupported,
                         size_t first, bool overlap_hint)
    : schedule_(first, max), limit_(schedule_.Next()), stream_(stream), unsupported_(unsupported) {
  dsts_.reserve(std::min<size_t>(max, 4096));
  srcs_.reserve(std::min<size_t>(max, 4096));
  sizes_.reserve(std::min<size_t>(max, 4096));
  std::memset(&attr_, 0, sizeof(attr_));
  attr_.srcAccessOrder = cudaMemcpySrcAccessOrderStream;
  attr_.flags = overlap_hint ? cudaMemcpyFlagPreferOverlapWithCompute : cudaMemcpyFlagDefault;
}

absl::Status CopyBatcher::Add(void* dst, const void* src, size_t bytes) {
  dsts_.push_back(dst);
  srcs_.push_back(src);
  sizes_.push_back(bytes);
  return sizes_.size() >= limit_ ? Flush() : absl::OkStatus();
}

absl::Status CopyBatcher::Flush() {
  if (sizes_.empty()) return absl::OkStatus();
  absl::Status s;
  bool done = false;
  if (!unsupported_->load(std::memory_order_relaxed)) {
    size_t attr_index = 0;
    const cudaError_t err = cudaMemcpyBatchAsync(dsts_.data(), srcs_.data(), sizes_.data(),
                                                 sizes_.size(), &attr_, &attr_index, 1, stream_);
    if (err == cudaErrorNotSupported) {
      cudaGetLastError();
      unsupported_->store(true);
      Log()->info("cudaMemcpyBatchAsync not supported here; copying page by page");
    } else {
      s = CudaStatus(err, absl::StrCat("cudaMemcpyBatchAsync of ", sizes_.size(), " copies"));
      done = true;
    }
  }
  for (size_t i = 0; !done && i < sizes_.size() && s.ok(); ++i) {
    s = CudaStatus(cudaMemcpyAsync(dsts_[i], srcs_[i], sizes_[i], cudaMemcpyDefault, stream_),
                   "cudaMemcpyAsync");
  }
  copies_ += sizes_.size();
  ++batches_;
  if (first_flush_returned_ == 0) first_flush_returned_ = JobClockNanos();
  limit_ = schedule_.Next();
  dsts_.clear();
  srcs_.clear();
  sizes_.clear();
  return s;
}

}  // namespace kvoffload::daemon::cuda
