// SlotIndex: the scheduler-side index of one engine region (DESIGN.md §4 "Index"). It maps keys
// (opaque byte strings, 1..256 bytes; in practice block hashes) to rows of the region, hands out
// rows for new keys, evicts by LRU, and pins rows while they are read, with vLLM offloading-manager
// semantics. It also guards the copy path (copies(), index_copies.h): the job engine checks and
// counts every copy against it, so a row with a copy in flight is never evicted, reset or handed
// to another key. A pool's index serves several engines (segments(), index_segments.h).
//
// (slot_index_test.cc TheHeadersUsageExampleRuns runs this.) The job engine names a job's rows
// as runs (copy_run.h: first row, count, the ticket of the handles the wire carried):
//
//   ASSIGN_OR_RETURN(std::unique_ptr<SlotIndex> index, SlotIndex::Create(geometry.num_rows));
//
//   // Scheduler: store the keys that are not there yet.
//   ASSIGN_OR_RETURN(SlotIndex::PrepareStoreResult store, index->PrepareStore(keys));
//   // ... job engine, once per store job (every worker's part is one job):
//   std::vector<RowRun> runs;
//   for (uint64_t row : store.rows) AppendRows(&runs, RowRun{row, 1, store.ticket});
//   RETURN_IF_ERROR(index->copies().Begin(CopyDirection::kStore, runs));
//   // ... copy GPU → rows; when the job has ended on this node (every copy really finished):
//   RETURN_IF_ERROR(index->copies().EndStore(runs, job_ok));
//   // ... scheduler, when the request's store is done (before or after the job ends):
//   RETURN_IF_ERROR(index->CompleteStore(store.keys, job_ok));
//
//   // Scheduler: load what is there (hit_keys: the keys Lookup calls kHit).
//   std::vector<SlotIndex::KeyState> states = index->Lookup(keys);
//   std::vector<uint32_t> tickets;
//   ASSIGN_OR_RETURN(std::vector<uint64_t> rows, index->PrepareLoad(hit_keys, &tickets));
//   std::vector<RowRun> load;  // the rows are pinned now
//   for (size_t i = 0; i < rows.size(); ++i) AppendRows(&load, RowRun{rows[i], 1, tickets[i]});
//   RETURN_IF_ERROR(index->copies().Begin(CopyDirection::kLoad, load));
//   // ... copy rows → GPU ...
//   RETURN_IF_ERROR(index->copies().End(load));
//   RETURN_IF_ERROR(index->CompleteLoad(hit_keys));  // unpinned
//
// Row life cycle:
//
//   FREE ──PrepareStore──▶ WRITING ──commit + written──▶ READY ──PrepareLoad──▶ READING
//    ▲ ▲                      │                             │ ▲                      │
//    │ └─CompleteStore(false)─┤                             │ └─CompleteLoad (last)──┘
//    │   or a committed row's │
//    │   store job failed     │
//    └──────────── eviction (PrepareStore), Reset ──────────┘
//
// A WRITING row becomes READY when two things have happened, in either order (DESIGN.md §7:
// vLLM 0.20 commits a preempted request's store before any worker submitted it):
//   - written: a store job on the row finished OK on this node (copies().EndStore(rows, true));
//   - commit:  the scheduler called CompleteStore(success=true) for its key.
// A commit that arrives first is recorded (commit_ledger.h) and the row stays WRITING (Lookup:
// HIT_PENDING, PrepareLoad: refused) until its store job finishes; if that job fails
// (EndStore(rows, false)), the committed key is dropped and the row freed: it never reads as a
// hit. A recorded commit whose store never arrives is dropped by copies().DropStaleCommits.
// CompleteStore(false) on a row that still has a copy in flight frees the key at once but
// quarantines the row: it is handed out again only after its copy count dropped to 0 (PegaFlow
// 403: a DMA that outlived its timeout wrote into memory already handed to someone else).
//
// Recency (LRU order) — only READY rows with no reader and no copy in flight can be evicted, least
// recently used first. A row becomes most recently used when
//   - it becomes READY (CompleteStore or EndStore, whichever came second),
//   - Touch names it (while it is READY and idle),
//   - its last reader leaves (CompleteLoad) or its last copy ends and it is READY again.
// Within one call the keys are applied back to front, so keys[0] ends up the most recently used
// (vLLM's touch order: a prefix's first block is the last to go, since losing it makes every block
// after it useless). Rows that become READY together are ordered by their PrepareStore order, not
// by the order of the call that completed them (vLLM hands CompleteStore a set): the key that came
// first in PrepareStore ends up the most recent, so a prefix is evicted from its tail.
//
// Row handles (row_handle.h): each PrepareStore takes a ticket (ticket_book.h) that its new rows
// keep while they hold their keys; the wire hands rows out as StoreHandle(ticket, row), and a copy
// naming another ticket than its row's is refused, so a stale part never touches another key's row.
//
// Every operation is all-or-nothing: when it returns an error, nothing changed (no key, no row
// state, no counter, no LRU position). When several keys are wrong, the first one in request
// order is reported.
//
// Cost: O(1) per key (one hash lookup); O(1) per row for the copy guards. Memory: one 64-byte
// cache line per row (row_table.h: keys up to kInlineKeyBytes inline, longer ones one heap block
// each), plus 5–10 bytes per row of key table, reserved up front (no rehash under the lock).
//
// Durability (row_journal.h): an optional RowJournal hears, under the index's lock, every row
// that becomes READY, loses its READY key or becomes most recently used, and every ticket
// reservation; Restore rebuilds an index from the READY rows such a journal recorded.
//
// Readiness (serve while pinning, readiness.h): an index may start with only rows [0, ready_rows)
// usable while the rest of its region is populated and registered; MarkRowsReady moves that
// watermark up. Rows above it are never handed out or read; restored READY rows above it are
// parked (Lookup misses them) and come back READY, least recent, when their rows become ready.
//
// Pools (daemon/pool/pool.h, index_segments.h): one index may serve several engines that share
// their rows, one segment per member; every row carries the member tag of the engine that stored
// it, and eviction is LRU over the pool with a per-member floor (segment_map.h). A private
// engine's index is a pool of one online segment and no floor.
//
// Thread-safety: a SlotIndex is safe for concurrent use; every method, and every method of its
// views copies() and segments(), takes one internal mutex for its whole duration. As Engine's, its
// state is in parts that share that one lock, each a plain value in its own file (index_state.h
// lists them), held ABSL_GUARDED_BY the mutex (so clang's -Wthread-safety proves every use holds
// it). Ownership: the index owns nothing but its own metadata; it knows rows only by number and
// never touches region memory. It owns its journal and its two views. Returned vectors and
// strings are the caller's.
#ifndef KVOFFLOAD_DAEMON_INDEX_SLOT_INDEX_H_
#define KVOFFLOAD_DAEMON_INDEX_SLOT_INDEX_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/limits.h"
#include "daemon/copy/copy_run.h"  // CopyDirection, RowRun
#include "daemon/index/index_copies.h"
#include "daemon/index/index_counts.h"
#include "daemon/index/index_segments.h"
#include "daemon/index/index_state.h"
#include "daemon/index/row_handle.h"  // the wire's row handles
#include "daemon/index/row_journal.h"
#include "daemon/index/row_table.h"
#include "daemon/index/segment_map.h"
#include "daemon/index/ticket_book.h"

