// SlotMap: the disk tier's in-memory index: which slot holds which (namespace, key), which slots
// are free, and the LRU order among committed records. No I/O; DiskTier drives it under its
// mutex and does the reads and writes.
//
// Slots are numbered 0..files×slots_per_file-1; slot s lives in file s % files at index
// s / files. Free slots are handed out round-robin over the files (striping: consecutive writes
// go to different devices); when none is free the least recently used idle record is evicted.
//
// Slot life cycle:
//   FREE ─Allocate─▶ WRITING ─Commit─▶ COMMITTED ─(evicted by Allocate, Forget, Drop)─▶ FREE
//                       └─Abort─▶ FREE
// Pin/Unpin count readers; a pinned record is never evicted. One replaced, forgotten or dropped
// while pinned is RETIRED (out of the key table) and FREE when its last reader leaves.
// Recency: a record becomes most recently used when it is committed and when its last reader
// leaves. Restore (at open) orders records by generation, oldest least recent.
//
// Thread safety: none; the owner serializes every call.
#ifndef KVOFFLOAD_DAEMON_TIER_SLOT_MAP_H_
#define KVOFFLOAD_DAEMON_TIER_SLOT_MAP_H_

#include <cstdint>
#include <list>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace kvoffload::tier {

class SlotMap {
 public:
  struct Record {
    uint64_t namespace_id = 0;
    std::string key;
    uint64_t generation = 0;
    uint64_t payload_bytes = 0;
  };
  struct Location {
    uint64_t slot = 0;
    uint64_t generation = 0;
    uint64_t payload_bytes = 0;
  };

  SlotMap(uint32_t files, uint64_t slots_per_file);
  SlotMap(const SlotMap&) = delete;
  SlotMap& operator=(const SlotMap&) = delete;

  uint32_t file_of(uint64_t slot) const { return static_cast<uint32_t>(slot % files_); }
  uint64_t index_in_file(uint64_t slot) const { return slot / files_; }
  uint64_t total_slots() const { return slots_.size(); }
  uint64_t records() const { return by_key_.size(); }
  uint64_t evictions() const { return evictions_; }

  std::optional<Location> Find(uint64_t namespace_id, absl::string_view key) const;

  // A slot to write: a free one (striped), else the LRU idle record's, evicted.
  // RESOURCE_EXHAUSTED when every slot is being written or read.
  absl::StatusOr<uint64_t> Allocate();
  // The write into `slot` (WRITING) succeeded: the record becomes visible, most recently used.
  // An entry of the same key with a lower generation is replaced (its slot freed or retired);
  // one with a higher generation wins and `slot` is freed instead. Returns whether it won.
  bool Commit(uint64_t slot, Record record);
  // The write into `slot` (WRITING) failed: the slot is free again.
  void Abort(uint64_t slot);

  // Pins the key's record against eviction and reuse while it is read.
  std::optional<Location> Pin(uint64_t namespace_id, absl::string_view key);
  void Unpin(uint64_t slot);
  // Removes the key's record if `slot` still holds it at `generation` (a read found it corrupt).
  void Forget(uint64_t slot, uint64_t generation);
  // Removes every record of the namespace; returns how many.
  uint64_t DropNamespace(uint64_t namespace_id);

  // At open, on a fresh map: the records a header scan found, by slot, in any order; for a key
  // found twice the higher generation wins. Returns the number of records kept.
  uint64_t Restore(std::vector<std::pair<uint64_t, Record>> found);

 private:
  enum class State { kFree, kWriting, kCommitted, kRetired };
  struct Slot {
    State state = State::kFree;
    uint32_t readers = 0;
    Record record;
    std::list<uint64_t>::iterator lru;
    bool on_lru = false;
  };
  using Key = std::pair<uint64_t, std::string>;

  void Free(uint64_t slot);
  // Takes a committed record out of the key table (its slot FREE, or RETIRED while read).
  void Remove(uint64_t slot);
  void PushMostRecent(uint64_t slot);
  void TakeOffLru(uint64_t slot);

  const uint32_t files_;
  std::vector<Slot> slots_;
  std::vector<std::vector<uint64_t>> free_by_file_;  // stacks; lowest index on top at start
  uint32_t next_file_ = 0;
  std::list<uint64_t> lru_;  // front: least recently used idle committed record
  absl::flat_hash_map<Key, uint64_t> by_key_;
  uint64_t evictions_ = 0;
};

}  // namespace kvoffload::tier

#endif  // KVOFFLOAD_DAEMON_TIER_SLOT_MAP_H_
