#include "daemon/index/request_keys.h"

#include "common/status_macros.h"

namespace kvoffload::daemon {

absl::Status RequestKeys::Find(absl::string_view operation, size_t i, const std::string& key,
                               const RowTable& rows, const KeyTable& table, uint32_t* row) {
  RETURN_IF_ERROR(ValidateKey(operation, i, key));
  *row = table.Find(key);
  if (*row != RowTable::kNil && rows[*row].marked) return DuplicateKey(operation, i, key);
  return absl::OkStatus();
}

absl::Status RequestKeys::ResolveStore(absl::string_view operation,
                                       const std::vector<std::string>& keys, RowTable& rows,
                                       const KeyTable& table, uint64_t* protected_evictable,
                                       uint64_t* held_back) {
  rows_.clear();
  new_.clear();
  *protected_evictable = 0;
  absl::Status status;
  for (size_t i = 0; i < keys.size(); ++i) {
    uint32_t row = RowTable::kNil;
    status = Find(operation, i, keys[i], rows, table, &row);
    if (!status.ok()) break;
    if (row == RowTable::kNil) {
      new_.push_back(static_cast<uint32_t>(i));
      continue;
    }
    RowTable::Row& r = rows[row];
    r.marked = true;
    rows_.push_back(row);
    if (r.state == RowState::kReady && r.copies == 0) {
      ++*protected_evictable;
      if (held_back != nullptr) ++held_back[r.member];
    }
  }
  if (status.ok() && new_.size() > 1) {
    seen_.clear();
    for (uint32_t i : new_) {
      if (!seen_.insert(keys[i]).second) {
        status = DuplicateKey(operation, i, keys[i]);
        break;
      }
    }
    seen_.clear();
  }
  if (!status.ok()) Unmark(rows);
  return status;
}

void RequestKeys::Unmark(RowTable& rows) const {
  for (uint32_t row : rows_) rows[row].marked = false;
}

}  // namespace kvoffload::daemon
