#include "daemon/index/slot_index.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/status_macros.h"

// The copy-path guards of SlotIndex (slot_index.h "Copy-path guards"): how copies are counted
// against rows, and how the end of a store job makes rows written, READY or failed.

namespace kvoffload::daemon {
// (Plain loops over the runs here: the thread-safety analysis does not look into lambdas.)
void SlotIndex::MarkStoreFailedLocked(const std::vector<RowRun>& rows) {
  for (const RowRun& run : rows) {
    for (uint64_t row = run.first_row; row < run.first_row + run.num_rows; ++row) {
      Row& r = rows_[row];
      if (r.state != RowState::kWriting) continue;
      r.store_failed = true;
      if (r.committed) {
        // The scheduler already committed this key and will not be asked again: drop it, so
        // it is a miss rather than a row that stays WRITING for ever.
        DropWritingKey(static_cast<uint32_t>(row));
        ++commits_dropped_;
      }
    }
  }
}

void SlotIndex::MarkStoreWrittenLocked(const std::vector<RowRun>& rows) {
  std::vector<uint32_t> ready;
  for (const RowRun& run : rows) {
    for (uint64_t row = run.first_row; row < run.first_row + run.num_rows; ++row) {
      Row& r = rows_[row];
      // A row a failed job touched stays failed: another job's success cannot vouch for it.
      if (r.state != RowState::kWriting || r.store_failed || r.written || r.copies > 0) continue;
      r.written = true;
      if (r.committed) ready.push_back(static_cast<uint32_t>(row));
    }
  }
  MakeReady(ready);
}

uint64_t SlotIndex::DropStaleCommits(absl::Time cutoff) {
  absl::MutexLock lock(&mu_);
  std::vector<uint32_t> stale;
  for (const auto& [row, since] : committed_since_) {
    if (since < cutoff && rows_[row].copies == 0) stale.push_back(row);
  }
  for (uint32_t row : stale) DropWritingKey(row);
  commits_dropped_ += stale.size();
  return stale.size();
}

// ---- Copy-path guards ------------------------------------------------------------------------

absl::Status SlotIndex::CheckRowsLocked(CopyDirection direction,
                                        const std::vector<RowRun>& rows) const {
  const bool store = direction == CopyDirection::kStore;
  const RowState wanted = store ? RowState::kWriting : RowState::kReading;
  for (const RowRun& run : rows) {
    const uint32_t ticket = run.ticket;
    for (uint64_t row = run.first_row; row - run.first_row < run.num_rows; ++row) {
      if (row >= num_rows_) {
        return absl::OutOfRangeError(absl::StrFormat(
            "%s copy: row %d is out of range (num_rows %d)", store ? "store" : "load", row,
            num_rows_));
      }
      const Row& r = rows_[row];
      if (r.state != wanted) {
        return absl::FailedPreconditionError(absl::StrCat(store ? "store" : "load",
                                                          " copy: row ", row, " is ",
                                                          RowStateName(r.state), ", not ",
                                                          RowStateName(wanted)));
      }
      if (ticket != 0 && ticket != r.ticket) {
        return absl::FailedPreconditionError(absl::StrCat(
            store ? "store" : "load", " copy: row ", row,
            " was handed to another key since this job was planned (ticket ", ticket,
            ", the row's is ", r.ticket, "): the part came late or again"));
      }
      // A failed store is done too (proto: in flight or done): its key is ended with
      // CompleteStore(false) and stored again, never vouched for by a second job.
      if (store && (r.copies > 0 || r.written || r.store_failed)) {
        return absl::FailedPreconditionError(absl::StrCat(
            "store copy: row ", row,
            r.copies > 0 ? " has a store job in flight"
                         : (r.written ? " was written already" : "'s store job failed"),
            "; a row takes one store job (end a failed store with CompleteStore(false) and "
            "store the key again)"));
      }
    }
  }
  return absl::OkStatus();
}

absl::Status SlotIndex::CheckRowRuns(CopyDirection direction,
                                     const std::vector<RowRun>& rows) const {
  absl::ReaderMutexLock lock(&mu_);
  return CheckRowsLocked(direction, rows);
}

absl::Status SlotIndex::BeginCopyRuns(CopyDirection direction, const std::vector<RowRun>& rows) {
  absl::MutexLock lock(&mu_);
  absl::Status status = CheckRowsLocked(direction, rows);
  if (!status.ok()) return status;
  // WRITING and READING rows are on no list, so counting a copy moves nothing.
  for (const RowRun& run : rows) {
    for (uint64_t row = run.first_row; row < run.first_row + run.num_rows; ++row) {
      ++rows_[row].copies;
    }
    copies_in_flight_ += run.num_rows;
  }
  return absl::OkStatus();
}

void SlotIndex::SetReadyListener(ReadyListener listener) {
  absl::MutexLock lock(&mu_);
  ready_listener_ = std::move(listener);
}

absl::StatusOr<RowRun> SlotIndex::BeginSpill(absl::string_view key) {
  if (key.size() < kMinKeyBytes || key.size() > kMaxKeyBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("spill: a key of ", key.size(), " bytes (", kMinKeyBytes, "..",
                     kMaxKeyBytes, " allowed)"));
  }
  absl::MutexLock lock(&mu_);
  const uint32_t row = FindRow(key);
  if (row == kNil) return absl::NotFoundError("spill: the key is not in the index");
  Row& r = rows_[row];
  if (r.state != RowState::kReady && r.state != RowState::kReading) {
    return absl::FailedPreconditionError(
        absl::StrCat("spill: row ", row, " is ", RowStateName(r.state), ", not readable"));
  }
  // An idle READY row leaves the LRU list (not evictable while the tier reads it); EndCopyRuns
  // puts it back as the most recent, as it does after a load.
  if (r.state == RowState::kReady && r.copies == 0) LruUnlink(row);
  ++r.copies;
  ++copies_in_flight_;
  return RowRun{row, 1, r.ticket};
}

