// SlotIndex: the scheduler-side index of one engine region (DESIGN.md §4 "Index"). It maps keys
// (opaque byte strings, 1..256 bytes; in practice block hashes) to rows of the region, hands out
// rows for new keys, evicts by LRU, and pins rows while they are read, with vLLM offloading-manager
// semantics. It also guards the copy path: the job engine checks and counts every copy against it,
// so a row with a copy in flight is never evicted, reset or handed to another key.
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
//   RETURN_IF_ERROR(index->BeginCopyRuns(CopyDirection::kStore, runs));
//   // ... copy GPU → rows; when the job has ended on this node (every copy really finished):
//   RETURN_IF_ERROR(index->EndStoreCopyRuns(runs, job_ok));
//   // ... scheduler, when the request's store is done (before or after the job ends):
//   RETURN_IF_ERROR(index->CompleteStore(store.keys, job_ok));
//
//   // Scheduler: load what is there (hit_keys: the keys Lookup calls kHit).
//   std::vector<SlotIndex::KeyState> states = index->Lookup(keys);
//   std::vector<uint32_t> tickets;
//   ASSIGN_OR_RETURN(std::vector<uint64_t> rows, index->PrepareLoad(hit_keys, &tickets));
//   std::vector<RowRun> load;  // the rows are pinned now
//   for (size_t i = 0; i < rows.size(); ++i) AppendRows(&load, RowRun{rows[i], 1, tickets[i]});
//   RETURN_IF_ERROR(index->BeginCopyRuns(CopyDirection::kLoad, load));
//   // ... copy rows → GPU ...
//   RETURN_IF_ERROR(index->EndCopyRuns(load));
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
//   - written: a store job on the row finished OK on this node (EndStoreCopyRuns(rows, true));
//   - commit:  the scheduler called CompleteStore(success=true) for its key.
// A commit that arrives first is recorded and the row stays WRITING (Lookup: HIT_PENDING,
// PrepareLoad: refused) until its store job finishes; if that job fails (EndStoreCopyRuns(rows,
// false)), the committed key is dropped and the row freed: it never reads as a hit. A recorded
// commit whose store never arrives is dropped by DropStaleCommits. CompleteStore(false) on a row
// that still has a copy in flight frees the key at once but quarantines the row: it is handed out
// again only after EndCopyRuns has dropped its copy count to 0 (PegaFlow 403: a DMA that
// outlived its timeout wrote into memory already handed to someone else).
//
// Recency (LRU order) — only READY rows with no reader and no copy in flight can be evicted, least
// recently used first. A row becomes most recently used when
//   - it becomes READY (CompleteStore or EndStoreCopyRuns, whichever came second),
//   - Touch names it (while it is READY and idle),
//   - its last reader leaves (CompleteLoad) or its last copy ends (EndCopyRuns) and it is READY
//     again.
// Within one call the keys are applied back to front, so keys[0] ends up the most recently used
// (vLLM's touch order: a prefix's first block is the last to go, since losing it makes every block
// after it useless). Rows that become READY together are ordered by their PrepareStore order, not
// by the order of the call that completed them (vLLM hands CompleteStore a set): the key that came
// first in PrepareStore ends up the most recent, so a prefix is evicted from its tail.
//
// Row handles: each PrepareStore call takes a ticket (31 bits, never 0; a new index starts at a
// random one, a restored one where its journal left off) that its new rows keep as
// long as they hold that key; the wire hands rows out (PrepareStore and PrepareLoad) as
// StoreHandle(ticket, row). A copy that names a ticket is refused when its row holds another
// one — the row was freed and handed to another key since the job was planned (a part that came
// late, or again after a lost session) — so a stale part can never write or read another key's
// row.
//
// One store job per row: a store copy is refused on a row that already has a store copy in flight
// or was written, so a row's written bytes are those of exactly one job.
//
// Every operation is all-or-nothing: when it returns an error, nothing changed (no key, no row
// state, no counter, no LRU position). When several keys are wrong, the first one in request
// order is reported.
//
// Cost: O(1) per key (one hash lookup); O(1) per row for the copy guards. Memory: one 64-byte
// cache line per row holding keys of up to kInlineKeyBytes (a 32-byte block hash fits), plus 5–10
// bytes per row of hash table (reserved up front, so no rehash ever happens under the lock).
// Longer keys take one heap block each, of exactly their size; nothing else is allocated per row.
//
// Durability: an optional RowJournal hears, under the index's lock, when a row becomes
// READY (OnReady, after its bytes are written and committed), loses its READY key (OnFree, before
// the row can be handed to another key), becomes most recently used (OnTouch), and when tickets
// are reserved; Restore rebuilds an index from the READY rows such a journal recorded.
//
// Readiness (serve while pinning): an index may start with only rows [0, ready_rows)
// usable, the rest of its region still being populated and registered. Rows at or above that
// watermark are never handed out (not on the free list) and never readable; MarkRowsReady moves
// it up as the region's chunks become ready. Restored READY rows above it are parked, out of the
// key table, so Lookup misses them (a miss costs the engine a recompute; waiting for a chunk
// could stall its step for seconds), and come back READY, at the least recent end of the LRU
// list, when their rows become ready — unless their key was stored again meanwhile (then the
// newer row wins and the parked one is freed).
//
// Pools (daemon/pool/pool.h): one index may serve several engines that share their
// rows. Its rows are `num_segments` segments of `segment_rows` rows each, row r in segment
// r / segment_rows (each segment is one member's region). A segment is online (its rows are
// handed out) or offline (its FREE rows are parked: on no list, never handed out). Taking a
// segment offline drops its idle READY keys at once; its rows still in use (WRITING, READING, a
// copy in flight) are parked as each becomes idle, and their keys are dropped then (a row of an
// offline segment never becomes READY again). Every row carries the member tag of the engine
// whose PrepareStore gave it its key (the member = the caller's segment number). Eviction is
// LRU over the whole pool, with a floor: a member whose segment is online keeps at least
// `member_floor_rows` of the READY/READING rows it stored against other members' stores (a
// member may always evict its own). A private engine's index is a pool of one online segment
// and no floor; it behaves exactly as before.
//
// Thread-safety: a SlotIndex is safe for concurrent use; every method takes one internal mutex
// for its whole duration. As Engine's, its state is in parts that share that one lock, each a
// plain value in its own file, held ABSL_GUARDED_BY the mutex (so clang's -Wthread-safety proves
// every use holds it): SegmentMap (segment_map.h: segments, members' counters and pins, the
// floor) and TicketBook (ticket_book.h: store tickets and their reservation). The index composes
// them with the rows, keys and lists. Ownership: the index owns nothing but its own metadata; it
// knows rows only by number and never touches region memory. It owns its journal. Returned
// vectors and strings are the caller's.
#ifndef KVOFFLOAD_DAEMON_INDEX_SLOT_INDEX_H_
#define KVOFFLOAD_DAEMON_INDEX_SLOT_INDEX_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/limits.h"
#include "daemon/copy/copy_run.h"  // CopyDirection, RowRun
#include "daemon/index/row_journal.h"
#include "daemon/index/segment_map.h"
#include "daemon/index/ticket_book.h"

