#include <array>
#include <vector>

#include "absl/strings/str_cat.h"
#include "daemon/index/slot_index.h"

// Introspection of SlotIndex: counters and memory (the invariant walk is testing/).

namespace kvoffload::daemon {

// ---- Introspection ---------------------------------------------------------------------------

uint64_t SlotIndex::NotReadyRowsLocked() const {
  return num_rows_ - ready_end_ + segments_.NotReadyOnlineRows();
}

SlotIndex::Counts SlotIndex::counts() const {
  absl::ReaderMutexLock lock(&mu_);
  Counts c;
  c.num_rows = num_rows_;
  // A pool parks the rows of an online segment that are not ready yet as it parks an offline
  // segment's: they count as not ready, not offline (online rows add up without them).
  const uint64_t pool_not_ready = segments_.NotReadyOnlineRows();
  c.rows_not_ready = num_rows_ - ready_end_ + pool_not_ready;
  c.rows_free = rows_free_;
  c.rows_quarantined = rows_quarantined_;
  c.rows_writing = rows_writing_;
  c.rows_ready = rows_ready_;
  c.rows_reading = rows_reading_;
  c.rows_evictable = rows_evictable_;
  c.copies_in_flight = copies_in_flight_;
  c.hits = hits_;
  c.hits_pending = hits_pending_;
  c.misses = misses_;
  c.evictions = evictions_;
  c.commits_pending = committed_since_.size();
  c.commits_dropped = commits_dropped_;
  c.rows_offline = segments_.rows_parked() - pool_not_ready;
  return c;
}

uint64_t SlotIndex::MemoryBytes() const {
  absl::ReaderMutexLock lock(&mu_);
  // A flat_hash_set slot is the element plus one control byte.
  return rows_.size() * sizeof(Row) + key_to_row_.capacity() * (sizeof(uint32_t) + 1) +
         key_heap_bytes_;
}

absl::string_view SlotIndex::RowStateName(RowState state) {
  switch (state) {
    case RowState::kFree:
      return "FREE";
    case RowState::kWriting:
      return "WRITING";
    case RowState::kReady:
      return "READY";
    case RowState::kReading:
      return "READING";
  }
  return "UNKNOWN";
}

absl::string_view SlotIndex::KeyStateName(KeyState state) {
  switch (state) {
    case KeyState::kMiss:
      return "MISS";
    case KeyState::kHit:
      return "HIT";
    case KeyState::kHitPending:
      return "HIT_PENDING";
  }
  return "UNKNOWN";
}

}  // namespace kvoffload::daemon