namespace kvoffload::daemon {

class SlotIndexInvariants;  // testonly: //daemon/index/testing:slot_index_invariants

class SlotIndex {
 public:
  static constexpr size_t kMinKeyBytes = common::kMinKeyBytes;
  static constexpr size_t kMaxKeyBytes = common::kMaxKeyBytes;  // key lengths, in bytes
  // Keys up to this size live inside the row's metadata; longer ones on the heap.
  static constexpr size_t kInlineKeyBytes = RowTable::kInlineKeyBytes;
  // Rows are numbered with 32 bits internally (keeps the per-row metadata in one cache line).
  static constexpr uint64_t kMaxRows = (uint64_t{1} << 32) - 2;
  static constexpr uint32_t kMaxTicket = TicketBook::kMaxTicket;
  static constexpr uint32_t kMaxMembers = SegmentMap::kMaxMembers;

  using RowState = daemon::RowState;  // row_table.h: FREE, WRITING, READY, READING
  using Counts = IndexCounts;         // index_counts.h: a snapshot of the rows and counters
  using PoolShape = SegmentMap::Shape;
  using MemberCounts = SegmentMap::MemberCounts;
  using SegmentDrain = SegmentMap::Drain;

  enum class KeyState : uint8_t {
    kMiss,        // not in the index
    kHit,         // READY or READING: loadable now
    kHitPending,  // WRITING: a store is in flight
  };

