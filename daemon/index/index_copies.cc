#include "daemon/index/index_copies.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/string_view.h"
#include "common/limits.h"
#include "common/status_macros.h"

// (Plain loops over the runs here: the thread-safety analysis does not look into lambdas.)

namespace kvoffload::daemon {
namespace {

using Row = RowTable::Row;

// The states a copy in `direction` may touch: one case per direction.
absl::Status StateAdmits(CopyDirection direction, uint64_t row, const Row& r) {
  absl::string_view wanted;
  switch (direction) {
    case CopyDirection::kStore:
      if (r.state == RowState::kWriting) return absl::OkStatus();
      wanted = RowStateName(RowState::kWriting);
      break;
    case CopyDirection::kLoad:
      if (r.state == RowState::kReading) return absl::OkStatus();
      wanted = RowStateName(RowState::kReading);
      break;
  }
  return absl::FailedPreconditionError(absl::StrCat(CopyDirectionName(direction), " copy: row ",
                                                    row, " is ", RowStateName(r.state), ", not ",
                                                    wanted));
}

// A store copy also needs a row no store job touched: a failed store is done too (proto: in
// flight or done): its key is ended with CompleteStore(false) and stored again, never vouched
// for by a second job.
absl::Status StoreAdmits(uint64_t row, const Row& r) {
  if (r.copies == 0 && !r.written && !r.store_failed) return absl::OkStatus();
  return absl::FailedPreconditionError(
      absl::StrCat("store copy: row ", row,
                   r.copies > 0 ? " has a store job in flight"
                                : (r.written ? " was written already" : "'s store job failed"),
                   "; a row takes one store job (end a failed store with CompleteStore(false) and "
                   "store the key again)"));
}

}  // namespace

absl::Status IndexCopies::CheckLocked(CopyDirection direction,
                                      const std::vector<RowRun>& rows) const {
  const uint32_t num_rows = state_->rows.num_rows();
  for (const RowRun& run : rows) {
    const uint32_t ticket = run.ticket;
    for (uint64_t row = run.first_row; row - run.first_row < run.num_rows; ++row) {
      if (row >= num_rows) {
        return absl::OutOfRangeError(
            absl::StrFormat("%s copy: row %d is out of range (num_rows %d)",
                            CopyDirectionName(direction), row, num_rows));
      }
      const Row& r = state_->rows[static_cast<uint32_t>(row)];
      RETURN_IF_ERROR(StateAdmits(direction, row, r));
      if (ticket != 0 && ticket != r.ticket) {
        return absl::FailedPreconditionError(
            absl::StrCat(CopyDirectionName(direction), " copy: row ", row,
                         " was handed to another key since this job was planned (ticket ", ticket,
                         ", the row's is ", r.ticket, "): the part came late or again"));
      }
      if (direction == CopyDirection::kStore) RETURN_IF_ERROR(StoreAdmits(row, r));
    }
  }
  return absl::OkStatus();
}

absl::Status IndexCopies::Check(CopyDirection direction, const std::vector<RowRun>& rows) const {
  absl::ReaderMutexLock lock(mu_);
  return CheckLocked(direction, rows);
}

absl::Status IndexCopies::Begin(CopyDirection direction, const std::vector<RowRun>& rows) {
  absl::MutexLock lock(mu_);
  RETURN_IF_ERROR(CheckLocked(direction, rows));
  // WRITING and READING rows are on no list, so counting a copy moves nothing.
  for (const RowRun& run : rows) {
    for (uint64_t row = run.first_row; row < run.first_row + run.num_rows; ++row) {
      ++state_->rows[static_cast<uint32_t>(row)].copies;
    }
    state_->rows.tally().copies_in_flight += run.num_rows;
  }
  return absl::OkStatus();
}

absl::StatusOr<RowRun> IndexCopies::BeginSpill(absl::string_view key) {
  if (key.size() < common::kMinKeyBytes || key.size() > common::kMaxKeyBytes) {
    return absl::InvalidArgumentError(absl::StrCat("spill: a key of ", key.size(), " bytes (",
                                                   common::kMinKeyBytes, "..",
                                                   common::kMaxKeyBytes, " allowed)"));
  }
  absl::MutexLock lock(mu_);
  const uint32_t row = state_->keys.Find(key);
  if (row == RowTable::kNil) return absl::NotFoundError("spill: the key is not in the index");
  RowTable::Row& r = state_->rows[row];
  if (r.state != RowState::kReady && r.state != RowState::kReading) {
    return absl::FailedPreconditionError(
        absl::StrCat("spill: row ", row, " is ", RowStateName(r.state), ", not readable"));
  }
  // An idle READY row leaves the LRU list (not evictable while the tier reads it); End puts it
  // back as the most recent, as it does after a load.
  if (r.state == RowState::kReady && r.copies == 0) state_->Unlink(row);
  ++r.copies;
  ++state_->rows.tally().copies_in_flight;
  return RowRun{row, 1, r.ticket};
}

absl::Status IndexCopies::End(const std::vector<RowRun>& rows) {
  absl::MutexLock lock(mu_);
  return EndLocked(rows);
}

absl::Status IndexCopies::EndStore(const std::vector<RowRun>& rows, bool ok) {
  absl::MutexLock lock(mu_);
  RETURN_IF_ERROR(EndLocked(rows));
  if (ok) {
    MarkStoreWrittenLocked(rows);
  } else {
    MarkStoreFailedLocked(rows);
  }
  return absl::OkStatus();
}

absl::Status IndexCopies::EndLocked(const std::vector<RowRun>& runs) {
  RowTable& rows = state_->rows;
  // Pass 1: decrement, undoing everything on the first bad row (rows may repeat).
  absl::Status status;
  uint64_t decremented = 0;
  for (const RowRun& run : runs) {
    for (uint64_t row = run.first_row; status.ok() && row - run.first_row < run.num_rows; ++row) {
      if (row >= rows.num_rows()) {
        status = absl::OutOfRangeError(
            absl::StrFormat("EndCopy: row %d is out of range (num_rows %d)", row, rows.num_rows()));
      } else if (rows[static_cast<uint32_t>(row)].copies == 0) {
        status = absl::FailedPreconditionError(
            absl::StrCat("EndCopy: row ", row, " has no copy in flight"));
      } else {
        --rows[static_cast<uint32_t>(row)].copies;
        ++decremented;
      }
    }
    if (!status.ok()) break;
  }
  if (!status.ok()) {
    uint64_t undo = decremented;
    for (auto run = runs.begin(); run != runs.end() && undo > 0; ++run) {
      for (uint64_t row = run->first_row; undo > 0 && row - run->first_row < run->num_rows;
           ++row, --undo) {
        ++rows[static_cast<uint32_t>(row)].copies;
      }
    }
    return status;
  }
  rows.tally().copies_in_flight -= decremented;
  // Pass 2: rows whose last copy ended, each once, back to front (the first row most recent).
  std::vector<uint32_t>& ended = state_->ended_rows;
  ended.clear();
  for (auto run = runs.rbegin(); run != runs.rend(); ++run) {
    for (uint64_t i = run->num_rows; i-- > 0;) {
      const uint32_t row = static_cast<uint32_t>(run->first_row + i);
      Row& r = rows[row];
      if (r.copies > 0 || r.marked) continue;
      r.marked = true;
      ended.push_back(row);
      if (r.state == RowState::kFree) {  // quarantined until now
        --rows.tally().quarantined;
        state_->Free(row);
      } else if (r.state == RowState::kReady) {
        state_->MakeMostRecent(row);
      }
    }
  }
  for (uint32_t row : ended) rows[row].marked = false;
  return absl::OkStatus();
}

void IndexCopies::MarkStoreFailedLocked(const std::vector<RowRun>& runs) {
  for (const RowRun& run : runs) {
    for (uint64_t row = run.first_row; row < run.first_row + run.num_rows; ++row) {
      Row& r = state_->rows[static_cast<uint32_t>(row)];
      if (r.state != RowState::kWriting) continue;
      r.store_failed = true;
      if (r.committed) {
        // The scheduler already committed this key and will not be asked again: drop it, so
        // it is a miss rather than a row that stays WRITING for ever.
        state_->DropWritingKey(static_cast<uint32_t>(row));
        state_->commits.CountDropped(1);
      }
    }
  }
}

void IndexCopies::MarkStoreWrittenLocked(const std::vector<RowRun>& runs) {
  std::vector<uint32_t> ready;
  for (const RowRun& run : runs) {
    for (uint64_t row = run.first_row; row < run.first_row + run.num_rows; ++row) {
      Row& r = state_->rows[static_cast<uint32_t>(row)];
      // A row a failed job touched stays failed: another job's success cannot vouch for it.
      if (r.state != RowState::kWriting || r.store_failed || r.written || r.copies > 0) continue;
      r.written = true;
      if (r.committed) ready.push_back(static_cast<uint32_t>(row));
    }
  }
  state_->MakeReady(ready);
}

uint64_t IndexCopies::DropStaleCommits(absl::Time cutoff) {
  absl::MutexLock lock(mu_);
  std::vector<uint32_t> stale;
  for (uint32_t row : state_->commits.RecordedBefore(cutoff)) {
    if (state_->rows[row].copies == 0) stale.push_back(row);
  }
  for (uint32_t row : stale) state_->DropWritingKey(row);
  state_->commits.CountDropped(stale.size());
  return stale.size();
}

}  // namespace kvoffload::daemon
