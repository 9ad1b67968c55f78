#include "daemon/index/slot_index.h"

#include <algorithm>
#include <cstring>
#include <random>
#include <utility>

#include "absl/hash/hash.h"
#include "absl/memory/memory.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/check.h"
#include "common/refusals.h"
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
  return common::KeyNotInIndex(operation, index, KeyName(index, key));
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

absl::Status SlotIndex::CheckNumRows(uint64_t num_rows) {
  if (num_rows == 0 || num_rows > kMaxRows) {
    return absl::InvalidArgumentError(
        absl::StrFormat("SlotIndex: num_rows is %d; it must be in [1, %d]", num_rows, kMaxRows));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<SlotIndex>> SlotIndex::Create(
    uint64_t num_rows, std::unique_ptr<RowJournal> journal, uint64_t ready_rows) {
  RETURN_IF_ERROR(CheckNumRows(num_rows));
  auto index = absl::WrapUnique(
      new SlotIndex(static_cast<uint32_t>(num_rows), std::move(journal), ready_rows));
  // A new index starts its tickets at a random point (review S5): a stale part from an index
  // that lived before this one (another daemon process, a region recreated) names tickets from
  // its own sequence, which this one is unlikely to be anywhere near.
  std::random_device random;
  const uint32_t first = 1 + static_cast<uint32_t>(random() % kMaxTicket);
  absl::MutexLock lock(&index->mu_);
  index->tickets_.StartAt(first);
  return index;
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
    ++segments_.member(r.member).counts.rows_held;
    // Published only now: the row's bytes are written and the scheduler committed them.
    if (journal_ != nullptr) journal_->OnReady(row, KeyOf(r), r.ticket);
    if (ready_listener_) ready_listener_(KeyOf(r));
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

SlotIndex::SlotIndex(uint32_t num_rows, std::unique_ptr<RowJournal> journal,
                     uint64_t ready_rows)
    : SlotIndex(num_rows, std::move(journal), ready_rows, PoolShape{num_rows, 1, 0},
                /*pool=*/false) {}

SlotIndex::SlotIndex(uint32_t num_rows, std::unique_ptr<RowJournal> journal,
                     uint64_t ready_rows, const PoolShape& shape, bool pool)
    : num_rows_(num_rows),
      sentinel_(num_rows),
      segment_rows_(shape.segment_rows),
      num_segments_(shape.num_segments),
      owned_journal_(std::move(journal)),
      journal_(owned_journal_.get()),
      rows_(uint64_t{num_rows} + 1),
      key_to_row_(0, RowKeyHash{rows_.data()}, RowKeyEq{rows_.data()}),
      segments_(shape, pool),
      tickets_(journal_) {
  // Every row is present from the start, so the table never grows (no rehash under the lock).
  key_to_row_.reserve(num_rows);
  Row& sentinel = rows_[sentinel_];
  sentinel.prev = sentinel_;
  sentinel.next = sentinel_;
  // Free list in ascending order: row 0 is handed out first. Only ready rows are on it.
  ready_end_ = static_cast<uint32_t>(std::min<uint64_t>(ready_rows, num_rows));
  for (uint32_t r = ready_end_; r-- > 0;) {
    rows_[r].next = free_head_;
    free_head_ = r;
  }
  rows_free_ = ready_end_;
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
  --segments_.member(r.member).evictable;
}

void SlotIndex::LruPushMostRecent(uint32_t row) {
  if (segments_.OfflineRow(row)) {  // its segment left the pool: the key goes, the row is parked
    DropReadyKey(row);
    ReleaseKey(rows_[row]);
    Park(row);
    return;
  }
  LruLink(row);
  if (journal_ != nullptr) journal_->OnTouch(row);
}

void SlotIndex::LruLink(uint32_t row) { LruLinkAfter(row, rows_[sentinel_].prev); }

void SlotIndex::LruLinkAfter(uint32_t row, uint32_t after) {
  Row& r = rows_[row];
  r.prev = after;
  r.next = rows_[after].next;
  rows_[r.next].prev = row;
  rows_[after].next = row;
  ++rows_evictable_;
  ++segments_.member(r.member).evictable;
}

void SlotIndex::FreePush(uint32_t row) {
  if (segments_.OfflineRow(row)) {
    Park(row);
    return;
  }
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
  // Unpublished before the row can be handed to another key or written again.
  if (journal_ != nullptr) journal_->OnFree(row);
  key_to_row_.erase(KeyOf(r));
  r.state = RowState::kFree;
  r.ticket = 0;
  --rows_ready_;
  --segments_.member(r.member).counts.rows_held;
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

std::vector<SlotIndex::KeyState> SlotIndex::Lookup(const std::vector<std::string>& keys,
                                                   uint32_t member) {
  KVO_CHECK(member < kMaxMembers, "member tag ", member, " out of range");
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
      MemberCounts& m = segments_.member(member).counts;
      ++m.hits;
      if (rows_[row].member != member) ++m.cross_member_hits;
    }
  }
  return states;
}

absl::StatusOr<SlotIndex::PrepareStoreResult> SlotIndex::PrepareStore(
    const std::vector<std::string>& keys, uint32_t member) {
  constexpr absl::string_view kOp = "PrepareStore";
  KVO_CHECK(member < kMaxMembers, "member tag ", member, " out of range");
  absl::MutexLock lock(&mu_);
  const bool floor = segments_.FloorActive();
  uint64_t held_back[kMaxMembers];  // floor only: marked evictable rows per member
  if (floor) std::fill(held_back, held_back + kMaxMembers, uint64_t{0});
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
    if (r.state == RowState::kReady && r.copies == 0) {
      ++protected_evictable;
      if (floor) ++held_back[r.member];
    }
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
  // The floor's count only matters when the store must evict.
  const uint64_t evictable = floor && scratch_new_.size() > rows_free_
                                 ? segments_.EvictableFor(member, held_back)
                                 : rows_evictable_ - protected_evictable;
  const uint64_t available = rows_free_ + evictable;
  if (status.ok() && needed > available) {
    const uint64_t not_ready = NotReadyRowsLocked();
    status = absl::ResourceExhaustedError(absl::StrFormat(
        "%s: %d new keys need rows but only %d can be found (%d free, %d evictable); of %d rows "
        "%d are writing, %d reading, %d ready but busy or part of this request, %d quarantined, "
        "%d not ready yet, %d offline, %d kept for other members' floors (%d rows each)%s",
        kOp, needed, available, rows_free_, evictable, num_rows_, rows_writing_, rows_reading_,
        rows_ready_ - (rows_evictable_ - protected_evictable), rows_quarantined_,
        not_ready, segments_.rows_parked() - segments_.NotReadyOnlineRows(),
        rows_evictable_ - protected_evictable - evictable, segments_.floor_rows(),
        not_ready == 0
            ? ""
            : "; rows not ready yet come online as the region is populated and registered "
              "(seconds per tens of GiB): retry when Stats' rows_not_ready is 0, or after a "
              "wait-until-ready call"));
  }
  if (!status.ok()) {
    for (uint32_t row : scratch_rows_) rows_[row].marked = false;
    return status;
  }

  // Pass 2: allocate. Cannot fail: `available` rows exist.
  PrepareStoreResult result;
  result.ticket = tickets_.Issue();
  result.keys.reserve(needed);
  result.rows.reserve(needed);
  result.evicted_keys.reserve(needed > rows_free_ ? needed - rows_free_ : 0);
  uint32_t cursor = rows_[sentinel_].next;  // least recently used
  for (uint32_t i : scratch_new_) {
    uint32_t row;
    if (free_head_ != kNil) {
      row = FreePop();
    } else {
      while (cursor != sentinel_ &&
             (rows_[cursor].marked || !segments_.MayEvict(member, rows_[cursor].member))) {
        if (!rows_[cursor].marked) ++segments_.member(member).counts.floor_skips;
        cursor = rows_[cursor].next;
      }
      KVO_CHECK(cursor != sentinel_, "ran out of evictable rows: ", evictable, " were counted");
      row = cursor;
      cursor = rows_[row].next;
      ++segments_.member(rows_[row].member).counts.evicted;
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
    r.member = member;
    ++rows_writing_;
    key_to_row_.insert(row);
    result.keys.push_back(keys[i]);
    result.rows.push_back(row);
  }
  for (uint32_t row : scratch_rows_) rows_[row].marked = false;
  segments_.member(member).counts.stores += needed;
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
                                                             std::vector<uint32_t>* tickets,
                                                             uint32_t member) {
  constexpr absl::string_view kOp = "PrepareLoad";
  KVO_CHECK(member < kMaxMembers, "member tag ", member, " out of range");
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
    segments_.Pin(member, row);
    if (r.member != member) ++segments_.member(member).counts.cross_member_loads;
  }
  segments_.member(member).counts.loads += scratch_rows_.size();
  return rows;
}

absl::Status SlotIndex::CompleteLoad(const std::vector<std::string>& keys, uint32_t member) {
  constexpr absl::string_view kOp = "CompleteLoad";
  KVO_CHECK(member < kMaxMembers, "member tag ", member, " out of range");
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
    segments_.Unpin(member, *it);
    DropReader(*it);
  }
  return absl::OkStatus();
}

void SlotIndex::DropReader(uint32_t row) {
  Row& r = rows_[row];
  if (--r.readers > 0) return;
  r.state = RowState::kReady;
  --rows_reading_;
  ++rows_ready_;
  if (r.copies == 0) LruPushMostRecent(row);
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

}  // namespace kvoffload::daemon
