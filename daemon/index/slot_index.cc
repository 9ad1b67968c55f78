#include "daemon/index/slot_index.h"

#include <algorithm>
#include <random>
#include <utility>

#include "absl/memory/memory.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/check.h"
#include "common/status_macros.h"
#include "daemon/index/index_counts.h"
#include "daemon/index/key_refusals.h"

namespace kvoffload::daemon {

using Row = RowTable::Row;
constexpr uint32_t kNil = RowTable::kNil;

// ---- Creation --------------------------------------------------------------------------------

absl::Status SlotIndex::CheckNumRows(uint64_t num_rows) {
  if (num_rows == 0 || num_rows > kMaxRows) {
    return absl::InvalidArgumentError(
        absl::StrFormat("SlotIndex: num_rows is %d; it must be in [1, %d]", num_rows, kMaxRows));
  }
  return absl::OkStatus();
}

SlotIndex::SlotIndex(uint32_t num_rows, std::unique_ptr<RowJournal> journal, uint64_t ready_rows,
                     const PoolShape& shape, bool pool)
    : num_rows_(num_rows),
      journal_(std::move(journal)),
      state_(num_rows, journal_.get(), ready_rows, shape, pool),
      copies_(&mu_, &state_),
      segments_(&mu_, &state_, shape) {}

SlotIndex::~SlotIndex() = default;

absl::StatusOr<std::unique_ptr<SlotIndex>> SlotIndex::Create(
    uint64_t num_rows, std::unique_ptr<RowJournal> journal, uint64_t ready_rows) {
  RETURN_IF_ERROR(CheckNumRows(num_rows));
  const uint32_t rows = static_cast<uint32_t>(num_rows);
  auto index = absl::WrapUnique(
      new SlotIndex(rows, std::move(journal), ready_rows, PoolShape{rows, 1, 0}, /*pool=*/false));
  // A new index starts its tickets at a random point (review S5): a stale part from an index
  // that lived before this one (another daemon process, a region recreated) names tickets from
  // its own sequence, which this one is unlikely to be anywhere near.
  std::random_device random;
  const uint32_t first = 1 + static_cast<uint32_t>(random() % kMaxTicket);
  absl::MutexLock lock(&index->mu_);
  index->state_.tickets.StartAt(first);
  return index;
}

absl::StatusOr<SlotIndex::RestoreResult> SlotIndex::Restore(uint64_t num_rows,
                                                            std::vector<RestoredRow> rows,
                                                            uint32_t next_ticket,
                                                            std::unique_ptr<RowJournal> journal,
                                                            uint64_t ready_rows) {
  RETURN_IF_ERROR(CheckNumRows(num_rows));
  const uint32_t n = static_cast<uint32_t>(num_rows);
  RestoreResult result;
  result.index = absl::WrapUnique(
      new SlotIndex(n, std::move(journal), ready_rows, PoolShape{n, 1, 0}, /*pool=*/false));
  SlotIndex& index = *result.index;
  absl::MutexLock lock(&index.mu_);
  const IndexState::Adopted adopted = index.state_.AdoptRestored(std::move(rows));
  result.rows_restored = adopted.restored;
  result.rows_dropped = adopted.dropped;
  index.state_.tickets.StartAt(next_ticket);
  return result;
}

absl::StatusOr<std::unique_ptr<SlotIndex>> SlotIndex::CreatePool(const PoolShape& shape) {
  if (shape.segment_rows == 0 || shape.num_segments == 0 || shape.num_segments > kMaxMembers) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "SlotIndex pool: %d segments of %d rows; it takes 1..%d segments of at least one row",
        shape.num_segments, shape.segment_rows, kMaxMembers));
  }
  const uint64_t num_rows = uint64_t{shape.segment_rows} * shape.num_segments;
  RETURN_IF_ERROR(CheckNumRows(num_rows));
  // Every segment starts offline, its rows parked, until a member brings its region.
  return absl::WrapUnique(new SlotIndex(static_cast<uint32_t>(num_rows), /*journal=*/nullptr,
                                        /*ready_rows=*/num_rows, shape, /*pool=*/true));
}

