// RegionPreparer: makes a region usable chunk by chunk in the background (durable regions: serve while
// pinning): each chunk is populated (unless the pages are already there, as in a region adopted
// after a restart) and then pinned through `pin` (the copy backend's PinRegionChunk); the
// contiguous prefix of chunks that are both is reported through `ready`, in increasing order, so
// the engine's index can hand out exactly those rows (SlotIndex::MarkRowsReady).
//
//   RegionPreparer::Options o;
//   o.chunk_bytes = ChunkBytesFor(geometry.row_bytes, region_options.ready_chunk_bytes);
//   auto preparer = RegionPreparer::Start(region.get(), o,
//       [&](size_t c) { return backend->PinRegionChunk(region->data(), c); },
//       [&](uint64_t ready_bytes) { index->MarkRowsReady(ready_bytes / row_bytes); });
//   RETURN_IF_ERROR(preparer->WaitFirstChunk());   // OpenEngine returns here
//
// Chunk 0 is populated by all threads together (it gates the first row); the others by one
// thread each, taken in order. When nothing is to be populated (a region adopted after a
// restart: pinning only), chunk 0 is pinned before the others start, so that its pin does not
// queue behind theirs in the driver. A pin that answers UNAVAILABLE (no device context yet) is
// retried every `retry_after` until it succeeds or the preparer stops. Any other failure stops the
// preparation: the prefix ready so far stays served, the rest never is, and status() says why.
//
// Thread-safety: thread-safe. `ready` is called from the preparer's threads, one call at a time.
// Ownership: the region, and whatever `pin` and `ready` use, must outlive the preparer; Stop()
// (or the destructor) returns only when no thread runs and no callback is running, so the owner
// stops the preparer before it unregisters or frees the region.
#ifndef KVOFFLOAD_DAEMON_REGION_REGION_PREPARER_H_
#define KVOFFLOAD_DAEMON_REGION_REGION_PREPARER_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "daemon/region/region.h"

namespace kvoffload::daemon {

// `target` rounded down to whole rows of `row_bytes`, at least one row.
uint64_t ChunkBytesFor(uint64_t row_bytes, uint64_t target);

class RegionPreparer {
 public:
  struct Options {
    uint64_t chunk_bytes = 128ull << 20;  // > 0
    int threads = 8;                      // <= 0: 1
    bool populate = true;                 // false: the pages are there; pin only
    absl::Duration retry_after = absl::Milliseconds(20);
    // A pause after each chunk's pin, so that copies of the chunks already usable get the
    // driver between registrations (pinning an adopted region is nothing but registrations).
    absl::Duration pause_between_pins = absl::ZeroDuration();
    // Test seam: replaces Region::PopulateRange for one chunk (e.g. to hold a chunk back).
    std::function<absl::Status(size_t chunk, uint64_t offset, uint64_t bytes)> populate_chunk;
  };
  using PinFn = std::function<absl::Status(size_t chunk)>;
  using ReadyFn = std::function<void(uint64_t ready_bytes)>;

  struct Progress {
    uint64_t total_bytes = 0;
    uint64_t ready_bytes = 0;  // the contiguous prefix populated and pinned
    uint64_t chunk_bytes = 0;
    uint64_t chunks = 0;
    uint64_t chunks_ready = 0;        // populated and pinned, in any order
    bool waiting_for_device = false;  // a pin answered UNAVAILABLE and is being retried
    absl::Status status;              // the failure that stopped it, or OK
    double first_ready_seconds = -1;  // from Start until ready_bytes > 0; -1: not yet
    double fully_ready_seconds = -1;  // until ready_bytes == total_bytes; -1: not yet
  };

  static std::unique_ptr<RegionPreparer> Start(const Region* region, Options options, PinFn pin,
                                               ReadyFn ready);
  ~RegionPreparer();
  RegionPreparer(const RegionPreparer&) = delete;
  RegionPreparer& operator=(const RegionPreparer&) = delete;

  // Blocks until chunk 0 is populated and either pinned and reported through `ready` (so it is
  // usable when this returns) or waiting for a device; the error that stopped the preparation
  // before that; CANCELLED when stopped first.
  absl::Status WaitFirstChunk();
  // Blocks until every chunk is ready, or the preparation failed or was stopped (its status).
  absl::Status WaitAll();
  // Blocks until chunk 0 is pinned and reported through `ready` (its rows are usable), at most
  // `timeout`: OK; the failure that stopped the preparation; CANCELLED when stopped;
  // DEADLINE_EXCEEDED when still waiting (e.g. for a device).
  absl::Status WaitFirstChunkUsable(absl::Duration timeout);
  // A pin that answered UNAVAILABLE is retried now instead of after `retry_after` (a worker
  // just brought the device context the pins need).
  void RetryNow();
  void Stop();
  Progress progress() const;

 private:
  RegionPreparer(const Region* region, Options options, PinFn pin, ReadyFn ready);
  void Run();                   // the coordinator: chunk 0, then the pool
  void RunChunks();             // one pool thread
  void PrepareChunk(size_t c);  // populate + pin (with retries); records the outcome
  absl::Status PopulateFirstChunk();
  void ChunkDone(size_t c);
  void Fail(const absl::Status& s);
  bool stopping() const { return stop_.load(std::memory_order_acquire); }

  const Region* const region_;
  const Options options_;
  const PinFn pin_;
  const ReadyFn ready_;
  const uint64_t chunks_;
  const absl::Time start_;
  std::atomic<bool> stop_{false};
  std::atomic<size_t> next_chunk_{1};
  std::atomic<uint64_t> retry_generation_{0};  // RetryNow() bumps it; retry waits end on change

  mutable absl::Mutex mu_;
  std::vector<bool> done_ ABSL_GUARDED_BY(mu_);
  uint64_t done_count_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t prefix_ ABSL_GUARDED_BY(mu_) = 0;                  // chunks [0, prefix_) done
  uint64_t usable_bytes_ ABSL_GUARDED_BY(mu_) = 0;            // the prefix `ready` has been told of
  bool first_waits_for_device_ ABSL_GUARDED_BY(mu_) = false;  // chunk 0 populated, pin retried
  int waiting_for_device_ ABSL_GUARDED_BY(mu_) = 0;
  bool finished_ ABSL_GUARDED_BY(mu_) = false;  // every thread has ended
  absl::Status status_ ABSL_GUARDED_BY(mu_);
  double first_ready_seconds_ ABSL_GUARDED_BY(mu_) = -1;
  double fully_ready_seconds_ ABSL_GUARDED_BY(mu_) = -1;
  // Serialises `ready` calls, so the prefix they report only grows. Taken before mu_.
  absl::Mutex ready_mu_ ABSL_ACQUIRED_BEFORE(mu_);
  uint64_t reported_ ABSL_GUARDED_BY(ready_mu_) = 0;

  std::thread coordinator_;
};

}  // namespace kvoffload::daemon

#endif  // KVOFFLOAD_DAEMON_REGION_REGION_PREPARER_H_
