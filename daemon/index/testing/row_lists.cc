// The list forms of SlotIndex's copy guards, linked into tests and benchmarks only (row_lists.h).
#include "daemon/index/testing/row_lists.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/status_macros.h"

namespace kvoffload::daemon {
namespace {

// The list forms take one ticket per row, or none.
absl::Status CheckTickets(CopyDirection direction, const std::vector<uint64_t>& rows,
                          const std::vector<uint32_t>& tickets) {
  if (tickets.empty() || tickets.size() == rows.size()) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(CopyDirectionName(direction), " copy: ",
                                                 tickets.size(), " tickets for ", rows.size(),
                                                 " rows"));
}

}  // namespace

std::vector<RowRun> RowRunsOf(const std::vector<uint64_t>& rows,
                              const std::vector<uint32_t>& tickets) {
  std::vector<RowRun> runs;
  for (size_t i = 0; i < rows.size(); ++i) {
    AppendRows(&runs, RowRun{rows[i], 1, tickets.empty() ? 0 : tickets[i]});
  }
  return runs;
}

absl::Status CheckRows(const SlotIndex& index, CopyDirection direction,
                       const std::vector<uint64_t>& rows, const std::vector<uint32_t>& tickets) {
  RETURN_IF_ERROR(CheckTickets(direction, rows, tickets));
  return index.copies().Check(direction, RowRunsOf(rows, tickets));
}

absl::Status BeginCopy(SlotIndex& index, CopyDirection direction,
                       const std::vector<uint64_t>& rows, const std::vector<uint32_t>& tickets) {
  RETURN_IF_ERROR(CheckTickets(direction, rows, tickets));
  return index.copies().Begin(direction, RowRunsOf(rows, tickets));
}

absl::Status EndCopy(SlotIndex& index, const std::vector<uint64_t>& rows) {
  return index.copies().End(RowRunsOf(rows));
}

absl::Status EndStoreCopy(SlotIndex& index, const std::vector<uint64_t>& rows, bool ok) {
  return index.copies().EndStore(RowRunsOf(rows), ok);
}

absl::Status MarkStoreFailed(SlotIndex& index, const std::vector<uint64_t>& rows) {
  return SlotIndexTestPeer::MarkStoreFailed(index, rows);
}

absl::Status SlotIndexTestPeer::MarkStoreFailed(SlotIndex& index,
                                                const std::vector<uint64_t>& rows) {
  IndexCopies& copies = index.copies();
  absl::MutexLock lock(copies.mu_);
  for (uint64_t row : rows) {
    if (row >= index.num_rows()) {
      return absl::OutOfRangeError(absl::StrFormat(
          "MarkStoreFailed: row %d is out of range (num_rows %d)", row, index.num_rows()));
    }
  }
  copies.MarkStoreFailedLocked(RowRunsOf(rows));
  return absl::OkStatus();
}

}  // namespace kvoffload::daemon
