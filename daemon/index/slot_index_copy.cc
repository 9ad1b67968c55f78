#include "daemon/index/slot_index.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/status_macros.h"

// The copy-path guards of SlotIndex (slot_index.h "Copy-path guards"): how copies are counted
// against rows, and how the end of a store job makes rows written, READY or failed.

namespace kvoffload::daemon {

absl::Status SlotIndex::CheckRowNumbers(absl::string_view operation,
                                        const std::vector<uint64_t>& rows) const {
  for (uint64_t row : rows) {
    if (row >= num_rows_) {
      return absl::OutOfRangeError(absl::StrFormat("%s: row %d is out of range (num_rows %d)",
                                                   operation, row, num_rows_));
    }
  }
  return absl::OkStatus();
}

absl::Status SlotIndex::MarkStoreFailed(const std::vector<uint64_t>& rows) {
  absl::MutexLock lock(&mu_);
  RETURN_IF_ERROR(CheckRowNumbers("MarkStoreFailed", rows));
  MarkStoreFailedLocked(rows);
  return absl::OkStatus();
}

void SlotIndex::MarkStoreFailedLocked(const std::vector<uint64_t>& rows) {
  for (uint64_t row : rows) {
    Row& r = rows_[row];
    if (r.state != RowState::kWriting) continue;
    r.store_failed = true;
    if (r.committed) {
      // The scheduler already committed this key and will not be asked again: drop it, so it
      // is a miss rather than a row that stays WRITING for ever.
      DropWritingKey(static_cast<uint32_t>(row));
      ++commits_dropped_;
    }
  }
}

void SlotIndex::MarkStoreWrittenLocked(const std::vector<uint64_t>& rows) {
  std::vector<uint32_t> ready;
  for (uint64_t row : rows) {
    Row& r = rows_[row];
    // A row a failed job touched stays failed: another job's success cannot vouch for it.
    if (r.state != RowState::kWriting || r.store_failed || r.written || r.copies > 0) continue;
    r.written = true;
    if (r.committed) ready.push_back(static_cast<uint32_t>(row));
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
                                        const std::vector<uint64_t>& rows,
                                        const std::vector<uint32_t>& tickets) const {
  const bool store = direction == CopyDirection::kStore;
  const RowState wanted = store ? RowState::kWriting : RowState::kReading;
  if (!tickets.empty() && tickets.size() != rows.size()) {
    return absl::InvalidArgumentError(absl::StrCat(store ? "store" : "load", " copy: ",
                                                   tickets.size(), " tickets for ", rows.size(),
                                                   " rows"));
  }
  for (size_t i = 0; i < rows.size(); ++i) {
    const uint64_t row = rows[i];
    if (row >= num_rows_) {
      return absl::OutOfRangeError(absl::StrFormat("%s copy: row %d is out of range (num_rows %d)",
                                                   store ? "store" : "load", row, num_rows_));
    }
    const Row& r = rows_[row];
    if (r.state != wanted) {
      return absl::FailedPreconditionError(absl::StrCat(store ? "store" : "load", " copy: row ",
                                                        row, " is ", RowStateName(r.state),
                                                        ", not ", RowStateName(wanted)));
    }
    if (!tickets.empty() && tickets[i] != 0 && tickets[i] != r.ticket) {
      return absl::FailedPreconditionError(absl::StrCat(
          store ? "store" : "load", " copy: row ", row,
          " was handed to another key since this job was planned (ticket ", tickets[i],
          ", the row's is ", r.ticket, "): the part came late or again"));
    }
    if (!store) continue;
    if (r.copies > 0 || r.written) {
      return absl::FailedPreconditionError(absl::StrCat(
          "store copy: row ", row, r.copies > 0 ? " has a store job in flight" : " was written",
          " already; a row takes one store job"));
    }
  }
  return absl::OkStatus();
}

absl::Status SlotIndex::CheckRows(CopyDirection direction, const std::vector<uint64_t>& rows,
                                  const std::vector<uint32_t>& tickets) const {
  absl::ReaderMutexLock lock(&mu_);
  return CheckRowsLocked(direction, rows, tickets);
}

absl::Status SlotIndex::BeginCopy(CopyDirection direction, const std::vector<uint64_t>& rows,
                                  const std::vector<uint32_t>& tickets) {
  absl::MutexLock lock(&mu_);
  absl::Status status = CheckRowsLocked(direction, rows, tickets);
  if (!status.ok()) return status;
  // WRITING and READING rows are on no list, so counting a copy moves nothing.
  for (uint64_t row : rows) ++rows_[row].copies;
  copies_in_flight_ += rows.size();
  return absl::OkStatus();
}

absl::Status SlotIndex::EndCopy(const std::vector<uint64_t>& rows) {
  absl::MutexLock lock(&mu_);
  return EndCopyLocked(rows);
}

absl::Status SlotIndex::EndStoreCopy(const std::vector<uint64_t>& rows, bool ok) {
  absl::MutexLock lock(&mu_);
  RETURN_IF_ERROR(EndCopyLocked(rows));
  if (ok) {
    MarkStoreWrittenLocked(rows);
  } else {
    MarkStoreFailedLocked(rows);
  }
  return absl::OkStatus();
}

absl::Status SlotIndex::EndCopyLocked(const std::vector<uint64_t>& rows) {
  // Pass 1: decrement, undoing everything on the first bad row (rows may repeat).
  for (size_t i = 0; i < rows.size(); ++i) {
    absl::Status status;
    if (rows[i] >= num_rows_) {
      status = absl::OutOfRangeError(
          absl::StrFormat("EndCopy: row %d is out of range (num_rows %d)", rows[i], num_rows_));
    } else if (rows_[rows[i]].copies == 0) {
      status = absl::FailedPreconditionError(
          absl::StrCat("EndCopy: row ", rows[i], " has no copy in flight"));
    }
    if (!status.ok()) {
      for (size_t j = 0; j < i; ++j) ++rows_[rows[j]].copies;
      return status;
    }
    --rows_[rows[i]].copies;
  }
  copies_in_flight_ -= rows.size();
  // Pass 2: rows whose last copy ended, each once, back to front (rows[0] most recent).
  scratch_rows_.clear();
  for (auto it = rows.rbegin(); it != rows.rend(); ++it) {
    const uint32_t row = static_cast<uint32_t>(*it);
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
  for (uint32_t row : scratch_rows_) rows_[row].marked = false;
  return absl::OkStatus();
}

}  // namespace kvoffload::daemon
