#include "daemon/copy/cuda/buffer_pool.h"

#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace kvoffload::daemon::cuda {

size_t BufferPool::CapacityFor(size_t bytes) {
  size_t c = kMinCapacity;
  while (c < bytes) c <<= 1;
  return c;
}

BufferPool::BufferPool(uint64_t limit_bytes, Allocator allocator)
    : limit_(limit_bytes), allocator_(std::move(allocator)) {}

BufferPool::~BufferPool() {
  absl::MutexLock lock(&mu_);
  for (auto& [capacity, buffers] : cached_) {
    for (const Buffer& b : buffers) allocator_.free(b);
  }
}

void BufferPool::EvictFor(size_t needed) {
  while (in_use_bytes_ + cached_bytes_ + needed > limit_ && !cached_.empty()) {
    auto largest = std::prev(cached_.end());
    allocator_.free(largest->second.back());
    largest->second.pop_back();
    cached_bytes_ -= largest->first;
    if (largest->second.empty()) cached_.erase(largest);
  }
}

absl::StatusOr<BufferPool::Buffer> BufferPool::Acquire(size_t bytes) {
  const size_t capacity = CapacityFor(bytes);
  {
    absl::MutexLock lock(&mu_);
    acquired_since_trim_ = true;
    auto it = cached_.find(capacity);
    if (it != cached_.end()) {
      Buffer b = it->second.back();
      it->second.pop_back();
      if (it->second.empty()) cached_.erase(it);
      cached_bytes_ -= capacity;
      in_use_bytes_ += capacity;
      return b;
    }
    if (capacity > limit_ || in_use_bytes_ > limit_ - capacity) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "descriptor buffers: ", capacity, " more bytes do not fit the limit of ", limit_,
          " (", in_use_bytes_, " in use)"));
    }
    EvictFor(capacity);
    in_use_bytes_ += capacity;  // reserved while allocating, so concurrent calls respect it
  }
  absl::StatusOr<Buffer> b = allocator_.allocate(capacity);
  absl::MutexLock lock(&mu_);
  if (!b.ok()) {
    in_use_bytes_ -= capacity;
    return b.status();
  }
  b->capacity = capacity;
  return b;
}

void BufferPool::Release(const Buffer& buffer) {
  if (buffer.capacity == 0) return;
  absl::MutexLock lock(&mu_);
  in_use_bytes_ -= buffer.capacity;
  cached_[buffer.capacity].push_back(buffer);
  cached_bytes_ += buffer.capacity;
}

void BufferPool::TrimIfUnused() {
  absl::MutexLock lock(&mu_);
  const bool used = acquired_since_trim_;
  acquired_since_trim_ = false;
  if (used) return;
  for (auto& [capacity, buffers] : cached_) {
    for (const Buffer& b : buffers) allocator_.free(b);
  }
  cached_.clear();
  cached_bytes_ = 0;
}

uint64_t BufferPool::bytes() const {
  absl::MutexLock lock(&mu_);
  return in_use_bytes_ + cached_bytes_;
}

uint64_t BufferPool::in_use_bytes() const {
  absl::MutexLock lock(&mu_);
  return in_use_bytes_;
}

}  // namespace kvoffload::daemon::cuda