  struct PrepareStoreResult {
    std::vector<std::string> keys;          // keys that were not present, in request order
    std::vector<uint64_t> rows;             // rows[i] now belongs to keys[i], in state WRITING
    std::vector<std::string> evicted_keys;  // keys dropped to make room, least recent first
    uint32_t ticket = 0;                    // the call's store ticket, held by every new row
  };

  // ---- Creation. ----------------------------------------------------------------------------

  // Creates an index of `num_rows` FREE rows. INVALID_ARGUMENT unless 1 <= num_rows <= kMaxRows.
  // `journal` (optional; the index owns it) hears every READY/FREE transition (row_journal.h),
  // under the index's lock.
  // `ready_rows` (clamped to num_rows): the rows usable from the start (see Readiness above).
  static absl::StatusOr<std::unique_ptr<SlotIndex>> Create(
      uint64_t num_rows, std::unique_ptr<RowJournal> journal = nullptr,
      uint64_t ready_rows = UINT64_MAX);

  struct RestoreResult {
    std::unique_ptr<SlotIndex> index;
    uint64_t rows_restored = 0;
    // Entries refused: row out of range, key of invalid length, ticket out of range, or a row or
    // key named twice (the most recent entry wins). Their rows, when in range and not restored,
    // are told OnFree.
    uint64_t rows_dropped = 0;
  };
  // Builds an index whose `rows` are READY (idle, evictable) in recency order (smaller seq less
  // recent), every other row FREE. Restored rows keep their tickets; new tickets start at
  // `next_ticket` (a value outside 1..kMaxTicket means 1). `journal` as for Create; it is not
  // told about the restored rows (it recorded them), only about dropped ones.
  // INVALID_ARGUMENT for num_rows as in Create.
  // `ready_rows` as for Create; restored rows at or above it are parked (not counted restored
  // until MarkRowsReady brings them back).
  static absl::StatusOr<RestoreResult> Restore(uint64_t num_rows, std::vector<RestoredRow> rows,
                                               uint32_t next_ticket,
                                               std::unique_ptr<RowJournal> journal,
                                               uint64_t ready_rows = UINT64_MAX);

  // A pool index of shape.num_segments × shape.segment_rows rows, every segment offline
  // (segments().BringOnline adds a member's rows). INVALID_ARGUMENT for a shape out of range (the
  // product must fit kMaxRows). No journal: a pool's rows do not outlive the daemon.
  static absl::StatusOr<std::unique_ptr<SlotIndex>> CreatePool(const PoolShape& shape);

  // Upper bound of the metadata an index of `num_rows` rows allocates when it is created and
  // keeps for its whole life (row table, hash table, the object), computed without allocating, so
  // the engine can charge it to the node cap before the index exists. Keys longer than
  // kInlineKeyBytes add their own size while stored (MemoryBytes() reports them). For num_rows
  // above kMaxRows the result is what such an index would need (saturating at UINT64_MAX).
  static uint64_t MetadataBytesFor(uint64_t num_rows);

  ~SlotIndex();
  SlotIndex(const SlotIndex&) = delete;
  SlotIndex& operator=(const SlotIndex&) = delete;

  uint64_t num_rows() const { return num_rows_; }

  // ---- Scheduler operations (DESIGN.md §4). -------------------------------------------------

  // One state per key, in request order. Never fails: a key of invalid length is a MISS.
  // Counts every key as a hit, a pending hit or a miss. Does not change recency.
  // `member` (pools): the caller's member tag, for the per-member counters; 0 otherwise.
  std::vector<KeyState> Lookup(const std::vector<std::string>& keys, uint32_t member = 0);

  // Gives every key that is not present a row in WRITING: a FREE row first, else the least
  // recently used evictable row (whose key is dropped and reported). Keys already present (any
  // state) are skipped and are never evicted by this call.
  //   INVALID_ARGUMENT    a key is empty or longer than kMaxKeyBytes, or appears twice
  //   RESOURCE_EXHAUSTED  fewer free + evictable rows than new keys (nothing is evicted)
  // `member` (pools): the new rows are tagged with it, and eviction keeps the other members'
  // floors (RESOURCE_EXHAUSTED counts only rows this member may evict).
  absl::StatusOr<PrepareStoreResult> PrepareStore(const std::vector<std::string>& keys,
                                                  uint32_t member = 0);

