// IndexState: everything a SlotIndex (slot_index.h) knows, as one plain value under the index's
// mutex — its parts, and the row transitions that keep them consistent with each other.
//
// The parts, each a plain value in its own file with its own test:
//   RowTable     (row_table.h)      rows, key bytes, the free and LRU lists, rows by state;
//   KeyTable     (key_table.h)      key → row;
//   SegmentMap   (segment_map.h)    a pool's segments, members' counters and pins, the floor;
//   TicketBook   (ticket_book.h)    store tickets, reserved from the journal in chunks;
//   CommitLedger (commit_ledger.h)  commits recorded before their store job finished;
//   Readiness    (readiness.h)      the readiness watermark and the restored rows parked above it.
// A transition below changes several of them at once (a row that goes READY is counted, listed,
// journaled and tagged to its member together); the scheduler operations (SlotIndex), the copy
// guards (IndexCopies) and the pool calls (IndexSegments) are written against these, so that the
// life cycle in slot_index.h has one implementation.
//
//   IndexState state(num_rows, journal, ready_rows, shape, /*pool=*/false);
//   const uint32_t row = state.TakeRow(member, &cursor, &evicted_keys);   // FREE or evicted
//   ... the row is WRITING; its store job and commit end, then:
//   std::vector<uint32_t> ready = {row};
//   state.MakeReady(ready);                                               // READY, most recent
//
// Thread-safety: none of its own; a plain value. SlotIndex holds it ABSL_GUARDED_BY its mutex and
// lends it to its views (IndexCopies, IndexSegments) under that same mutex, so clang's
// -Wthread-safety proves every use holds the lock. Ownership: it owns its parts; the journal is
// not owned (the index owns it and outlives its state).
#ifndef KVOFFLOAD_DAEMON_INDEX_INDEX_STATE_H_
#define KVOFFLOAD_DAEMON_INDEX_INDEX_STATE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "daemon/index/commit_ledger.h"
#include "daemon/index/key_refusals.h"
#include "daemon/index/key_table.h"
#include "daemon/index/readiness.h"
#include "daemon/index/row_journal.h"
#include "daemon/index/row_table.h"
#include "daemon/index/segment_map.h"
#include "daemon/index/ticket_book.h"

namespace kvoffload::daemon {

// A snapshot of an index (SlotIndex::Counts). Rows: free + quarantined + writing + ready +
// reading + not_ready + offline == num_rows; without offline, they add up to rows_online().
struct IndexCounts {
  uint64_t num_rows = 0;
  uint64_t rows_not_ready = 0;    // at or above the readiness watermark: memory not ready yet
  uint64_t rows_free = 0;         // FREE and allocatable
  uint64_t rows_quarantined = 0;  // FREE, waiting for a copy in flight to end
  uint64_t rows_writing = 0;
  uint64_t rows_ready = 0;  // includes READY rows that a copy still pins
  uint64_t rows_reading = 0;
  uint64_t rows_evictable = 0;    // READY with no copy in flight
  uint64_t copies_in_flight = 0;  // sum of per-row copy counts (begun − ended)
  uint64_t commits_pending = 0;   // WRITING rows committed before their store job finished
  // Cumulative, per key.
  uint64_t hits = 0;             // Lookup: READY or READING
  uint64_t hits_pending = 0;     // Lookup: WRITING
  uint64_t misses = 0;           // Lookup: absent
  uint64_t evictions = 0;        // keys evicted by PrepareStore (Reset is not counted)
  uint64_t commits_dropped = 0;  // recorded commits whose store failed or never came
  uint64_t rows_offline = 0;     // FREE rows of offline segments (pools)

  // The rows of the index's online segments, ready or not (a private index: num_rows).
  uint64_t rows_online() const { return num_rows - rows_offline; }
};

class IndexState {
 public:
  static constexpr uint32_t kNil = RowTable::kNil;

  // `num_rows` rows. A private index (pool false) lists its rows below `ready_rows` as FREE; a
  // pool's segments start offline, every row parked (IndexSegments brings them online).
  IndexState(uint32_t num_rows, RowJournal* journal, uint64_t ready_rows,
             const SegmentMap::Shape& shape, bool pool);
  IndexState(const IndexState&) = delete;
  IndexState& operator=(const IndexState&) = delete;

  // ---- The parts (used directly; the transitions below keep them consistent). ----
  RowTable rows;
  KeyTable keys;
  SegmentMap segments;
  TicketBook tickets;
  CommitLedger commits;
  Readiness readiness;
  RowJournal* const journal;  // may be null
  // Lookup's and PrepareStore's tallies (cumulative, per key).
  uint64_t hits = 0;
  uint64_t hits_pending = 0;
  uint64_t misses = 0;
  uint64_t evictions = 0;
  uint32_t store_seq = 0;  // next PrepareStore sequence number (wraps)
  // Scratch space reused across calls, so the hot paths do not allocate.
  std::vector<uint32_t> scratch_rows;
  std::vector<uint32_t> scratch_new;  // indices of new keys
  absl::flat_hash_set<absl::string_view> scratch_keys;

  // ---- Lists. ----
  // The LRU link, with the member's evictable count.
  void Unlink(uint32_t row);
  void LinkAfter(uint32_t row, uint32_t after);
  // An idle READY row becomes the most recently used (the journal hears OnTouch) — or, in an
  // offline segment, loses its key and is parked.
  void MakeMostRecent(uint32_t row);
  // A FREE, idle row goes to the free list — or, in an offline segment, is parked.
  void Free(uint32_t row);
  // A row with no key: free when idle, quarantined while copies are in flight.
  void FreeOrQuarantine(uint32_t row);
  // A FREE, idle row goes to no list (an offline or not yet ready segment's).
  void Park(uint32_t row);

