#include "daemon/index/row_table.h"

#include <cstring>

#include "common/check.h"

namespace kvoffload::daemon {

absl::string_view RowStateName(RowState state) {
  switch (state) {
    case RowState::kFree:
      return "FREE";
    case RowState::kWriting:
      return "WRITING";
    case RowState::kReady:
      return "READY";
    case RowState::kReading:
      return "READING";
  }
  return "UNKNOWN";
}

RowTable::RowTable(uint32_t num_rows) : num_rows_(num_rows), rows_(uint64_t{num_rows} + 1) {
  Row& sentinel = rows_[num_rows_];
  sentinel.prev = num_rows_;
  sentinel.next = num_rows_;
}

RowTable::~RowTable() {
  for (uint32_t row = 0; row < num_rows_; ++row) ReleaseKey(row);
}

void RowTable::SetKey(uint32_t row, absl::string_view key) {
  Row& r = rows_[row];
  char* bytes;
  if (key.size() <= kInlineKeyBytes) {
    ReleaseKey(row);
    bytes = r.key.inline_bytes;
  } else {
    if (r.key_size != key.size()) {  // else: reuse the heap block of an equal-size key
      ReleaseKey(row);
      r.key.heap_bytes = new char[key.size()];
      key_heap_bytes_ += key.size();
    }
    bytes = r.key.heap_bytes;
  }
  std::memcpy(bytes, key.data(), key.size());
  r.key_size = static_cast<uint16_t>(key.size());
}

void RowTable::ReleaseKey(uint32_t row) {
  Row& r = rows_[row];
  if (r.key_size > kInlineKeyBytes) {
    delete[] r.key.heap_bytes;
    key_heap_bytes_ -= r.key_size;
  }
  r.key_size = 0;
}

void RowTable::PushFree(uint32_t row) {
  rows_[row].next = free_head_;
  free_head_ = row;
  ++rows_free_;
}

uint32_t RowTable::PopFree() {
  const uint32_t row = free_head_;
  KVO_CHECK(row != kNil, "the free list is empty although ", rows_free_, " rows are counted free");
  free_head_ = rows_[row].next;
  rows_[row].next = kNil;
  --rows_free_;
  return row;
}

std::vector<uint32_t> RowTable::TakeFreeRows(uint32_t first, uint32_t end) {
  std::vector<uint32_t> taken;
  for (uint32_t* link = &free_head_; *link != kNil;) {
    const uint32_t row = *link;
    if (row >= first && row < end) {
      *link = rows_[row].next;
      rows_[row].next = kNil;
      --rows_free_;
      taken.push_back(row);
    } else {
      link = &rows_[row].next;
    }
  }
  return taken;
}

void RowTable::ClearFreeList() {
  for (uint32_t row = free_head_; row != kNil;) {
    const uint32_t next = rows_[row].next;
    rows_[row].next = kNil;
    row = next;
  }
  free_head_ = kNil;
  rows_free_ = 0;
}

void RowTable::LinkAfter(uint32_t row, uint32_t after) {
  Row& r = rows_[row];
  r.prev = after;
  r.next = rows_[after].next;
  rows_[r.next].prev = row;
  rows_[after].next = row;
  ++rows_evictable_;
}

void RowTable::Unlink(uint32_t row) {
  Row& r = rows_[row];
  rows_[r.prev].next = r.next;
  rows_[r.next].prev = r.prev;
  r.prev = kNil;
  r.next = kNil;
  --rows_evictable_;
}

}  // namespace kvoffload::daemon
