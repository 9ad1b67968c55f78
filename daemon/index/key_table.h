// KeyTable: the key → row map of a SlotIndex (slot_index.h): a hash set of row numbers, hashed and
// compared by the keys the rows hold in their RowTable, looked up by absl::string_view. A key
// costs 5 bytes of table (a row number and a control byte) and no copy of its bytes.
//
//   KeyTable keys(rows, num_rows);        // reserved for every row: never rehashes
//   rows.SetKey(row, key);
//   keys.Insert(row);                     // the row's key must not be in the table
//   uint32_t found = keys.Find(key);      // RowTable::kNil when absent
//   keys.Erase(row);                      // before the row's key changes
//
// A row's key must not change while the row is in the table (erase it first).
//
// Thread-safety: none of its own; a plain value. SlotIndex holds it (in IndexState) ABSL_GUARDED_BY
// its mutex. Ownership: it points into the RowTable it was built on, which must outlive it and
// never moves its rows.
#ifndef KVOFFLOAD_DAEMON_INDEX_KEY_TABLE_H_
#define KVOFFLOAD_DAEMON_INDEX_KEY_TABLE_H_

#include <cstddef>
#include <cstdint>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/string_view.h"
#include "daemon/index/row_table.h"

namespace kvoffload::daemon {

class KeyTable {
 public:
  // Reserves room for `capacity` keys up front, so that no insert ever rehashes.
  KeyTable(const RowTable& rows, uint32_t capacity);

  // The row holding `key`; RowTable::kNil when absent.
  uint32_t Find(absl::string_view key) const {
    auto it = set_.find(key);
    return it == set_.end() ? RowTable::kNil : *it;
  }
  // Adds `row` under the key it holds now.
  void Insert(uint32_t row) { set_.insert(row); }
  // Removes `row` (looked up by the key it holds now); absent rows are ignored.
  void Erase(uint32_t row) { set_.erase(RowTable::KeyOf(rows_[row])); }

  size_t size() const { return set_.size(); }
  // A flat_hash_set slot is the element plus one control byte.
  uint64_t MemoryBytes() const { return set_.capacity() * (sizeof(uint32_t) + 1); }

 private:
  struct Hash {
    using is_transparent = void;
    const RowTable* rows;
    size_t operator()(uint32_t row) const;
    size_t operator()(absl::string_view key) const;
  };
  struct Eq {
    using is_transparent = void;
    const RowTable* rows;
    bool operator()(uint32_t a, uint32_t b) const { return a == b; }
    bool operator()(uint32_t a, absl::string_view b) const;
    bool operator()(absl::string_view a, uint32_t b) const { return (*this)(b, a); }
  };

  const RowTable& rows_;
  absl::flat_hash_set<uint32_t, Hash, Eq> set_;
};

}  // namespace kvoffload::daemon

#endif  // KVOFFLOAD_DAEMON_INDEX_KEY_TABLE_H_
