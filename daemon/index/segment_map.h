// SegmentMap: the pool side of a SlotIndex (slot_index.h "Pools"). A pool index's rows
// are `num_segments` segments of `segment_rows` rows, one per member region. This part holds
// which segments are online, how many of each segment's rows are parked (on no list: offline, or
// online but not ready yet) or ready, each member's counters and PrepareLoad pins, and the floor
// rule of the pool's LRU. It knows rows by number and member tag only; SlotIndex moves rows
// between its lists and asks this part where a row belongs and whom an eviction may take.
// A private index is a map of one online segment and no floor.
//
//   SegmentMap map(shape, /*pool=*/true);                 // every segment offline, rows parked
//   RETURN_IF_ERROR(map.BringOnline(0));                  // ... then its rows become ready:
//   for (uint32_t row : map.MarkReady(0, ready_rows)) FreePush(row);
//
// Thread-safety: none of its own; a plain value. SlotIndex holds it ABSL_GUARDED_BY its mutex,
// so clang's -Wthread-safety proves every use holds that lock.
#ifndef KVOFFLOAD_DAEMON_INDEX_SEGMENT_MAP_H_
#define KVOFFLOAD_DAEMON_INDEX_SEGMENT_MAP_H_

#include <array>
#include <cstdint>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"

namespace kvoffload::daemon {

class SegmentMap {
 public:
  static constexpr uint32_t kMaxMembers = 16;  // member tags take 4 bits of a row

  struct Shape {
    uint32_t segment_rows = 0;       // rows per segment, >= 1
    uint32_t num_segments = 1;       // 1..kMaxMembers
    uint64_t member_floor_rows = 0;  // 0: plain LRU over the pool
  };
  // Per member (cumulative except rows_held): what it stored, hit and loaded, and what of its
  // rows other members' stores evicted. "cross": the row was stored by another member.
  struct MemberCounts {
    uint64_t rows_held = 0;  // READY or READING rows this member stored
    uint64_t hits = 0;
    uint64_t cross_member_hits = 0;
    uint64_t loads = 0;  // keys pinned by PrepareLoad
    uint64_t cross_member_loads = 0;
    uint64_t stores = 0;       // keys given a row by PrepareStore
    uint64_t evicted = 0;      // of this member's rows, by anyone's store
    uint64_t floor_skips = 0;  // eviction candidates passed over to keep another's floor
  };
  struct Member {
    MemberCounts counts;     // rows_held kept live
    uint64_t evictable = 0;  // READY rows with no copy this member stored (on the LRU list)
  };
  // What taking a segment offline ended (IndexSegments::TakeOffline).
  struct Drain {
    uint64_t keys_dropped = 0;  // idle READY keys dropped now
    uint64_t rows_pending = 0;  // rows still in use, parked as each becomes idle
    uint64_t stores_ended = 0;  // the member's prepared stores ended as CompleteStore(false)
    uint64_t pins_dropped = 0;  // the member's PrepareLoad pins ended as CompleteLoad
  };
  using Pins = absl::flat_hash_map<uint32_t, uint32_t>;  // row → PrepareLoad pins on it

  // `pool`: every segment starts offline with all its rows parked, and pins are tracked. A
  // private index (pool false) is one segment, online and ready from the start.
  SegmentMap(const Shape& shape, bool pool);

  uint32_t segment_rows() const { return shape_.segment_rows; }
  uint32_t num_segments() const { return shape_.num_segments; }
  uint64_t floor_rows() const { return shape_.member_floor_rows; }
  bool pool() const { return pool_; }

  // ---- Where a row belongs. ----
  // A row of an offline segment (cheap when none is offline).
  bool OfflineRow(uint32_t row) const {
    return segments_offline_ != 0 && offline_[row / shape_.segment_rows];
  }
  // Parked: of an offline segment, or above its online segment's readiness.
  bool ParkedRow(uint32_t row) const {
    return OfflineRow(row) || row % shape_.segment_rows >= ready_[row / shape_.segment_rows];
  }
  // Counts `row` parked (it went to no list).
  void Park(uint32_t row) {
    ++rows_parked_;
    ++parked_[row / shape_.segment_rows];
  }
  // Rows parked in all: of offline segments, and not yet ready in online ones.
  uint64_t rows_parked() const { return rows_parked_; }
  // Rows of online segments not ready yet (a pool's; a private index has none here).
  uint64_t NotReadyOnlineRows() const;
  uint32_t parked(uint32_t segment) const { return parked_[segment]; }

  // ---- Segments coming and going. ----
  // An offline, fully parked segment goes online with no row ready yet (MarkReady follows); its
  // member's cumulative counters start at 0 (a new member takes the slot). OUT_OF_RANGE past the
  // shape; FAILED_PRECONDITION when online or rows of it are still in use.
  absl::Status BringOnline(uint32_t segment);
  // An online segment goes offline. OUT_OF_RANGE / FAILED_PRECONDITION (offline already).
  absl::Status TakeOffline(uint32_t segment);
  // Rows [0, ready_rows) of online `segment` are ready: returns the rows that were parked and
  // are not any more, [first, end) as absolute row numbers (empty when offline or lower).
  struct RowRange {
    uint32_t first = 0;
    uint32_t end = 0;
  };
  RowRange MarkReady(uint32_t segment, uint64_t ready_rows);
  // Every row of an offline segment is parked.
  bool Drained(uint32_t segment) const;

  // ---- Members: counters, pins and the floor. ----
  Member& member(uint32_t m) { return members_[m]; }
  const Member& member(uint32_t m) const { return members_[m]; }
  // A pool remembers `member`'s pin on `row`; a private index does not (its engine and index go
  // together).
  void Pin(uint32_t member, uint32_t row) {
    if (pool_) ++pins_[member][row];
  }
  // Forgets one of `member`'s pins on `row` (another member's when it holds none there).
  void Unpin(uint32_t member, uint32_t row);
  // Takes `member`'s pins away (it left without CompleteLoad).
  Pins TakePins(uint32_t member);
  const Pins& pins(uint32_t member) const { return pins_[member]; }

  // The floor is in force (a pool with a floor).
  bool FloorActive() const { return shape_.member_floor_rows != 0 && shape_.num_segments > 1; }
  // Whether `member`'s store may evict a READY idle row that `owner` stored.
  bool MayEvict(uint32_t member, uint32_t owner) const;
  // Rows `member` may evict now, `held_back[m]` of member m's evictable rows excluded.
  uint64_t EvictableFor(uint32_t member, const uint64_t* held_back) const;

 private:
  const Shape shape_;
  const bool pool_;
  std::array<Member, kMaxMembers> members_{};
  std::array<bool, kMaxMembers> offline_{};
  std::array<uint32_t, kMaxMembers> parked_{};  // parked rows per segment
  // Rows [0, ready_[s]) of an online segment have been handed to the free list.
  std::array<uint32_t, kMaxMembers> ready_{};
  uint32_t segments_offline_ = 0;
  uint64_t rows_parked_ = 0;
  // Pools only: each member's PrepareLoad pins, so that a member that leaves without
  // CompleteLoad does not pin rows for ever. Allocates (under the index's lock) as pins are taken.
  std::array<Pins, kMaxMembers> pins_;
};

}  // namespace kvoffload::daemon

#endif  // KVOFFLOAD_DAEMON_INDEX_SEGMENT_MAP_H_
