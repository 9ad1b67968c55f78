#include "daemon/index/commit_ledger.h"

namespace kvoffload::daemon {

std::vector<uint32_t> CommitLedger::RecordedBefore(absl::Time cutoff) const {
  std::vector<uint32_t> rows;
  for (const auto& [row, since] : since_) {
    if (since < cutoff) rows.push_back(row);
  }
  return rows;
}

}  // namespace kvoffload::daemon
