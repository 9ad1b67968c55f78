// RowTable: the rows of a SlotIndex (slot_index.h) as plain metadata. One 64-byte cache line
// per row holds its key bytes, state, readers, copies, store flags, member tag, ticket and list
// links; the table keeps the free list (FREE rows that may be handed out) and the LRU list (READY
// rows that may be evicted), and counts the rows on each. What a row's state means and when it
// changes is the index's business (index_state.h): this part only stores and links.
//
//   RowTable rows(num_rows);              // every row FREE, on no list
//   rows.PushFree(0);                     // ... then the index lists the rows it may hand out
//   const uint32_t row = rows.PopFree();
//   rows.SetKey(row, key);                // inline up to kInlineKeyBytes, else one heap block
//   rows.LinkAfter(row, rows[rows.sentinel()].prev);   // READY and idle: the most recent
//
// Cost: O(1) per operation (TakeFreeRows walks the free list once). Keys up to
// kInlineKeyBytes live in the row; a longer one takes one heap block of exactly its size, reused
// when the row's next key has the same size.
//
// Thread-safety: none of its own; a plain value. SlotIndex holds it (in IndexState) ABSL_GUARDED_BY
// its mutex, so clang's -Wthread-safety proves every use holds that lock. Ownership: the table
// owns its rows and their heap key blocks; the rows never move (KeyTable points into them).
#ifndef KVOFFLOAD_DAEMON_INDEX_ROW_TABLE_H_
#define KVOFFLOAD_DAEMON_INDEX_ROW_TABLE_H_

#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/strings/string_view.h"

namespace kvoffload::daemon {

enum class RowState : uint8_t {
  kFree,     // no key; allocatable unless quarantined (a copy is still in flight)
  kWriting,  // key assigned, store in progress; not readable, not evictable
  kReady,    // readable; evictable while no copy is in flight
  kReading,  // readable; pinned by one or more PrepareLoad, never evicted
};

absl::string_view RowStateName(RowState state);

class RowTable {
 public:
  static constexpr uint32_t kNil = ~uint32_t{0};
  // Keys up to this size live inside the row's metadata; longer ones on the heap.
  static constexpr size_t kInlineKeyBytes = 40;

  // A row is on exactly one of: the free list (FREE, no copies), the LRU list (READY, no
  // copies), or neither (WRITING, READING, READY with copies, quarantined, parked). FREE rows
  // hold no key (key_size == 0). WRITING rows are on no list, so `prev` holds their PrepareStore
  // sequence number then.
  struct alignas(64) Row {
    union {
      char inline_bytes[kInlineKeyBytes];  // key_size <= kInlineKeyBytes
      char* heap_bytes;                    // key_size > kInlineKeyBytes: new[]-ed, owned
    } key;
    uint32_t prev = kNil;   // LRU list (doubly linked through the sentinel); WRITING: store seq
    uint32_t next = kNil;   // LRU list, or the free list (singly linked)
    uint32_t readers = 0;   // PrepareLoad − CompleteLoad
    uint32_t copies = 0;    // copies begun − ended
    uint16_t key_size = 0;  // 0: no key
    RowState state = RowState::kFree;
    // Bit-fields take no initializers in C++17; the rows are value-initialized, so they start
    // false.
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

  // Rows by state, kept by the index as rows change state (the lists count themselves).
  struct Tally {
    uint64_t quarantined = 0;  // FREE, waiting for a copy in flight to end
    uint64_t writing = 0;
    uint64_t ready = 0;  // includes READY rows that a copy still pins
    uint64_t reading = 0;
    uint64_t copies_in_flight = 0;  // sum of the rows' copy counts
  };

  // `num_rows` FREE rows on no list, plus the LRU sentinel.
  explicit RowTable(uint32_t num_rows);
  ~RowTable();  // frees the heap key blocks
  RowTable(const RowTable&) = delete;
  RowTable& operator=(const RowTable&) = delete;

  uint32_t num_rows() const { return num_rows_; }
  Row& operator[](uint32_t row) { return rows_[row]; }
  const Row& operator[](uint32_t row) const { return rows_[row]; }
  Tally& tally() { return tally_; }
  const Tally& tally() const { return tally_; }

  // ---- Keys. ----
  static absl::string_view KeyOf(const Row& row) {
    return absl::string_view(
        row.key_size <= kInlineKeyBytes ? row.key.inline_bytes : row.key.heap_bytes, row.key_size);
  }
  // Stores `key` in `row`, reusing a heap block of the same size (eviction of equal-size keys
  // allocates nothing).
  void SetKey(uint32_t row, absl::string_view key);
  // The row holds no key any more (its heap block, if any, is freed).
  void ReleaseKey(uint32_t row);

  // ---- The free list (LIFO: the row pushed last is handed out first). ----
  void PushFree(uint32_t row);
  uint32_t PopFree();                                 // the list must not be empty
  uint32_t first_free() const { return free_head_; }  // kNil when empty; then rows_[r].next
  uint64_t rows_free() const { return rows_free_; }
  // Unlinks the free rows in [first, end) and returns them (one walk of the list).
  std::vector<uint32_t> TakeFreeRows(uint32_t first, uint32_t end);
  // Empties the free list (its rows are left on no list).
  void ClearFreeList();

  // ---- The LRU list (least recent first), through the sentinel row. ----
  uint32_t sentinel() const { return num_rows_; }
  uint32_t least_recent() const { return rows_[num_rows_].next; }  // sentinel() when empty
  // Links `row` after `after` (a listed row; sentinel(): as the least recent).
  // The most recent: LinkAfter(row, rows[sentinel()].prev).
  void LinkAfter(uint32_t row, uint32_t after);
  void Unlink(uint32_t row);
  uint64_t rows_evictable() const { return rows_evictable_; }

  // ---- Memory. ----
  // Bytes held now: the rows (a fixed num_rows + 1 lines) and the heap keys.
  uint64_t MemoryBytes() const { return rows_.size() * sizeof(Row) + key_heap_bytes_; }
  uint64_t key_heap_bytes() const { return key_heap_bytes_; }

 private:
  const uint32_t num_rows_;
  // num_rows_ + 1 rows; the last one is the LRU sentinel. Never resized.
  std::vector<Row> rows_;
  uint32_t free_head_ = kNil;
  uint64_t rows_free_ = 0;
  uint64_t rows_evictable_ = 0;  // == length of the LRU list
  uint64_t key_heap_bytes_ = 0;  // bytes of heap-allocated keys
  Tally tally_;
};

}  // namespace kvoffload::daemon

#endif  // KVOFFLOAD_DAEMON_INDEX_ROW_TABLE_H_
