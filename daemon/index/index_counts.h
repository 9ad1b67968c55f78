// What a SlotIndex (slot_index.h) says about itself: a snapshot of its rows and counters
// (SlotIndex::counts(), Stats), and the refusal of a store that finds no room, which says where
// every row is. Both read an IndexState.
//
//   IndexCounts c = CountsOf(state);              // under the index's lock
//   return NoRoom(state, "PrepareStore", needed, evictable, protected_evictable);
//
// Thread-safety: plain functions; the caller holds the index's lock. The snapshot is a value.
#ifndef KVOFFLOAD_DAEMON_INDEX_INDEX_COUNTS_H_
#define KVOFFLOAD_DAEMON_INDEX_INDEX_COUNTS_H_

#include <cstdint>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "daemon/index/index_state.h"

namespace kvoffload::daemon {

// A snapshot of an index (SlotIndex::Counts). Rows: free + quarantined + writing + ready +
// reading + not_ready + offline == num_rows; without offline, they add up to rows_online().
struct IndexCounts {
  uint64_t num_rows = 0;
  uint64_t rows_not_ready = 0;    // at or above the readiness watermark: memory not ready yet
  uint64_t rows_free = 0;         // FREE and allocatable
  uint64_t rows_quarantined = 0;  // FREE, waiting for a copy in flight to end
  uint64_t rows_writing = 0;
  uint64_t rows_ready = 0;  // includes READY rows that a copy still pins
  uint64_t rows_reading = 0;
  uint64_t rows_evictable = 0;    // READY with no copy in flight
  uint64_t copies_in_flight = 0;  // sum of per-row copy counts (begun − ended)
  uint64_t commits_pending = 0;   // WRITING rows committed before their store job finished
  // Cumulative, per key.
  uint64_t hits = 0;             // Lookup: READY or READING
  uint64_t hits_pending = 0;     // Lookup: WRITING
  uint64_t misses = 0;           // Lookup: absent
  uint64_t evictions = 0;        // keys evicted by PrepareStore (Reset is not counted)
  uint64_t commits_dropped = 0;  // recorded commits whose store failed or never came
  uint64_t rows_offline = 0;     // FREE rows of offline segments (pools)

  // The rows of the index's online segments, ready or not (a private index: num_rows).
  uint64_t rows_online() const { return num_rows - rows_offline; }
};

IndexCounts CountsOf(const IndexState& state);

// RESOURCE_EXHAUSTED for a store of `needed` new keys that finds only `evictable` rows to evict
// (`protected_evictable` of the evictable ones are part of the request): where every row is, and
// when rows not ready yet will come.
absl::Status NoRoom(const IndexState& state, absl::string_view operation, uint64_t needed,
                    uint64_t evictable, uint64_t protected_evictable);

}  // namespace kvoffload::daemon

#endif  // KVOFFLOAD_DAEMON_INDEX_INDEX_COUNTS_H_
