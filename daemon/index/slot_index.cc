#include "daemon/index/slot_index.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "absl/hash/hash.h"
#include "absl/memory/memory.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/check.h"
#include "common/status_macros.h"

namespace kvoffload::daemon {
namespace {

// Hex of a key for error messages; long keys are shortened to their first 32 bytes.
std::string KeyHex(absl::string_view key) {
  constexpr size_t kShown = 32;
  if (key.size() <= kShown) return absl::BytesToHexString(key);
  return absl::StrCat(absl::BytesToHexString(key.substr(0, kShown)), "...(", key.size(), " bytes)");
}

// Names key #`index` of a request: "key #3 (0a1b...)".
std::string KeyName(size_t index, absl::string_view key) {
  return absl::StrCat("key #", index, " (", KeyHex(key), ")");
}

absl::Status ValidateKey(absl::string_view operation, size_t index, absl::string_view key) {
  if (key.size() >= SlotIndex::kMinKeyBytes && key.size() <= SlotIndex::kMaxKeyBytes) {
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(
      absl::StrFormat("%s: key #%d has %d bytes; keys must have %d..%d bytes", operation, index,
                      key.size(), SlotIndex::kMinKeyBytes, SlotIndex::kMaxKeyBytes));
}

bool ValidKeySize(absl::string_view key) {
  return key.size() >= SlotIndex::kMinKeyBytes && key.size() <= SlotIndex::kMaxKeyBytes;
}

absl::Status DuplicateKey(absl::string_view operation, size_t index, absl::string_view key) {
  return absl::InvalidArgumentError(
      absl::StrCat(operation, ": ", KeyName(index, key), " appears more than once in the request"));
}

absl::Status UnknownKey(absl::string_view operation, size_t index, absl::string_view key) {
  return absl::NotFoundError(
      absl::StrCat(operation, ": ", KeyName(index, key), " is not in the index"));
}

}  // namespace

// ---- Hash functors ---------------------------------------------------------------------------

size_t SlotIndex::RowKeyHash::operator()(uint32_t row) const {
  return absl::Hash<absl::string_view>()(KeyOf(rows[row]));
}

size_t SlotIndex::RowKeyHash::operator()(absl::string_view key) const {
  return absl::Hash<absl::string_view>()(key);
}

bool SlotIndex::RowKeyEq::operator()(uint32_t a, absl::string_view b) const {
  return KeyOf(rows[a]) == b;
}

// ---- Construction ----------------------------------------------------------------------------

absl::StatusOr<std::unique_ptr<SlotIndex>> SlotIndex::Create(uint64_t num_rows) {
  if (num_rows == 0 || num_rows > kMaxRows) {
    return absl::InvalidArgumentError(
        absl::StrFormat("SlotIndex: num_rows is %d; it must be in [1, %d]", num_rows, kMaxRows));
  }
  return absl::WrapUnique(new SlotIndex(static_cast<uint32_t>(num_rows)));
}

uint64_t SlotIndex::MetadataBytesFor(uint64_t num_rows) {
  // Saturating: a request for 2^64 - 1 bytes must still get a number (and a refusal), not wrap.
  auto mul = [](uint64_t a, uint64_t b) {
    return (b != 0 && a > UINT64_MAX / b) ? UINT64_MAX : a * b;
  };
  auto add = [](uint64_t a, uint64_t b) { return a > UINT64_MAX - b ? UINT64_MAX : a + b; };
  // Row table: num_rows + 1 cache lines (the LRU sentinel), never resized.
  const uint64_t row_table = mul(add(num_rows, 1), sizeof(Row));
  // Hash table reserved for num_rows elements: absl grows to capacity 2^k - 1 holding at least
  // n + n/7 elements (max load 7/8); a slot is the element plus a control byte, plus one group
  // of cloned control bytes. Bounding the capacity by 2 × (n + n/7 + 1) covers the rounding.
  const uint64_t capacity = mul(add(add(num_rows, num_rows / 7), 1), 2);
  const uint64_t hash_table = add(mul(capacity, sizeof(uint32_t) + 1), 64);
  return add(add(row_table, hash_table), sizeof(SlotIndex));
}

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

void SlotIndex::MakeReady(std::vector<uint32_t>& rows) {
  // Youngest PrepareStore first, so the key prepared first is pushed last: the most recent.
  // Ages are taken modulo 2^32 from the next sequence number, so the counter may wrap.
  const uint32_t next = store_seq_;
  const Row* const table = rows_.data();  // read under mu_, which the sort runs under too
  std::sort(rows.begin(), rows.end(), [next, table](uint32_t a, uint32_t b) {
    return uint32_t(next - table[a].prev) < uint32_t(next - table[b].prev);
  });
  for (uint32_t row : rows) {
    Row& r = rows_[row];
    if (r.committed) committed_since_.erase(row);
    r.state = RowState::kReady;
    r.store_failed = r.written = r.committed = false;
    r.prev = kNil;
    if (r.copies == 0) LruPushMostRecent(row);
  }
  rows_writing_ -= rows.size();
  rows_ready_ += rows.size();
}

std::string SlotIndex::DropWritingKey(uint32_t row) {
  Row& r = rows_[row];
  std::string key(KeyOf(r));
  if (r.committed) committed_since_.erase(row);
  key_to_row_.erase(KeyOf(r));
  ReleaseKey(r);
  r.state = RowState::kFree;
  r.store_failed = r.written = r.committed = false;
  r.prev = kNil;
  r.ticket = 0;
  --rows_writing_;
  FreeOrQuarantine(row);
  return key;
}

SlotIndex::SlotIndex(uint32_t num_rows)
    : num_rows_(num_rows),
      sentinel_(num_rows),
      rows_(uint64_t{num_rows} + 1),
      key_to_row_(0, RowKeyHash{rows_.data()}, RowKeyEq{rows_.data()}) {
  // Every row is present from the start, so the table never grows (no rehash under the lock).
  key_to_row_.reserve(num_rows);
  Row& sentinel = rows_[sentinel_];
  sentinel.prev = sentinel_;
  sentinel.next = sentinel_;
  // Free list in ascending order: row 0 is handed out first.
  for (uint32_t r = num_rows; r-- > 0;) {
    rows_[r].next = free_head_;
    free_head_ = r;
  }
  rows_free_ = num_rows;
}

SlotIndex::~SlotIndex() {
  absl::MutexLock lock(&mu_);
  for (Row& row : rows_) ReleaseKey(row);
}

// ---- Lists and keys --------------------------------------------------------------------------

uint32_t SlotIndex::FindRow(absl::string_view key) const {
  auto it = key_to_row_.find(key);
  return it == key_to_row_.end() ? kNil : *it;
}

void SlotIndex::LruUnlink(uint32_t row) {
  Row& r = rows_[row];
  rows_[r.prev].next = r.next;
  rows_[r.next].prev = r.prev;
  r.prev = kNil;
  r.next = kNil;
  --rows_evictable_;
}

void SlotIndex::LruPushMostRecent(uint32_t row) {
  Row& r = rows_[row];
  Row& sentinel = rows_[sentinel_];
  r.prev = sentinel.prev;
  r.next = sentinel_;
  rows_[sentinel.prev].next = row;
  sentinel.prev = row;
  ++rows_evictable_;
}

void SlotIndex::FreePush(uint32_t row) {
  rows_[row].next = free_head_;
  free_head_ = row;
  ++rows_free_;
}

uint32_t SlotIndex::FreePop() {
  const uint32_t row = free_head_;
  KVO_CHECK(row != kNil, "the free list is empty although ", rows_free_,
            " rows are counted free");
  free_head_ = rows_[row].next;
  rows_[row].next = kNil;
  --rows_free_;
  return row;
}

void SlotIndex::SetKey(Row& row, absl::string_view key) {
  char* bytes;
  if (key.size() <= kInlineKeyBytes) {
    ReleaseKey(row);
    bytes = row.key.inline_bytes;
  } else {
    if (row.key_size != key.size()) {  // else: reuse the heap block of an equal-size key
      ReleaseKey(row);
      row.key.heap_bytes = new char[key.size()];
      key_heap_bytes_ += key.size();
    }
    bytes = row.key.heap_bytes;
  }
  std::memcpy(bytes, key.data(), key.size());
  row.key_size = static_cast<uint16_t>(key.size());
}

void SlotIndex::ReleaseKey(Row& row) {
  if (row.key_size > kInlineKeyBytes) {
    delete[] row.key.heap_bytes;
    key_heap_bytes_ -= row.key_size;
  }
  row.key_size = 0;
}

void SlotIndex::DropReadyKey(uint32_t row) {
  Row& r = rows_[row];
  KVO_CHECK(r.state == RowState::kReady && r.readers == 0 && r.copies == 0, "row ", row, " is ",
            RowStateName(r.state), " with ", r.readers, " readers and ", r.copies, " copies");
  key_to_row_.erase(KeyOf(r));
  r.state = RowState::kFree;
  r.ticket = 0;
  --rows_ready_;
}

void SlotIndex::FreeOrQuarantine(uint32_t row) {
  if (rows_[row].copies > 0) {
    ++rows_quarantined_;
  } else {
    FreePush(row);
  }
}

template <typename AllowedFn>
absl::Status SlotIndex::ResolvePresentKeys(absl::string_view operation,
                                           const std::vector<std::string>& keys,
                                           AllowedFn allowed) {
  scratch_rows_.clear();
  absl::Status status;
  for (size_t i = 0; i < keys.size(); ++i) {
    const std::string& key = keys[i];
    status = ValidateKey(operation, i, key);
    if (!status.ok()) break;
    const uint32_t row = FindRow(key);
    if (row == kNil) {
      status = UnknownKey(operation, i, key);
      break;
    }
    if (rows_[row].marked) {
      status = DuplicateKey(operation, i, key);
      break;
    }
    status = allowed(i, row);
    if (!status.ok()) break;
    rows_[row].marked = true;
    scratch_rows_.push_back(row);
  }
  for (uint32_t row : scratch_rows_) rows_[row].marked = false;
  if (!status.ok()) scratch_rows_.clear();
  return status;
}

// ---- Scheduler operations --------------------------------------------------------------------

std::vector<SlotIndex::KeyState> SlotIndex::Lookup(const std::vector<std::string>& keys) {
  std::vector<KeyState> states(keys.size(), KeyState::kMiss);
  absl::MutexLock lock(&mu_);
  for (size_t i = 0; i < keys.size(); ++i) {
    const uint32_t row = ValidKeySize(keys[i]) ? FindRow(keys[i]) : kNil;
    if (row == kNil) {
      ++misses_;
      continue;
    }
    if (rows_[row].state == RowState::kWriting) {
      states[i] = KeyState::kHitPending;
      ++hits_pending_;
    } else {
      states[i] = KeyState::kHit;
      ++hits_;
    }
  }
  return states;
}

absl::StatusOr<SlotIndex::PrepareStoreResult> SlotIndex::PrepareStore(
    const std::vector<std::string>& keys) {
  constexpr absl::string_view kOp = "PrepareStore";
  absl::MutexLock lock(&mu_);
  // Pass 1 (no changes): validate, split present from new keys, mark the present rows (they
  // must not be evicted by this call, and the mark finds duplicates among them).
  scratch_rows_.clear();
  scratch_new_.clear();
  uint64_t protected_evictable = 0;
  absl::Status status;
  for (size_t i = 0; i < keys.size(); ++i) {
    const std::string& key = keys[i];
    status = ValidateKey(kOp, i, key);
    if (!status.ok()) break;
    const uint32_t row = FindRow(key);
    if (row == kNil) {
      scratch_new_.push_back(static_cast<uint32_t>(i));
      continue;
    }
    Row& r = rows_[row];
    if (r.marked) {
      status = DuplicateKey(kOp, i, key);
      break;
    }
    r.marked = true;
    scratch_rows_.push_back(row);
    if (r.state == RowState::kReady && r.copies == 0) ++protected_evictable;
  }
  if (status.ok() && scratch_new_.size() > 1) {
    scratch_keys_.clear();
    for (uint32_t i : scratch_new_) {
      if (!scratch_keys_.insert(keys[i]).second) {
        status = DuplicateKey(kOp, i, keys[i]);
        break;
      }
    }
    scratch_keys_.clear();
  }
  const uint64_t needed = scratch_new_.size();
  const uint64_t available = rows_free_ + rows_evictable_ - protected_evictable;
  if (status.ok() && needed > available) {
    status = absl::ResourceExhaustedError(absl::StrFormat(
        "%s: %d new keys need rows but only %d can be found (%d free, %d evictable); of %d rows "
        "%d are writing, %d reading, %d ready but busy or part of this request, %d quarantined",
        kOp, needed, available, rows_free_, rows_evictable_ - protected_evictable, num_rows_,
        rows_writing_, rows_reading_, rows_ready_ - (rows_evictable_ - protected_evictable),
        rows_quarantined_));
  }
  if (!status.ok()) {
    for (uint32_t row : scratch_rows_) rows_[row].marked = false;
    return status;
  }

  // Pass 2: allocate. Cannot fail: `available` rows exist.
  PrepareStoreResult result;
  result.ticket = next_ticket_;
  next_ticket_ = next_ticket_ == kMaxTicket ? 1 : next_ticket_ + 1;
  result.keys.reserve(needed);
  result.rows.reserve(needed);
  result.evicted_keys.reserve(needed > rows_free_ ? needed - rows_free_ : 0);
  uint32_t cursor = rows_[sentinel_].next;  // least recently used
  for (uint32_t i : scratch_new_) {
    uint32_t row;
    if (free_head_ != kNil) {
      row = FreePop();
    } else {
      while (rows_[cursor].marked) cursor = rows_[cursor].next;
      KVO_CHECK(cursor != sentinel_, "ran out of evictable rows: ", rows_evictable_,
                " were counted");
      row = cursor;
      cursor = rows_[row].next;
      LruUnlink(row);
      result.evicted_keys.emplace_back(KeyOf(rows_[row]));
      DropReadyKey(row);
      ++evictions_;
    }
    Row& r = rows_[row];
    SetKey(r, keys[i]);
    r.state = RowState::kWriting;
    r.store_failed = r.written = r.committed = false;
    r.prev = store_seq_++;  // WRITING rows are on no list: prev holds the store order
    r.ticket = result.ticket;
    ++rows_writing_;
    key_to_row_.insert(row);
    result.keys.push_back(keys[i]);
    result.rows.push_back(row);
  }
  for (uint32_t row : scratch_rows_) rows_[row].marked = false;
  return result;
}

absl::Status SlotIndex::CompleteStore(const std::vector<std::string>& keys, bool success,
                                      absl::Time now) {
  constexpr absl::string_view kOp = "CompleteStore";
  absl::MutexLock lock(&mu_);
  absl::Status status =
      ResolvePresentKeys(kOp, keys, [&](size_t i, uint32_t row) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        const Row& r = rows_[row];
        if (r.state != RowState::kWriting) {
          return absl::FailedPreconditionError(absl::StrCat(
              kOp, ": ", KeyName(i, keys[i]), " is ", RowStateName(r.state), ", not WRITING"));
        }
        if (success && r.store_failed) {
          return absl::FailedPreconditionError(absl::StrCat(
              kOp, ": a store job on row ", row, " of ", KeyName(i, keys[i]),
              " failed, so the row was not fully written; complete it with success=false"));
        }
        return absl::OkStatus();
      });
  if (!status.ok()) return status;
  if (success) {
    // Written rows become READY now; the others when their store job finishes (or never).
    std::vector<uint32_t> ready;
    for (uint32_t row : scratch_rows_) {
      Row& r = rows_[row];
      if (r.written) {
        ready.push_back(row);
      } else if (!r.committed) {
        r.committed = true;
        committed_since_.emplace(row, now);
      }
    }
    MakeReady(ready);
  } else {
    for (uint32_t row : scratch_rows_) DropWritingKey(row);
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<uint64_t>> SlotIndex::PrepareLoad(const std::vector<std::string>& keys,
                                                             std::vector<uint32_t>* tickets) {
  constexpr absl::string_view kOp = "PrepareLoad";
  absl::MutexLock lock(&mu_);
  absl::Status status =
      ResolvePresentKeys(kOp, keys, [&](size_t i, uint32_t row) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        const Row& r = rows_[row];
        if (r.state != RowState::kReady && r.state != RowState::kReading) {
          return absl::FailedPreconditionError(absl::StrCat(kOp, ": ", KeyName(i, keys[i]), " is ",
                                                            RowStateName(r.state),
                                                            ", not READY or READING"));
        }
        if (r.readers == ~uint32_t{0}) {
          return absl::ResourceExhaustedError(
              absl::StrCat(kOp, ": ", KeyName(i, keys[i]), " has the maximum number of readers"));
        }
        return absl::OkStatus();
      });
  if (!status.ok()) return status;
  std::vector<uint64_t> rows(scratch_rows_.begin(), scratch_rows_.end());
  if (tickets != nullptr) {
    tickets->clear();
    for (uint32_t row : scratch_rows_) tickets->push_back(rows_[row].ticket);
  }
  for (uint32_t row : scratch_rows_) {
    Row& r = rows_[row];
    if (r.state == RowState::kReady) {
      if (r.copies == 0) LruUnlink(row);
      r.state = RowState::kReading;
      --rows_ready_;
      ++rows_reading_;
    }
    ++r.readers;
  }
  return rows;
}

absl::Status SlotIndex::CompleteLoad(const std::vector<std::string>& keys) {
  constexpr absl::string_view kOp = "CompleteLoad";
  absl::MutexLock lock(&mu_);
  absl::Status status =
      ResolvePresentKeys(kOp, keys, [&](size_t i, uint32_t row) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        const Row& r = rows_[row];
        if (r.state != RowState::kReading) {
          return absl::FailedPreconditionError(absl::StrCat(
              kOp, ": ", KeyName(i, keys[i]), " is ", RowStateName(r.state), ", not READING"));
        }
        return absl::OkStatus();
      });
  if (!status.ok()) return status;
  for (auto it = scratch_rows_.rbegin(); it != scratch_rows_.rend(); ++it) {
    Row& r = rows_[*it];
    if (--r.readers > 0) continue;
    r.state = RowState::kReady;
    --rows_reading_;
    ++rows_ready_;
    if (r.copies == 0) LruPushMostRecent(*it);
  }
  return absl::OkStatus();
}

absl::Status SlotIndex::Touch(const std::vector<std::string>& keys) {
  for (size_t i = 0; i < keys.size(); ++i) {
    absl::Status status = ValidateKey("Touch", i, keys[i]);
    if (!status.ok()) return status;
  }
  absl::MutexLock lock(&mu_);
  for (auto it = keys.rbegin(); it != keys.rend(); ++it) {
    const uint32_t row = FindRow(*it);
    if (row == kNil) continue;
    const Row& r = rows_[row];
    if (r.state != RowState::kReady || r.copies > 0) continue;
    LruUnlink(row);
    LruPushMostRecent(row);
  }
  return absl::OkStatus();
}

uint64_t SlotIndex::Reset() {
  absl::MutexLock lock(&mu_);
  uint64_t dropped = 0;
  while (rows_[sentinel_].next != sentinel_) {
    const uint32_t row = rows_[sentinel_].next;
    LruUnlink(row);
    DropReadyKey(row);
    ReleaseKey(rows_[row]);
    FreePush(row);
    ++dropped;
  }
  return dropped;
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

// ---- Introspection ---------------------------------------------------------------------------

SlotIndex::Counts SlotIndex::counts() const {
  absl::ReaderMutexLock lock(&mu_);
  Counts c;
  c.num_rows = num_rows_;
  c.rows_free = rows_free_;
  c.rows_quarantined = rows_quarantined_;
  c.rows_writing = rows_writing_;
  c.rows_ready = rows_ready_;
  c.rows_reading = rows_reading_;
  c.rows_evictable = rows_evictable_;
  c.copies_in_flight = copies_in_flight_;
  c.hits = hits_;
  c.hits_pending = hits_pending_;
  c.misses = misses_;
  c.evictions = evictions_;
  c.commits_pending = committed_since_.size();
  c.commits_dropped = commits_dropped_;
  return c;
}

uint64_t SlotIndex::MemoryBytes() const {
  absl::ReaderMutexLock lock(&mu_);
  // A flat_hash_set slot is the element plus one control byte.
  return rows_.size() * sizeof(Row) + key_to_row_.capacity() * (sizeof(uint32_t) + 1) +
         key_heap_bytes_;
}

absl::Status SlotIndex::TEST_CheckInvariants() const {
  absl::ReaderMutexLock lock(&mu_);
  auto fail = [](auto&&... args) {
    return absl::InternalError(absl::StrCat("SlotIndex invariant: ", args...));
  };
  std::vector<uint8_t> on_list(num_rows_, 0);  // 1: LRU list, 2: free list
  // LRU list: READY, no copies, links consistent.
  uint64_t lru_length = 0;
  for (uint32_t prev = sentinel_, row = rows_[sentinel_].next; row != sentinel_;
       prev = row, row = rows_[row].next) {
    if (row >= num_rows_) return fail("LRU list reaches row ", row);
    if (on_list[row]) return fail("row ", row, " twice on the lists");
    on_list[row] = 1;
    const Row& r = rows_[row];
    if (r.prev != prev) return fail("row ", row, " has a wrong LRU back link");
    if (r.state != RowState::kReady || r.copies != 0 || r.readers != 0) {
      return fail("row ", row, " is on the LRU list but ", RowStateName(r.state), " with ",
                  r.copies, " copies and ", r.readers, " readers");
    }
    ++lru_length;
  }
  if (rows_[rows_[sentinel_].prev].next != sentinel_) return fail("LRU tail link");
  if (lru_length != rows_evictable_) {
    return fail("LRU list has ", lru_length, " rows, counter says ", rows_evictable_);
  }
  uint64_t free_length = 0;
  for (uint32_t row = free_head_; row != kNil; row = rows_[row].next) {
    if (row >= num_rows_) return fail("free list reaches row ", row);
    if (on_list[row]) return fail("row ", row, " twice on the lists");
    on_list[row] = 2;
    if (rows_[row].state != RowState::kFree || rows_[row].copies != 0) {
      return fail("row ", row, " is on the free list but not FREE and idle");
    }
    ++free_length;
  }
  if (free_length != rows_free_) {
    return fail("free list has ", free_length, " rows, counter says ", rows_free_);
  }
  uint64_t quarantined = 0, writing = 0, ready = 0, reading = 0, copies = 0, heap_bytes = 0;
  uint64_t committed = 0;
  for (uint32_t row = 0; row < num_rows_; ++row) {
    const Row& r = rows_[row];
    copies += r.copies;
    if ((r.written || r.committed || r.store_failed) && r.state != RowState::kWriting) {
      return fail("row ", row, " is ", RowStateName(r.state), " with store flags set");
    }
    if (r.written && r.committed) return fail("WRITING row ", row, " written and committed");
    if (r.committed) {
      ++committed;
      if (!committed_since_.contains(row)) return fail("committed row ", row, " has no time");
    }
    if (r.key_size > kInlineKeyBytes) heap_bytes += r.key_size;
    if (r.marked) return fail("row ", row, " left marked");
    if (r.state == RowState::kFree) {
      if (r.readers != 0) return fail("FREE row ", row, " has readers");
      if (r.key_size != 0) return fail("FREE row ", row, " holds a key");
      if (r.ticket != 0) return fail("FREE row ", row, " holds ticket ", r.ticket);
      if (r.copies > 0) {
        ++quarantined;
        if (on_list[row]) return fail("quarantined row ", row, " is on a list");
      } else if (on_list[row] != 2) {
        return fail("idle FREE row ", row, " is not on the free list");
      }
      continue;
    }
    if (r.key_size == 0) return fail("row ", row, " in use without a key");
    if (r.ticket == 0 || r.ticket > kMaxTicket) return fail("row ", row, " has ticket ", r.ticket);
    if (FindRow(KeyOf(r)) != row) return fail("row ", row, "'s key does not map back to it");
    switch (r.state) {
      case RowState::kWriting:
        ++writing;
        if (r.readers != 0 || on_list[row]) return fail("WRITING row ", row, " read or listed");
        if (r.written && r.copies != 0) return fail("written row ", row, " still has copies");
        if (r.store_failed && r.committed) return fail("failed row ", row, " still committed");
        break;
      case RowState::kReady:
        ++ready;
        if (r.readers != 0) return fail("READY row ", row, " has readers");
        if ((r.copies == 0) != (on_list[row] == 1)) {
          return fail("READY row ", row, " LRU membership does not match its copies");
        }
        break;
      case RowState::kReading:
        ++reading;
        if (r.readers == 0 || on_list[row]) return fail("READING row ", row, " unpinned/listed");
        break;
      case RowState::kFree:
        break;
    }
  }
  if (quarantined != rows_quarantined_ || writing != rows_writing_ || ready != rows_ready_ ||
      reading != rows_reading_) {
    return fail("state counters differ: quarantined ", quarantined, "/", rows_quarantined_,
                " writing ", writing, "/", rows_writing_, " ready ", ready, "/", rows_ready_,
                " reading ", reading, "/", rows_reading_);
  }
  if (free_length + quarantined + writing + ready + reading != num_rows_) {
    return fail("rows do not add up to num_rows");
  }
  if (key_to_row_.size() != writing + ready + reading) {
    return fail("hash table holds ", key_to_row_.size(), " keys for ", writing + ready + reading,
                " rows in use");
  }
  if (copies != copies_in_flight_) {
    return fail("copies ", copies, " vs counter ", copies_in_flight_);
  }
  if (committed != committed_since_.size()) {
    return fail(committed, " committed rows, ", committed_since_.size(), " commit times");
  }
  if (heap_bytes != key_heap_bytes_) {
    return fail("key heap bytes ", heap_bytes, " vs counter ", key_heap_bytes_);
  }
  return absl::OkStatus();
}

absl::string_view SlotIndex::RowStateName(RowState state) {
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

absl::string_view SlotIndex::KeyStateName(KeyState state) {
  switch (state) {
    case KeyState::kMiss:
      return "MISS";
    case KeyState::kHit:
      return "HIT";
    case KeyState::kHitPending:
      return "HIT_PENDING";
  }
  return "UNKNOWN";
}

}  // namespace kvoffload::daemon