namespace kvoffload::daemon {

class SlotIndexInvariants;  // testonly: //daemon/index/testing:slot_index_invariants
class SlotIndexTestPeer;    // testonly: //daemon/index/testing:row_lists

class SlotIndex {
 public:
  // Key length limits, in bytes.
  static constexpr size_t kMinKeyBytes = common::kMinKeyBytes;
  static constexpr size_t kMaxKeyBytes = common::kMaxKeyBytes;
  // Keys up to this size live inside the row's metadata; longer ones on the heap.
  static constexpr size_t kInlineKeyBytes = 40;
  // Rows are numbered with 32 bits internally (keeps the per-row metadata in one cache line).
  static constexpr uint64_t kMaxRows = (uint64_t{1} << 32) - 2;

  enum class RowState : uint8_t {
    kFree,     // no key; allocatable unless quarantined (a copy is still in flight)
    kWriting,  // key assigned, store in progress; not readable, not evictable
    kReady,    // readable; evictable while no copy is in flight
    kReading,  // readable; pinned by one or more PrepareLoad, never evicted
  };

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

  // A row as the wire hands it out for a store: ticket << 32 | row (below 2^63, so it fits a
  // signed 64-bit block id). A handle with ticket 0 is a plain row: its ticket is not checked.
  static uint64_t StoreHandle(uint32_t ticket, uint64_t row) {
    return (uint64_t{ticket} << 32) | row;
  }
  static uint64_t RowOfHandle(uint64_t handle) { return handle & 0xffffffffu; }
  static uint32_t TicketOfHandle(uint64_t handle) { return static_cast<uint32_t>(handle >> 32); }
  static constexpr uint32_t kMaxTicket = TicketBook::kMaxTicket;

