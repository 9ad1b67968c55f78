#include <algorithm>

#include "daemon/index/slot_index.h"

// SlotIndex readiness (serve while pinning): the watermark below which rows are usable
// and the restored rows parked above it.

namespace kvoffload::daemon {

uint64_t SlotIndex::MarkRowsReady(uint64_t end) {
  absl::MutexLock lock(&mu_);
  const uint32_t new_end = static_cast<uint32_t>(std::min<uint64_t>(end, num_rows_));
  if (new_end <= ready_end_) return 0;
  uint64_t back = 0;
  // Parked rows first (ascending), then the rest onto the free list, highest first so that the
  // lowest new row is handed out first.
  for (; parked_next_ < parked_.size() && parked_[parked_next_].row < new_end; ++parked_next_) {
    RestoredRow& p = parked_[parked_next_];
    if (FindRow(p.key) != kNil) {
      // Stored again while parked: the newer row wins; the journal forgets the old one.
      if (journal_ != nullptr) journal_->OnFree(p.row);
      continue;
    }
    Row& r = rows_[p.row];
    SetKey(r, p.key);
    r.state = RowState::kReady;
    r.ticket = p.ticket;
    key_to_row_.insert(p.row);
    LruLinkAfter(p.row, sentinel_);  // the least recent: a parked row coming back
    ++rows_ready_;
    ++segments_.member(r.member).counts.rows_held;  // pools' per-member count (a private index: member 0)
    ++back;
    std::string().swap(p.key);
  }
  for (uint32_t row = new_end; row-- > ready_end_;) {
    if (rows_[row].state == RowState::kFree) FreePush(row);
  }
  ready_end_ = new_end;
  if (parked_next_ == parked_.size()) {
    std::vector<RestoredRow>().swap(parked_);
    parked_next_ = 0;
  }
  return back;
}

uint64_t SlotIndex::ready_rows() const {
  absl::ReaderMutexLock lock(&mu_);
  return ready_end_;
}

}  // namespace kvoffload::daemon