uint64_t SlotIndex::MetadataBytesFor(uint64_t num_rows) {
  const uint64_t parts = IndexState::MetadataBytesFor(num_rows);  // saturating
  return parts > UINT64_MAX - sizeof(SlotIndex) ? UINT64_MAX : parts + sizeof(SlotIndex);
}

// ---- Scheduler operations --------------------------------------------------------------------

std::vector<SlotIndex::KeyState> SlotIndex::Lookup(const std::vector<std::string>& keys,
                                                   uint32_t member) {
  KVO_CHECK(member < kMaxMembers, "member tag ", member, " out of range");
  std::vector<KeyState> states(keys.size(), KeyState::kMiss);
  absl::MutexLock lock(&mu_);
  for (size_t i = 0; i < keys.size(); ++i) {
    const uint32_t row = ValidKeySize(keys[i]) ? state_.keys.Find(keys[i]) : kNil;
    if (row == kNil) {
      ++state_.misses;
      continue;
    }
    const Row& r = state_.rows[row];
    if (r.state == RowState::kWriting) {
      states[i] = KeyState::kHitPending;
      ++state_.hits_pending;
    } else {
      states[i] = KeyState::kHit;
      ++state_.hits;
      MemberCounts& m = state_.segments.member(member).counts;
      ++m.hits;
      if (r.member != member) ++m.cross_member_hits;
    }
  }
  return states;
}

absl::StatusOr<SlotIndex::PrepareStoreResult> SlotIndex::PrepareStore(
    const std::vector<std::string>& keys, uint32_t member) {
  constexpr absl::string_view kOp = "PrepareStore";
  KVO_CHECK(member < kMaxMembers, "member tag ", member, " out of range");
  absl::MutexLock lock(&mu_);
  IndexState& s = state_;
  const bool floor = s.segments.FloorActive();
  uint64_t held_back[kMaxMembers] = {};  // floor only: marked evictable rows per member
  uint64_t protected_evictable = 0;
  RETURN_IF_ERROR(s.request.ResolveStore(kOp, keys, s.rows, s.keys, &protected_evictable,
                                         floor ? held_back : nullptr));
  const uint64_t needed = s.request.new_keys().size();
  const uint64_t rows_free = s.rows.rows_free();
  // The floor's count only matters when the store must evict.
  const uint64_t evictable = floor && needed > rows_free
                                 ? s.segments.EvictableFor(member, held_back)
                                 : s.rows.rows_evictable() - protected_evictable;
  if (needed > rows_free + evictable) {
    s.request.Unmark(s.rows);
    return NoRoom(s, kOp, needed, evictable, protected_evictable);
  }
  // Pass 2: allocate. Cannot fail: enough rows exist.
  PrepareStoreResult result;
  result.ticket = s.tickets.Issue();
  result.keys.reserve(needed);
  result.rows.reserve(needed);
  result.evicted_keys.reserve(needed > rows_free ? needed - rows_free : 0);
  uint32_t cursor = s.rows.least_recent();
  for (uint32_t i : s.request.new_keys()) {
    const uint32_t row = s.TakeRow(member, &cursor, &result.evicted_keys);
    s.AssignKey(row, keys[i], result.ticket, member);
    result.keys.push_back(keys[i]);
    result.rows.push_back(row);
  }
  s.request.Unmark(s.rows);
  s.segments.member(member).counts.stores += needed;
  return result;
}