absl::Status SlotIndex::EndCopyRuns(const std::vector<RowRun>& rows) {
  absl::MutexLock lock(&mu_);
  return EndCopyLocked(rows);
}

absl::Status SlotIndex::EndStoreCopyRuns(const std::vector<RowRun>& rows, bool ok) {
  absl::MutexLock lock(&mu_);
  RETURN_IF_ERROR(EndCopyLocked(rows));
  if (ok) {
    MarkStoreWrittenLocked(rows);
  } else {
    MarkStoreFailedLocked(rows);
  }
  return absl::OkStatus();
}

absl::Status SlotIndex::EndCopyLocked(const std::vector<RowRun>& rows) {
  // Pass 1: decrement, undoing everything on the first bad row (rows may repeat).
  absl::Status status;
  uint64_t decremented = 0;
  for (const RowRun& run : rows) {
    for (uint64_t row = run.first_row; status.ok() && row - run.first_row < run.num_rows; ++row) {
      if (row >= num_rows_) {
        status = absl::OutOfRangeError(
            absl::StrFormat("EndCopy: row %d is out of range (num_rows %d)", row, num_rows_));
      } else if (rows_[row].copies == 0) {
        status = absl::FailedPreconditionError(
            absl::StrCat("EndCopy: row ", row, " has no copy in flight"));
      } else {
        --rows_[row].copies;
        ++decremented;
      }
    }
    if (!status.ok()) break;
  }
  if (!status.ok()) {
    uint64_t undo = decremented;
    for (auto run = rows.begin(); run != rows.end() && undo > 0; ++run) {
      for (uint64_t row = run->first_row; undo > 0 && row - run->first_row < run->num_rows;
           ++row, --undo) {
        ++rows_[row].copies;
      }
    }
    return status;
  }
  copies_in_flight_ -= decremented;
  // Pass 2: rows whose last copy ended, each once, back to front (the first row most recent).
  scratch_rows_.clear();
  for (auto run = rows.rbegin(); run != rows.rend(); ++run) {
    for (uint64_t i = run->num_rows; i-- > 0;) {
      const uint32_t row = static_cast<uint32_t>(run->first_row + i);
      Row& r = rows_[row];
      if (r.copies > 0 || r.marked) continue;
      r.marked = true;
      scratch_rows_.push_back(row);
      if (r.state == RowState::kFree) {  // quarantined until now
        --rows_quarantined_;
        FreePush(row);
      } else if (r.state == RowState::kReady) {
        LruPushMostRecent(row);
      }
    }
  }
  for (uint32_t row : scratch_rows_) rows_[row].marked = false;
  return absl::OkStatus();
}

}  // namespace kvoffload::daemon