  // A snapshot of the index. Rows: free + quarantined + writing + ready + reading + not_ready +
  // offline == num_rows; without offline, they add up to rows_online().
  struct Counts {
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

  // ---- Pools (see the file comment). -----------------------------------------------------
  static constexpr uint32_t kMaxMembers = SegmentMap::kMaxMembers;
  using PoolShape = SegmentMap::Shape;
  using MemberCounts = SegmentMap::MemberCounts;

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

  // Rows [0, end) are usable from now on (their memory is populated and registered); `end` is
  // clamped to num_rows and a value at or below the watermark changes nothing. Parked rows in
  // the range come back READY (see Readiness). Returns the rows that came back.
  uint64_t MarkRowsReady(uint64_t end);
  // The readiness watermark: rows below it are usable.
  uint64_t ready_rows() const;

  // Upper bound of the metadata an index of `num_rows` rows allocates when it is created and
  // keeps for its whole life (row table, hash table, the object), computed without allocating, so
  // the engine can charge it to the node cap before the index exists. Keys longer than
  // kInlineKeyBytes add their own size while stored (MemoryBytes() reports them). For num_rows
  // above kMaxRows the result is what such an index would need (saturating at UINT64_MAX).
  static uint64_t MetadataBytesFor(uint64_t num_rows);

  // A pool index of shape.num_segments × shape.segment_rows rows, every segment offline
  // (BringSegmentOnline adds a member's rows). INVALID_ARGUMENT for a shape out of range (the
  // product must fit kMaxRows). No journal: a pool's rows do not outlive the daemon.
  static absl::StatusOr<std::unique_ptr<SlotIndex>> CreatePool(const PoolShape& shape);

  // Makes an offline, fully parked segment online, its first `ready_rows` rows FREE and
  // allocatable (the rest wait for MarkSegmentRowsReady: the member's region is still being
  // pinned, Readiness above); resets the member's cumulative counters (a new member takes the
  // slot). OUT_OF_RANGE for a segment past the shape, FAILED_PRECONDITION when it is online or
  // still has rows in use.
  absl::Status BringSegmentOnline(uint32_t segment, uint64_t ready_rows = UINT64_MAX);
  // An online segment's rows [0, ready_rows) are usable from now on (a lower value, or an
  // offline segment, changes nothing).
  void MarkSegmentRowsReady(uint32_t segment, uint64_t ready_rows);
  using SegmentDrain = SegmentMap::Drain;
  // Takes an online segment offline (see the file comment) and ends what its member (the tag
  // equal to the segment) left unfinished, wherever in the pool: its WRITING keys as
  // CompleteStore(false) would (a row quarantined while a copy is in flight) — except a
  // committed key whose store job is in flight, which that job ends (READY, or dropped when it
  // fails) — and its PrepareLoad pins as CompleteLoad would. Nobody else will end them, and
  // until they end no segment they touch can drain. OUT_OF_RANGE / FAILED_PRECONDITION (already
  // offline). O(num_rows + free rows).
  absl::StatusOr<SegmentDrain> TakeSegmentOffline(uint32_t segment);
  // True when every row of an offline segment is parked: no copy can touch its memory again.
  bool SegmentDrained(uint32_t segment) const;
  MemberCounts member_counts(uint32_t member) const;
  uint32_t segment_rows() const { return segment_rows_; }
  uint32_t num_segments() const { return num_segments_; }

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
  //                        (EndStoreCopyRuns(rows, false)): half written rows never become
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

  // ---- Copy-path guards (job engine). --------------------------------------------------------

  // Rows are runs (copy_run.h): a job's rows stay runs, O(rows) here and nothing allocated per
  // row. Tests and tools with plain row lists use daemon/index/testing/row_lists.h.

  // Checks that every row may be copied in `direction`: kStore needs WRITING rows with no store
  // copy in flight and not written yet, kLoad READING rows; each holding its run's ticket (a 0
  // ticket is not checked).
  //   OUT_OF_RANGE         a row >= num_rows
  //   FAILED_PRECONDITION  a row is in another state, has a store in flight or done, or holds
  //                        another ticket (the message names row and state)
  absl::Status CheckRowRuns(CopyDirection direction, const std::vector<RowRun>& rows) const;

