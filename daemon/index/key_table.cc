#include "daemon/index/key_table.h"

#include "absl/hash/hash.h"

namespace kvoffload::daemon {

KeyTable::KeyTable(const RowTable& rows, uint32_t capacity)
    : rows_(rows), set_(0, Hash{&rows}, Eq{&rows}) {
  set_.reserve(capacity);
}

size_t KeyTable::Hash::operator()(uint32_t row) const {
  return absl::Hash<absl::string_view>()(RowTable::KeyOf((*rows)[row]));
}

size_t KeyTable::Hash::operator()(absl::string_view key) const {
  return absl::Hash<absl::string_view>()(key);
}

bool KeyTable::Eq::operator()(uint32_t a, absl::string_view b) const {
  return RowTable::KeyOf((*rows)[a]) == b;
}

}  // namespace kvoffload::daemon
