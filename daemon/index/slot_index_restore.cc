#include <algorithm>
#include <utility>

#include "absl/memory/memory.h"
#include "common/status_macros.h"
#include "daemon/index/slot_index.h"

// SlotIndex::Restore: an index rebuilt from the READY rows a RowJournal recorded (durable regions).

namespace kvoffload::daemon {

absl::StatusOr<SlotIndex::RestoreResult> SlotIndex::Restore(uint64_t num_rows,
                                                            std::vector<RestoredRow> rows,
                                                            uint32_t next_ticket,
                                                            std::unique_ptr<RowJournal> owned,
                                                            uint64_t ready_rows) {
  RETURN_IF_ERROR(CheckNumRows(num_rows));
  RestoreResult result;
  result.index = absl::WrapUnique(
      new SlotIndex(static_cast<uint32_t>(num_rows), std::move(owned), ready_rows));
  SlotIndex& index = *result.index;
  RowJournal* const journal = index.journal_;
  absl::MutexLock lock(&index.mu_);
  // Most recent first, so that of two entries naming one row or one key the newer one wins.
  std::sort(rows.begin(), rows.end(),
            [](const RestoredRow& a, const RestoredRow& b) { return a.seq > b.seq; });
  std::vector<uint32_t> accepted;  // most recent first
  std::vector<uint32_t> refused_rows;
  for (const RestoredRow& entry : rows) {
    const bool row_ok = entry.row < index.num_rows_;
    const bool ok = row_ok && entry.key.size() >= kMinKeyBytes &&
                    entry.key.size() <= kMaxKeyBytes && entry.ticket != 0 &&
                    entry.ticket <= kMaxTicket && index.rows_[entry.row].state == RowState::kFree &&
                    index.FindRow(entry.key) == kNil;
    if (!ok) {
      ++result.rows_dropped;
      if (row_ok) refused_rows.push_back(entry.row);
      continue;
    }
    Row& r = index.rows_[entry.row];
    index.SetKey(r, entry.key);
    r.state = RowState::kReady;
    r.ticket = entry.ticket;
    index.key_to_row_.insert(entry.row);
    accepted.push_back(entry.row);
  }
  // Rows whose memory is not ready yet are parked: out of the key table, FREE and on no list,
  // until MarkRowsReady reaches them.
  {
    std::vector<uint32_t> ready;
    ready.reserve(accepted.size());
    for (uint32_t row : accepted) {
      if (row < index.ready_end_) {
        ready.push_back(row);
        continue;
      }
      Row& r = index.rows_[row];
      index.parked_.push_back(RestoredRow{row, std::string(KeyOf(r)), r.ticket, 0});
      index.key_to_row_.erase(KeyOf(r));
      index.ReleaseKey(r);
      r.state = RowState::kFree;
      r.ticket = 0;
    }
    accepted = std::move(ready);
    std::sort(index.parked_.begin(), index.parked_.end(),
              [](const RestoredRow& a, const RestoredRow& b) { return a.row < b.row; });
  }
  // The constructor put every row on the free list; rebuild it from the rows left FREE, in
  // ascending order as a new index hands them out.
  index.free_head_ = kNil;
  index.rows_free_ = 0;
  for (uint32_t r = index.ready_end_; r-- > 0;) {
    if (index.rows_[r].state == RowState::kFree) index.FreePush(r);
  }
  // Least recent first onto the LRU list. The journal already holds these rows' recency, so it is
  // not told again (LruPushMostRecent would renumber them all).
  for (auto it = accepted.rbegin(); it != accepted.rend(); ++it) index.LruLink(*it);
  index.rows_ready_ = accepted.size();
  index.segments_.member(0).counts.rows_held = accepted.size();  // a restored index is private
  result.rows_restored = accepted.size();
  if (journal != nullptr) {
    for (uint32_t row : refused_rows) {
      // A refused entry's row that holds a parked row keeps it (the journal has that row).
      const bool parked = std::binary_search(
          index.parked_.begin(), index.parked_.end(), RestoredRow{row, {}, 0, 0},
          [](const RestoredRow& a, const RestoredRow& b) { return a.row < b.row; });
      if (index.rows_[row].state == RowState::kFree && !parked) journal->OnFree(row);
    }
  }
  index.tickets_.StartAt(next_ticket);
  return result;
}

}  // namespace kvoffload::daemon