  // CheckRowRuns and, in the same critical section, one more copy in flight on every row (a row
  // may appear more than once). Call before the copy touches the region; every successful
  // BeginCopyRuns must be matched by EndCopyRuns with the same rows once the copy has really
  // finished or is known never to touch the region again — not when it timed out. Same errors as
  // CheckRowRuns.
  absl::Status BeginCopyRuns(CopyDirection direction, const std::vector<RowRun>& rows);

  // A tier below the region (daemon/tier/tier_link.h) copies the row of `key` out: one more
  // copy in flight on its READY or READING row, which is not evicted, reset or parked until
  // EndCopyRuns({run}) ends it (then it is the most recently used, as after a load). The row
  // keeps its key meanwhile; a store can never write it (it is not WRITING).
  //   INVALID_ARGUMENT     a key of invalid length
  //   NOT_FOUND            the key is not in the index
  //   FAILED_PRECONDITION  the key is WRITING (not readable yet)
  absl::StatusOr<RowRun> BeginSpill(absl::string_view key);

  // A tier below the region hears every key that becomes READY, after its bytes were written
  // and committed, with the index's lock held: it may only queue the key (tier_link.h) and must
  // not call the index. Set once, before the index is shared; an empty function: nobody.
  using ReadyListener = std::function<void(absl::string_view key)>;
  void SetReadyListener(ReadyListener listener);

  // Drops the keys of rows whose commit was recorded before `cutoff` while no store job has
  // written them and none is in flight (the store was never submitted: a worker died, or an
  // engine committed keys it never stored). Their rows return to FREE. Returns how many.
  uint64_t DropStaleCommits(absl::Time cutoff);

  // One copy fewer on every row (tickets are not looked at). A row whose count drops to 0
  // becomes allocatable again when it was quarantined, and evictable (most recently used) when it
  // is READY.
  //   OUT_OF_RANGE         a row >= num_rows
  //   FAILED_PRECONDITION  more EndCopyRuns than BeginCopyRuns on a row (a bug in the caller)
  absl::Status EndCopyRuns(const std::vector<RowRun>& rows);

  // The end of a store job on this node, in one critical section: EndCopyRuns(rows), then, when
  // `ok`, every row still WRITING is written (and one whose commit was recorded becomes READY);
  // when not (a copy failed, a worker left, the job timed out), every row still WRITING is
  // marked failed: CompleteStore(success=true) of its key is refused with FAILED_PRECONDITION,
  // so the scheduler can never publish rows that were not fully written, and a row whose commit
  // was already recorded loses its key and is freed (quarantined while copies are in flight).
  // Rows in any other state are left alone (their store already ended); the mark is cleared when
  // the row leaves WRITING. No other call can see the rows between the two steps (a row freed in
  // between could be handed to another key). Same errors as EndCopyRuns; on error nothing
  // changed.
  absl::Status EndStoreCopyRuns(const std::vector<RowRun>& rows, bool ok);

  // ---- Introspection. -----------------------------------------------------------------------

  Counts counts() const;

  // Bytes of metadata the index holds now (rows, hash table, key bytes).
  uint64_t MemoryBytes() const;

  static absl::string_view RowStateName(RowState state);
  static absl::string_view KeyStateName(KeyState state);

 private:
  // The invariant walk is for tests only: it is defined in the testonly target
  // //daemon/index/testing:slot_index_invariants, which reaches it as a friend.
  friend class SlotIndexInvariants;
  absl::Status CheckInvariants() const;
  // The list form of a failed store without a copy's end, for tests: //daemon/index/testing:
  // row_lists reaches MarkStoreFailedLocked as a friend.
  friend class SlotIndexTestPeer;

  static constexpr uint32_t kNil = ~uint32_t{0};

