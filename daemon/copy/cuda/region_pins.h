// RegionPins: the regions registered with the CUDA backend and their pinning
// (cudaHostRegister, Portable | Mapped) in chunks that end on row boundaries, at most 64 GiB each
// (vLLM #51080: one cudaHostRegister over >= 512 GiB fails).
//
// A region is pinned in the context of a device already in use when it is registered; with no
// context yet, pinning waits for the first worker (PinPending), so registering a region never
// creates a context on a GPU that no worker uses.
//
//   RegionPins pins;
//   RETURN_IF_ERROR(pins.Register(base, bytes, row_bytes, [&] { return DeviceInUse(); }));
//   RETURN_IF_ERROR(pins.PinPending(ordinal));          // a worker of `ordinal` is opening
//   std::shared_ptr<PinnedRegion> region = pins.Find(base);
//   pins.Unregister(base);
//
// Thread-safety: thread-safe. Pinning and unpinning are serialised (pinning a large region takes
// seconds): a region is pinned exactly once and never unpinned while being pinned.
// Ownership: shares each PinnedRegion with the jobs that use it; the memory stays the caller's.
#ifndef KVOFFLOAD_DAEMON_COPY_CUDA_REGION_PINS_H_
#define KVOFFLOAD_DAEMON_COPY_CUDA_REGION_PINS_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "daemon/copy/cuda/device.h"

namespace kvoffload::daemon::cuda {

class RegionPins {
 public:
  RegionPins() = default;
  RegionPins(const RegionPins&) = delete;
  RegionPins& operator=(const RegionPins&) = delete;

  // Records the region and pins it in the context of `device_in_use()` (-1: none yet; called
  // with pinning serialised, so a device created meanwhile pins it in PinPending).
  absl::Status Register(uint8_t* base, uint64_t bytes, uint64_t row_bytes,
                        const std::function<int()>& device_in_use);
  // Serve while pinning (durable regions): records the region, pinning nothing; PinChunk pins its chunks
  // of `chunk_bytes` (a multiple of row_bytes, at most the 64 GiB cap) one at a time.
  absl::Status Declare(uint8_t* base, uint64_t bytes, uint64_t row_bytes, uint64_t chunk_bytes);
  // cudaHostRegister of one chunk of a declared region in the context of `device_in_use()`;
  // UNAVAILABLE while that is -1 (no worker opened yet), NOT_FOUND for an unknown base,
  // OUT_OF_RANGE for a chunk past the end. Pinning a pinned chunk again is OK (nothing done).
  // Runs concurrently with other chunks' pins; not with Unregister of the same region (the
  // caller stops its pinning first).
  absl::Status PinChunk(uint8_t* base, size_t chunk, const std::function<int()>& device_in_use);
  // Unpins and forgets the region; no job may be in flight on it. Unknown bases are ignored.
  void Unregister(uint8_t* base);
  // Pins every region registered whole and still waiting for a context, in `ordinal`'s
  // (declared regions are pinned chunk by chunk by their owner). An error (e.g. the
  // locked-memory limit) is returned; the regions pinned before it stay pinned.
  absl::Status PinPending(int ordinal);
  std::shared_ptr<PinnedRegion> Find(uint8_t* base);
  std::vector<uint8_t*> Bases();

 private:
  // cudaHostRegister of every chunk in `ordinal`'s context; all or nothing.
  absl::Status Pin(PinnedRegion& region, int ordinal) ABSL_EXCLUSIVE_LOCKS_REQUIRED(pin_mu_);

  absl::Mutex pin_mu_ ABSL_ACQUIRED_BEFORE(regions_mu_);
  absl::Mutex regions_mu_;
  std::map<uint8_t*, std::shared_ptr<PinnedRegion>> regions_ ABSL_GUARDED_BY(regions_mu_);
};

}  // namespace kvoffload::daemon::cuda

#endif  // KVOFFLOAD_DAEMON_COPY_CUDA_REGION_PINS_H_
