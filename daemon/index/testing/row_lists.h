// The copy guards of SlotIndex with rows as plain lists, for tests and benchmarks. The index
// itself takes row runs (copy_run.h), as the job engine hands them; these helpers turn a list into
// one-row runs (consecutive rows under one ticket merge) and call index.copies(), so a test reads
// as "begin a store copy on these rows". MarkStoreFailed alone has no production form (the engine
// fails a store through copies().EndStore(rows, false)); it reaches IndexCopies as a friend.
//
//   ASSERT_TRUE(BeginCopy(*index, CopyDirection::kStore, store->rows).ok());
//   ASSERT_TRUE(EndStoreCopy(*index, store->rows, /*ok=*/true).ok());
//
// Thread-safety: as the IndexCopies methods they call (each takes the index's lock once).
#ifndef KVOFFLOAD_DAEMON_INDEX_TESTING_ROW_LISTS_H_
#define KVOFFLOAD_DAEMON_INDEX_TESTING_ROW_LISTS_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "daemon/copy/copy_run.h"
#include "daemon/index/slot_index.h"

namespace kvoffload::daemon {

// `rows` as one-row runs, `tickets[i]` for row i (none: ticket 0, not checked).
std::vector<RowRun> RowRunsOf(const std::vector<uint64_t>& rows,
                              const std::vector<uint32_t>& tickets = {});

// index.copies().Check / Begin with one ticket per row, or none.
//   INVALID_ARGUMENT  tickets given, but not one per row; otherwise as IndexCopies'.
absl::Status CheckRows(const SlotIndex& index, CopyDirection direction,
                       const std::vector<uint64_t>& rows,
                       const std::vector<uint32_t>& tickets = {});
absl::Status BeginCopy(SlotIndex& index, CopyDirection direction,
                       const std::vector<uint64_t>& rows,
                       const std::vector<uint32_t>& tickets = {});
// index.copies().End / EndStore.
absl::Status EndCopy(SlotIndex& index, const std::vector<uint64_t>& rows);
absl::Status EndStoreCopy(SlotIndex& index, const std::vector<uint64_t>& rows, bool ok);

// Records that a store job on `rows` failed, without ending a copy: each row still WRITING is
// marked (CompleteStore(true) of its key is then FAILED_PRECONDITION), and one whose commit was
// recorded loses its key and is freed (quarantined while copies are in flight). Rows in another
// state are left alone. OUT_OF_RANGE for a row >= num_rows (nothing is marked).
absl::Status MarkStoreFailed(SlotIndex& index, const std::vector<uint64_t>& rows);

// The friend through which MarkStoreFailed reaches IndexCopies' private state.
class SlotIndexTestPeer {
 public:
  static absl::Status MarkStoreFailed(SlotIndex& index, const std::vector<uint64_t>& rows);
};

}  // namespace kvoffload::daemon

#endif  // KVOFFLOAD_DAEMON_INDEX_TESTING_ROW_LISTS_H_