  // ---- Row transitions (slot_index.h "Row life cycle"). ----
  // PrepareStore's first pass, changing nothing but marks: validates `keys`, puts the rows of the
  // present ones in scratch_rows, marked (so that TakeRow passes them over and duplicates show),
  // and the indices of the new ones in scratch_new. `protected_evictable` counts the marked
  // evictable rows, `held_back` (when not null) them per member. On error nothing stays marked;
  // on success the caller unmarks scratch_rows (UnmarkScratchRows) when it is done.
  absl::Status ResolveStoreKeys(absl::string_view operation, const std::vector<std::string>& keys,
                                uint64_t* protected_evictable, uint64_t* held_back);
  void UnmarkScratchRows();
  // RESOURCE_EXHAUSTED for a store of `needed` new keys that finds only `evictable` rows to
  // evict (`protected_evictable` of the evictable ones are part of the request): where every
  // row is, and when rows not ready yet will come.
  absl::Status NoRoom(absl::string_view operation, uint64_t needed, uint64_t evictable,
                      uint64_t protected_evictable) const;
  // A FREE row for a new key of `member`: the free list's first, else the least recent row at or
  // after `*cursor` on the LRU list that is not marked and that `member` may evict (its key is
  // dropped and appended to `evicted`). The caller counted that one exists.
  uint32_t TakeRow(uint32_t member, uint32_t* cursor, std::vector<std::string>* evicted);
  // FREE → WRITING: `row` (from TakeRow) holds `key` for `member`'s store of `ticket`.
  void AssignKey(uint32_t row, absl::string_view key, uint32_t ticket, uint32_t member);
  // READY or READING → READING: one more reader, pinned by `member`.
  void AddReader(uint32_t row, uint32_t member);
  // CompleteStore(success=true) of WRITING `rows`: a written row becomes READY now, any other
  // has its commit recorded at `now` (READY once its store job finishes OK).
  void Commit(const std::vector<uint32_t>& rows, absl::Time now);
  // WRITING → READY for `rows` (each WRITING), most recent last in PrepareStore order; reorders
  // `rows`.
  void MakeReady(std::vector<uint32_t>& rows);
  // Drops the key of READY, idle `row` (unlinked from the LRU list by the caller) from the key
  // table; the row keeps the key bytes for SetKey or ReleaseKey and is left FREE on no list.
  void DropReadyKey(uint32_t row);
  // Removes a WRITING row's key and frees (or quarantines) the row; returns the key.
  std::string DropWritingKey(uint32_t row);
  // One reader fewer on READING `row`; READY again (or parked) when it was the last.
  void DropReader(uint32_t row);

  // Validates that every key is present, unique and in an allowed state, filling scratch_rows
  // with their rows (request order). `allowed(i, row, metadata)` returns OK or the error for key i
  // (it is given the row's metadata, so that it needs no access of its own).
  template <typename AllowedFn>
  absl::Status ResolvePresentKeys(absl::string_view operation, const std::vector<std::string>& keys,
                                  AllowedFn allowed);

  // ---- Readiness and restore. ----
  // The readiness watermark moves up to `end`; parked rows it passes come back READY at the
  // least recent end (unless their key was stored again). Returns how many came back.
  uint64_t RaiseReadiness(uint64_t end);
  struct Adopted {
    uint64_t restored = 0;
    uint64_t dropped = 0;
  };
  // A new private state takes `rows` as READY rows (SlotIndex::Restore).
  Adopted AdoptRestored(std::vector<RestoredRow> rows);

  // ---- Introspection. ----
  // Rows not ready yet: the readiness watermark's, and a pool's online segments' not pinned yet.
  uint64_t NotReadyRows() const;
  IndexCounts Counts() const;
  // Upper bound of the row table and key table a state of `num_rows` rows allocates when it is
  // built and keeps, without keys longer than kInlineKeyBytes; saturating.
  static uint64_t MetadataBytesFor(uint64_t num_rows);
  // Bytes of metadata held now (rows, key table, key bytes).
  uint64_t MemoryBytes() const { return rows.MemoryBytes() + keys.MemoryBytes(); }

 private:
  // FREE → READY without a store: a restored row takes `key` and `ticket` (the caller lists it
  // and counts it).
  void AdoptKey(uint32_t row, absl::string_view key, uint32_t ticket);
};

template <typename AllowedFn>
absl::Status IndexState::ResolvePresentKeys(absl::string_view operation,
                                            const std::vector<std::string>& keys,
                                            AllowedFn allowed) {
  scratch_rows.clear();
  absl::Status status;
  for (size_t i = 0; i < keys.size(); ++i) {
    const std::string& key = keys[i];
    status = ValidateKey(operation, i, key);
    if (!status.ok()) break;
    const uint32_t row = this->keys.Find(key);
    if (row == kNil) {
      status = UnknownKey(operation, i, key);
      break;
    }
    if (rows[row].marked) {
      status = DuplicateKey(operation, i, key);
      break;
    }
    status = allowed(i, row, static_cast<const RowTable::Row&>(rows[row]));
    if (!status.ok()) break;
    rows[row].marked = true;
    scratch_rows.push_back(row);
  }
  for (uint32_t row : scratch_rows) rows[row].marked = false;
  if (!status.ok()) scratch_rows.clear();
  return status;
}

}  // namespace kvoffload::daemon

#endif  // KVOFFLOAD_DAEMON_INDEX_INDEX_STATE_H_