absl::Status SlotIndex::CompleteStore(const std::vector<std::string>& keys, bool success,
                                      absl::Time now) {
  constexpr absl::string_view kOp = "CompleteStore";
  absl::MutexLock lock(&mu_);
  IndexState& s = state_;
  absl::Status status = s.request.ResolvePresent(
      kOp, keys, s.rows, s.keys, [&](size_t i, uint32_t row, const Row& r) {
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
    s.Commit(s.request.rows(), now);
  } else {
    for (uint32_t row : s.request.rows()) s.DropWritingKey(row);
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<uint64_t>> SlotIndex::PrepareLoad(const std::vector<std::string>& keys,
                                                             std::vector<uint32_t>* tickets,
                                                             uint32_t member) {
  constexpr absl::string_view kOp = "PrepareLoad";
  KVO_CHECK(member < kMaxMembers, "member tag ", member, " out of range");
  absl::MutexLock lock(&mu_);
  IndexState& s = state_;
  absl::Status status = s.request.ResolvePresent(
      kOp, keys, s.rows, s.keys, [&](size_t i, uint32_t row, const Row& r) {
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
  std::vector<uint64_t> rows(s.request.rows().begin(), s.request.rows().end());
  if (tickets != nullptr) {
    tickets->clear();
    for (uint32_t row : s.request.rows()) tickets->push_back(s.rows[row].ticket);
  }
  for (uint32_t row : s.request.rows()) s.AddReader(row, member);
  s.segments.member(member).counts.loads += s.request.rows().size();
  return rows;
}

absl::Status SlotIndex::CompleteLoad(const std::vector<std::string>& keys, uint32_t member) {
  constexpr absl::string_view kOp = "CompleteLoad";
  KVO_CHECK(member < kMaxMembers, "member tag ", member, " out of range");
  absl::MutexLock lock(&mu_);
  IndexState& s = state_;
  absl::Status status = s.request.ResolvePresent(
      kOp, keys, s.rows, s.keys, [&](size_t i, uint32_t row, const Row& r) {
        if (r.state != RowState::kReading) {
          return absl::FailedPreconditionError(absl::StrCat(
              kOp, ": ", KeyName(i, keys[i]), " is ", RowStateName(r.state), ", not READING"));
        }
        return absl::OkStatus();
      });
  if (!status.ok()) return status;
  for (auto it = s.request.rows().rbegin(); it != s.request.rows().rend(); ++it) {
    s.segments.Unpin(member, *it);
    s.DropReader(*it);
  }
  return absl::OkStatus();
}

absl::Status SlotIndex::Touch(const std::vector<std::string>& keys) {
  for (size_t i = 0; i < keys.size(); ++i) {
    RETURN_IF_ERROR(ValidateKey("Touch", i, keys[i]));
  }
  absl::MutexLock lock(&mu_);
  for (auto it = keys.rbegin(); it != keys.rend(); ++it) {
    const uint32_t row = state_.keys.Find(*it);
    if (row == kNil) continue;
    const Row& r = state_.rows[row];
    if (r.state != RowState::kReady || r.copies > 0) continue;
    state_.Unlink(row);
    state_.MakeMostRecent(row);
  }
  return absl::OkStatus();
}

uint64_t SlotIndex::Reset() {
  absl::MutexLock lock(&mu_);
  uint64_t dropped = 0;
  for (uint32_t row; (row = state_.rows.least_recent()) != state_.rows.sentinel(); ++dropped) {
    state_.Unlink(row);
    state_.DropReadyKey(row);
    state_.rows.ReleaseKey(row);
    state_.Free(row);
  }
  return dropped;
}

// ---- Readiness and introspection -------------------------------------------------------------

uint64_t SlotIndex::MarkRowsReady(uint64_t end) {
  absl::MutexLock lock(&mu_);
  return state_.RaiseReadiness(end);
}

uint64_t SlotIndex::ready_rows() const {
  absl::ReaderMutexLock lock(&mu_);
  return state_.readiness.end();
}

SlotIndex::Counts SlotIndex::counts() const {
  absl::ReaderMutexLock lock(&mu_);
  return CountsOf(state_);
}

uint64_t SlotIndex::MemoryBytes() const {
  absl::ReaderMutexLock lock(&mu_);
  return state_.MemoryBytes();
}

void SlotIndex::SetReadyListener(std::function<void(absl::string_view key)> listener) {
  absl::MutexLock lock(&mu_);
  state_.ready_listener = std::move(listener);
}

}  // namespace kvoffload::daemon