  // Ends the stores of `keys`. success: the commit; a written row becomes READY now, any other
  // is READY once its store job finishes OK (see the life cycle above). `now` stamps recorded
  // commits for DropStaleCommits. Failure: the keys are removed and their rows return to FREE
  // (quarantined while a copy is in flight on them).
  //   INVALID_ARGUMENT     a key of invalid length or a duplicate
  //   NOT_FOUND            a key is not in the index
  //   FAILED_PRECONDITION  a key is not WRITING; or success and a store job on its row failed
  //                        (copies().EndStore(rows, false)): half written rows never become
  //                        READY, only CompleteStore(false) ends them. A second commit is
  //                        accepted (no-op).
  absl::Status CompleteStore(const std::vector<std::string>& keys, bool success,
                             absl::Time now = absl::Now());

  // Pins `keys` for reading (READY/READING → READING, one more reader each) and returns their
  // rows in request order. Pinned rows are never evicted or reset.
  //   INVALID_ARGUMENT     a key of invalid length or a duplicate
  //   NOT_FOUND            a key is not in the index
  //   FAILED_PRECONDITION  a key is WRITING (not readable yet)
  //   RESOURCE_EXHAUSTED   a row has 2^32 − 1 readers already
  // `tickets`, when given, gets each row's ticket (for the wire's row handles).
  absl::StatusOr<std::vector<uint64_t>> PrepareLoad(const std::vector<std::string>& keys,
                                                    std::vector<uint32_t>* tickets = nullptr,
                                                    uint32_t member = 0);

  // Drops one reader from each key; a key whose last reader leaves is READY again.
  //   INVALID_ARGUMENT     a key of invalid length or a duplicate
  //   NOT_FOUND            a key is not in the index
  //   FAILED_PRECONDITION  a key is not READING
  // `member` (pools): the caller's tag; the pin dropped is its own (another member's when it
  // holds none on that row).
  absl::Status CompleteLoad(const std::vector<std::string>& keys, uint32_t member = 0);

  // Makes the present, READY and idle keys most recently used (keys[0] the most recent). Keys
  // not in the index, WRITING, or pinned are ignored, as vLLM's touch does.
  //   INVALID_ARGUMENT  a key of invalid length (nothing is touched)
  absl::Status Touch(const std::vector<std::string>& keys);

  // Drops every key whose row is READY with no copy in flight (what could be evicted now) and
  // returns how many. WRITING rows are kept: their store job still owns them and ends them with
  // CompleteStore; READING rows and rows with a copy in flight are kept too.
  uint64_t Reset();

  // ---- Readiness. ---------------------------------------------------------------------------

  // Rows [0, end) are usable from now on (their memory is populated and registered); `end` is
  // clamped to num_rows and a value at or below the watermark changes nothing. Parked rows in
  // the range come back READY (see Readiness). Returns the rows that came back.
  uint64_t MarkRowsReady(uint64_t end);
  // The readiness watermark: rows below it are usable.
  uint64_t ready_rows() const;

  // ---- The copy guards and the pool's segments: views under the same lock. -----------------

  // A tier below the region hears every key that becomes READY, after its bytes were written
  // and committed, with the index's lock held: it may only queue the key (tier_link.h) and must
  // not call the index. Set once, before the index is shared; an empty function: nobody.
  void SetReadyListener(std::function<void(absl::string_view key)> listener);

  IndexCopies& copies() { return copies_; }
  const IndexCopies& copies() const { return copies_; }
  IndexSegments& segments() { return segments_; }
  const IndexSegments& segments() const { return segments_; }

  // ---- Introspection. -----------------------------------------------------------------------

  Counts counts() const;
  // Bytes of metadata the index holds now (rows, hash table, key bytes).
  uint64_t MemoryBytes() const;

 private:
  // The invariant walk is for tests only: it is defined in the testonly target
  // //daemon/index/testing:slot_index_invariants, which reaches it as a friend.
  friend class SlotIndexInvariants;
  absl::Status CheckInvariants() const;

  SlotIndex(uint32_t num_rows, std::unique_ptr<RowJournal> journal, uint64_t ready_rows,
            const PoolShape& shape, bool pool);
  static absl::Status CheckNumRows(uint64_t num_rows);

  const uint32_t num_rows_;
  // May be null. Declared before the state so that it is destroyed after it.
  const std::unique_ptr<RowJournal> journal_;
  mutable absl::Mutex mu_;
  IndexState state_ ABSL_GUARDED_BY(mu_);
  IndexCopies copies_;      // lends state_ under mu_
  IndexSegments segments_;  // lends state_ under mu_
};

}  // namespace kvoffload::daemon

#endif  // KVOFFLOAD_DAEMON_INDEX_SLOT_INDEX_H_