  // Per-row metadata: one cache line. A row is on exactly one of: the free list (FREE, no
  // copies), the LRU list (READY, no copies), or neither (WRITING, READING, READY with copies,
  // quarantined). FREE rows hold no key (key_size == 0).
  // WRITING rows are on no list, so `prev` holds their PrepareStore sequence number then.
  struct alignas(64) Row {
    union {
      char inline_bytes[kInlineKeyBytes];  // key_size <= kInlineKeyBytes
      char* heap_bytes;                    // key_size > kInlineKeyBytes: new[]-ed, owned
    } key;
    uint32_t prev = kNil;   // LRU list (doubly linked through the sentinel); WRITING: store seq
    uint32_t next = kNil;   // LRU list, or the free list (singly linked)
    uint32_t readers = 0;   // PrepareLoad − CompleteLoad
    uint32_t copies = 0;    // BeginCopyRuns − EndCopyRuns
    uint16_t key_size = 0;  // 0: no key
    RowState state = RowState::kFree;
    // Bit-fields take no initializers in C++17; rows_ is value-initialized, so they start false.
    bool marked : 1;        // scratch: "seen in this request" (duplicates, protection)
    bool store_failed : 1;  // WRITING only: a store job on this row failed
    bool written : 1;       // WRITING only: a store job on this row finished OK
    bool committed : 1;     // WRITING only: CompleteStore(true) came before `written`
    uint8_t member : 4;     // the member whose PrepareStore gave the row its key (pools)
    // The ticket of the PrepareStore that gave the row its key (kept while it holds the key;
    // 0 when FREE): the wire names the row as StoreHandle(ticket, row).
    uint32_t ticket = 0;
  };
  static_assert(sizeof(Row) == 64, "a row's metadata is one cache line");

  // Hash set of row numbers keyed by the rows' keys, with lookup by absl::string_view.
  struct RowKeyHash {
    using is_transparent = void;
    const Row* rows;
    size_t operator()(uint32_t row) const;
    size_t operator()(absl::string_view key) const;
  };
  struct RowKeyEq {
    using is_transparent = void;
    const Row* rows;
    bool operator()(uint32_t a, uint32_t b) const { return a == b; }
    bool operator()(uint32_t a, absl::string_view b) const;
    bool operator()(absl::string_view a, uint32_t b) const { return (*this)(b, a); }
  };
  using KeySet = absl::flat_hash_set<uint32_t, RowKeyHash, RowKeyEq>;

  // Private: one segment.
  SlotIndex(uint32_t num_rows, std::unique_ptr<RowJournal> journal, uint64_t ready_rows);
  SlotIndex(uint32_t num_rows, std::unique_ptr<RowJournal> journal, uint64_t ready_rows,
            const PoolShape& shape, bool pool);
  // Rows not ready yet: the readiness watermark's, and a pool's online segments' still being
  // pinned (which a pool parks).
  uint64_t NotReadyRowsLocked() const ABSL_SHARED_LOCKS_REQUIRED(mu_);
  // A FREE, idle row of an offline segment goes to no list.
  void Park(uint32_t row) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Segment `segment`'s rows [0, ready_rows) go to the free list (SegmentMap::MarkReady).
  void MarkSegmentReadyLocked(uint32_t segment, uint64_t ready_rows)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  static absl::Status CheckNumRows(uint64_t num_rows);

  static absl::string_view KeyOf(const Row& row) {
    return absl::string_view(
        row.key_size <= kInlineKeyBytes ? row.key.inline_bytes : row.key.heap_bytes, row.key_size);
  }

  // Finds `key`; kNil when absent.
  uint32_t FindRow(absl::string_view key) const ABSL_SHARED_LOCKS_REQUIRED(mu_);

  // Validates that every key is present, unique and in an allowed state, filling scratch_rows_
  // with their rows (request order). `allowed(row)` returns OK or the error for that key.
  template <typename AllowedFn>
  absl::Status ResolvePresentKeys(absl::string_view operation, const std::vector<std::string>& keys,
                                  AllowedFn allowed) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  absl::Status CheckRowsLocked(CopyDirection direction, const std::vector<RowRun>& rows) const
      ABSL_SHARED_LOCKS_REQUIRED(mu_);

