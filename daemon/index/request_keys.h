// RequestKeys: the keys of one SlotIndex request (slot_index.h) resolved against its tables. Each
// key is validated and looked up in request order; the first wrong one is refused, named by its
// place in the request (key_refusals.h): invalid length, a duplicate, not in the index, or (for
// the present-key calls) a row in a state the call does not accept. The rows found are marked
// while a resolution runs (RowTable::Row::marked), which finds duplicates in O(1) and, for a
// store, keeps its present rows from being evicted by it; nothing stays marked after a refusal.
// The scratch vectors are kept across requests, so the hot paths do not allocate.
//
//   RETURN_IF_ERROR(request.ResolvePresent("PrepareLoad", keys, rows, table,
//       [](size_t i, uint32_t row, const RowTable::Row& r) { return absl::OkStatus(); }));
//   for (uint32_t row : request.rows()) ...;   // the keys' rows, in request order
//
// Thread-safety: none of its own; a plain value. SlotIndex holds it (in IndexState) ABSL_GUARDED_BY
// its mutex. Ownership: rows are numbers; the tables are borrowed for each call.
#ifndef KVOFFLOAD_DAEMON_INDEX_REQUEST_KEYS_H_
#define KVOFFLOAD_DAEMON_INDEX_REQUEST_KEYS_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "daemon/index/key_refusals.h"
#include "daemon/index/key_table.h"
#include "daemon/index/row_table.h"

namespace kvoffload::daemon {

class RequestKeys {
 public:
  // The rows of the present keys the last resolution found, in request order.
  const std::vector<uint32_t>& rows() const { return rows_; }
  // ResolveStore: the indices (into its `keys`) of the keys not in the index, in request order.
  const std::vector<uint32_t>& new_keys() const { return new_; }

  // Every key must be present, unique and accepted by `allowed(i, row, metadata)` (OK or the
  // error for key i). On success rows() holds their rows, unmarked; on error it is empty.
  template <typename AllowedFn>
  absl::Status ResolvePresent(absl::string_view operation, const std::vector<std::string>& keys,
                              RowTable& rows, const KeyTable& table, AllowedFn allowed);

  // PrepareStore's first pass: every key valid and unique; rows() gets the present keys' rows,
  // left marked (so that an eviction passes them over), new_keys() the others.
  // `protected_evictable` counts the marked rows that are evictable, `held_back` (when not null)
  // the same per member tag. On error nothing stays marked; on success call Unmark when done.
  absl::Status ResolveStore(absl::string_view operation, const std::vector<std::string>& keys,
                            RowTable& rows, const KeyTable& table, uint64_t* protected_evictable,
                            uint64_t* held_back);
  // Clears the marks of rows().
  void Unmark(RowTable& rows) const;

 private:
  // Validates key #i and finds its row (RowTable::kNil when absent); a row marked already is a
  // duplicate.
  static absl::Status Find(absl::string_view operation, size_t i, const std::string& key,
                           const RowTable& rows, const KeyTable& table, uint32_t* row);

  std::vector<uint32_t> rows_;
  std::vector<uint32_t> new_;
  absl::flat_hash_set<absl::string_view> seen_;  // ResolveStore: the new keys, for duplicates
};

template <typename AllowedFn>
absl::Status RequestKeys::ResolvePresent(absl::string_view operation,
                                         const std::vector<std::string>& keys, RowTable& rows,
                                         const KeyTable& table, AllowedFn allowed) {
  rows_.clear();
  absl::Status status;
  for (size_t i = 0; i < keys.size(); ++i) {
    uint32_t row = RowTable::kNil;
    status = Find(operation, i, keys[i], rows, table, &row);
    if (status.ok() && row == RowTable::kNil) status = UnknownKey(operation, i, keys[i]);
    if (!status.ok()) break;
    status = allowed(i, row, static_cast<const RowTable::Row&>(rows[row]));
    if (!status.ok()) break;
    rows[row].marked = true;
    rows_.push_back(row);
  }
  Unmark(rows);
  if (!status.ok()) rows_.clear();
  return status;
}

}  // namespace kvoffload::daemon

#endif  // KVOFFLOAD_DAEMON_INDEX_REQUEST_KEYS_H_
