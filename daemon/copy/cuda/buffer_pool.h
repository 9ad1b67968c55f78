// A bounded pool of per-job descriptor buffers (pinned host memory plus its device copy) for the
// SM copy paths. GPU-free: the allocation is passed in, so the bound is unit-tested in CI.
//
// What grew before (copy path v3, the daemon's GPU memory): pair tables were pooled in power-of-two classes and never
// freed, so the daemon's GPU memory rose with the largest jobs it had seen times the jobs in
// flight at once (6.1 GB reported on an H200 after a mix with one 960,000-page job). Here every
// byte the pool holds, in use or cached, counts against one limit: Acquire frees cached buffers
// to make room and fails with RESOURCE_EXHAUSTED (allocating nothing) when the buffers in use
// leave none; the caller then moves the job by copy engines, which need no device memory.
//
//   BufferPool pool(64 << 20, {allocate, free});
//   ASSIGN_OR_RETURN(BufferPool::Buffer b, pool.Acquire(num_pairs * sizeof(PagePair)));
//   ...  // after the job's GPU work is known done:
//   pool.Release(b);
//
// Thread-safe. The pool owns the cached buffers (freed by Trim and by the destructor); a buffer
// out of Acquire belongs to the caller until Release.
#ifndef KVOFFLOAD_DAEMON_COPY_CUDA_BUFFER_POOL_H_
#define KVOFFLOAD_DAEMON_COPY_CUDA_BUFFER_POOL_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"

namespace kvoffload::daemon::cuda {

class BufferPool {
 public:
  struct Buffer {
    uint8_t* host = nullptr;
    uint8_t* device = nullptr;
    size_t capacity = 0;
  };
  struct Allocator {
    std::function<absl::StatusOr<Buffer>(size_t capacity)> allocate;  // sets host and device
    std::function<void(const Buffer&)> free;
  };

  // Smallest capacity handed out: small jobs share one size class.
  static constexpr size_t kMinCapacity = size_t{64} << 10;
  // The capacity Acquire(bytes) uses: the next power of two ≥ max(bytes, kMinCapacity).
  static size_t CapacityFor(size_t bytes);

  BufferPool(uint64_t limit_bytes, Allocator allocator);
  ~BufferPool();  // frees the cached buffers (buffers still out are the caller's to release)
  BufferPool(const BufferPool&) = delete;
  BufferPool& operator=(const BufferPool&) = delete;

  // A buffer of CapacityFor(bytes): a cached one of that capacity, else a new one once the
  // limit has room (cached buffers of other sizes are freed for it). RESOURCE_EXHAUSTED, with
  // nothing allocated, when bytes in use + the new capacity exceed the limit; the allocator's
  // error as is.
  absl::StatusOr<Buffer> Acquire(size_t bytes) ABSL_LOCKS_EXCLUDED(mu_);
  // Returns a buffer from Acquire to the cache. Only once its GPU work is known done.
  void Release(const Buffer& buffer) ABSL_LOCKS_EXCLUDED(mu_);
  // Frees every cached buffer if nothing was acquired since the previous call (the device's
  // idle sweep calls it about once a second): an idle pool returns to zero bytes.
  void TrimIfUnused() ABSL_LOCKS_EXCLUDED(mu_);

  uint64_t limit_bytes() const { return limit_; }
  uint64_t bytes() const ABSL_LOCKS_EXCLUDED(mu_);  // in use + cached; never above the limit
  uint64_t in_use_bytes() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  // Frees cached buffers, largest first, until `needed` more bytes fit the limit or none is
  // left. Under mu_, so that what the pool holds never exceeds the limit even for a moment.
  void EvictFor(size_t needed) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const uint64_t limit_;
  const Allocator allocator_;
  mutable absl::Mutex mu_;
  std::map<size_t, std::vector<Buffer>> cached_ ABSL_GUARDED_BY(mu_);
  uint64_t cached_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t in_use_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  bool acquired_since_trim_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace kvoffload::daemon::cuda

#endif  // KVOFFLOAD_DAEMON_COPY_CUDA_BUFFER_POOL_H_