  void LruUnlink(uint32_t row) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Links `row` as the most recently used and tells the journal (OnTouch).
  void LruPushMostRecent(uint32_t row) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The link alone (Restore: the journal already knows the order).
  void LruLink(uint32_t row) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void FreePush(uint32_t row) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  uint32_t FreePop() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Stores `key` in `row`, reusing a heap block of the same size (eviction of equal-size keys
  // allocates nothing).
  void SetKey(Row& row, absl::string_view key) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void ReleaseKey(Row& row) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Drops the key of READY, idle `row` (unlinked from the LRU list by the caller) from the hash
  // table; the row keeps the key bytes for SetKey or ReleaseKey and is left FREE on no list.
  void DropReadyKey(uint32_t row) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A row with no key and no copies goes to the free list; with copies, to quarantine.
  void FreeOrQuarantine(uint32_t row) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // WRITING → READY for `rows` (each WRITING), most recent last in PrepareStore order; reorders
  // `rows`.
  void MakeReady(std::vector<uint32_t>& rows) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status EndCopyLocked(const std::vector<RowRun>& rows) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void MarkStoreFailedLocked(const std::vector<RowRun>& rows) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Rows still WRITING with no copy in flight are written; committed ones become READY.
  void MarkStoreWrittenLocked(const std::vector<RowRun>& rows) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Links `row` after `after` (a listed row; sentinel_: as the least recent), counted evictable.
  void LruLinkAfter(uint32_t row, uint32_t after) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Removes a WRITING row's key and frees (or quarantines) the row; returns the key.
  std::string DropWritingKey(uint32_t row) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // One reader fewer on READING `row`; READY again (or parked) when it was the last.
  void DropReader(uint32_t row) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Ends `member`'s prepared stores and pins (TakeSegmentOffline).
  void EndMemberWork(uint32_t member, SegmentDrain* drain) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const uint32_t num_rows_;
  const uint32_t sentinel_;           // == num_rows_: head/tail of the LRU list
  // The pool's shape, read without the lock (segments_ has its own copy under it).
  const uint32_t segment_rows_;  // == num_rows_ for a private index
  const uint32_t num_segments_;  // 1 for a private index
  // May be null. Declared before the rows so that it is destroyed after them.
  const std::unique_ptr<RowJournal> owned_journal_;
  RowJournal* const journal_;  // owned_journal_.get()

  mutable absl::Mutex mu_;
  // num_rows_ + 1 rows; the last one is the LRU sentinel. Never resized (the hash functors
  // point into it).
  std::vector<Row> rows_ ABSL_GUARDED_BY(mu_);
  KeySet key_to_row_ ABSL_GUARDED_BY(mu_);
  uint32_t free_head_ ABSL_GUARDED_BY(mu_) = kNil;
  // Readiness watermark (rows below it are usable) and the restored rows parked above it,
  // ascending by row; parked_next_ is the first not yet brought back.
  uint32_t ready_end_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<RestoredRow> parked_ ABSL_GUARDED_BY(mu_);
  size_t parked_next_ ABSL_GUARDED_BY(mu_) = 0;

  uint64_t rows_free_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t rows_quarantined_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t rows_writing_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t rows_ready_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t rows_reading_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t rows_evictable_ ABSL_GUARDED_BY(mu_) = 0;  // == length of the LRU list
  uint64_t copies_in_flight_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t key_heap_bytes_ ABSL_GUARDED_BY(mu_) = 0;  // bytes of heap-allocated keys
  uint64_t hits_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t hits_pending_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t misses_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t evictions_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t commits_dropped_ ABSL_GUARDED_BY(mu_) = 0;
  // The pool side (segments, members, pins, the floor): a part under this lock.
  SegmentMap segments_ ABSL_GUARDED_BY(mu_);
  uint32_t store_seq_ ABSL_GUARDED_BY(mu_) = 0;    // next PrepareStore sequence number (wraps)
  // The store tickets (reserved from the journal in chunks): a part under this lock.
  TicketBook tickets_ ABSL_GUARDED_BY(mu_);
  ReadyListener ready_listener_ ABSL_GUARDED_BY(mu_);
  // Rows whose commit is recorded (Row::committed), with the time of the commit.
  absl::flat_hash_map<uint32_t, absl::Time> committed_since_ ABSL_GUARDED_BY(mu_);

  // Scratch space reused across calls, so the hot paths do not allocate.
  std::vector<uint32_t> scratch_rows_ ABSL_GUARDED_BY(mu_);
  std::vector<uint32_t> scratch_new_ ABSL_GUARDED_BY(mu_);  // indices of new keys
  absl::flat_hash_set<absl::string_view> scratch_keys_ ABSL_GUARDED_BY(mu_);
};

}  // namespace kvoffload::daemon

#endif  // KVOFFLOAD_DAEMON_INDEX_SLOT_INDEX_H_
