// AlignedBuffer: heap memory aligned for direct I/O (kIoAlignment), zero-filled. Move-only
// owner; not thread-safe (one owner at a time).
#ifndef KVOFFLOAD_DAEMON_TIER_ALIGNED_BUFFER_H_
#define KVOFFLOAD_DAEMON_TIER_ALIGNED_BUFFER_H_

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>

#include "daemon/tier/block_io.h"

namespace kvoffload::tier {

class AlignedBuffer {
 public:
  AlignedBuffer() = default;
  // `bytes` is rounded up to kIoAlignment. Aborts on allocation failure (as operator new).
  explicit AlignedBuffer(uint64_t bytes)
      : bytes_((bytes + kIoAlignment - 1) / kIoAlignment * kIoAlignment),
        data_(static_cast<unsigned char*>(std::aligned_alloc(kIoAlignment, bytes_ ? bytes_ : 1))) {
    if (data_ == nullptr) std::abort();
    std::memset(data_.get(), 0, bytes_);
  }
  unsigned char* data() const { return data_.get(); }
  uint64_t size() const { return bytes_; }
  iovec iov() const { return {data_.get(), bytes_}; }

 private:
  struct Free {
    void operator()(unsigned char* p) const { std::free(p); }
  };
  uint64_t bytes_ = 0;
  std::unique_ptr<unsigned char, Free> data_;
};

}  // namespace kvoffload::tier

#endif  // KVOFFLOAD_DAEMON_TIER_ALIGNED_BUFFER_H_
