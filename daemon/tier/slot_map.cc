#include "daemon/tier/slot_map.h"

#include <algorithm>

#include "common/check.h"

namespace kvoffload::tier {

SlotMap::SlotMap(uint32_t files, uint64_t slots_per_file)
    : files_(files), slots_(static_cast<size_t>(files) * slots_per_file), free_by_file_(files) {
  for (uint64_t s = slots_.size(); s-- > 0;) free_by_file_[file_of(s)].push_back(s);
}

std::optional<SlotMap::Location> SlotMap::Find(uint64_t namespace_id,
                                               absl::string_view key) const {
  auto it = by_key_.find(Key(namespace_id, std::string(key)));
  if (it == by_key_.end()) return std::nullopt;
  const Slot& s = slots_[it->second];
  return Location{it->second, s.record.generation, s.record.payload_bytes};
}

absl::StatusOr<uint64_t> SlotMap::Allocate() {
  for (uint32_t tried = 0; tried < files_; ++tried) {
    std::vector<uint64_t>& free = free_by_file_[next_file_];
    next_file_ = (next_file_ + 1) % files_;
    if (!free.empty()) {
      const uint64_t slot = free.back();
      free.pop_back();
      slots_[slot].state = State::kWriting;
      return slot;
    }
  }
  if (lru_.empty()) {
    return absl::ResourceExhaustedError(
        "disk tier: every slot is being written or read; nothing can be evicted");
  }
  const uint64_t slot = lru_.front();
  Remove(slot);  // idle: FREE, back on its file's free list
  std::vector<uint64_t>& free = free_by_file_[file_of(slot)];
  KVO_CHECK(!free.empty() && free.back() == slot);
  free.pop_back();
  slots_[slot].state = State::kWriting;
  ++evictions_;
  return slot;
}

bool SlotMap::Commit(uint64_t slot, Record record) {
  Slot& s = slots_[slot];
  KVO_CHECK(s.state == State::kWriting);
  Key key(record.namespace_id, record.key);
  auto it = by_key_.find(key);
  if (it != by_key_.end()) {
    if (slots_[it->second].record.generation > record.generation) {
      Free(slot);
      return false;
    }
    Remove(it->second);
  }
  s.record = std::move(record);
  s.state = State::kCommitted;
  by_key_.emplace(std::move(key), slot);
  PushMostRecent(slot);
  return true;
}

void SlotMap::Abort(uint64_t slot) {
  KVO_CHECK(slots_[slot].state == State::kWriting);
  Free(slot);
}

std::optional<SlotMap::Location> SlotMap::Pin(uint64_t namespace_id, absl::string_view key) {
  std::optional<Location> loc = Find(namespace_id, key);
  if (!loc) return std::nullopt;
  Slot& s = slots_[loc->slot];
  TakeOffLru(loc->slot);
  ++s.readers;
  return loc;
}

void SlotMap::Unpin(uint64_t slot) {
  Slot& s = slots_[slot];
  KVO_CHECK(s.readers > 0);
  if (--s.readers > 0) return;
  if (s.state == State::kRetired) {
    Free(slot);
  } else {
    PushMostRecent(slot);
  }
}

void SlotMap::Forget(uint64_t slot, uint64_t generation) {
  Slot& s = slots_[slot];
  if (s.state == State::kCommitted && s.record.generation == generation) Remove(slot);
}

uint64_t SlotMap::DropNamespace(uint64_t namespace_id) {
  std::vector<uint64_t> doomed;
  for (const auto& [key, slot] : by_key_) {
    if (key.first == namespace_id) doomed.push_back(slot);
  }
  for (uint64_t slot : doomed) Remove(slot);
  return doomed.size();
}

uint64_t SlotMap::Restore(std::vector<std::pair<uint64_t, Record>> found) {
  std::sort(found.begin(), found.end(), [](const auto& a, const auto& b) {
    return a.second.generation < b.second.generation;
  });
  for (auto& f : free_by_file_) f.clear();
  for (auto& [slot, record] : found) {
    slots_[slot].state = State::kWriting;
    Commit(slot, std::move(record));  // oldest first: each later one is more recent
  }
  // Free lists from the final states (Commit freed the losers of duplicate keys onto them).
  for (auto& f : free_by_file_) f.clear();
  for (uint64_t s = slots_.size(); s-- > 0;) {
    if (slots_[s].state == State::kFree) free_by_file_[file_of(s)].push_back(s);
  }
  return by_key_.size();
}

void SlotMap::Free(uint64_t slot) {
  Slot& s = slots_[slot];
  TakeOffLru(slot);
  s.state = State::kFree;
  s.record = Record{};
  free_by_file_[file_of(slot)].push_back(slot);
}

void SlotMap::Remove(uint64_t slot) {
  Slot& s = slots_[slot];
  KVO_CHECK(s.state == State::kCommitted);
  by_key_.erase(Key(s.record.namespace_id, s.record.key));
  if (s.readers > 0) {
    s.state = State::kRetired;
  } else {
    Free(slot);
  }
}

void SlotMap::PushMostRecent(uint64_t slot) {
  Slot& s = slots_[slot];
  if (s.on_lru) lru_.erase(s.lru);
  s.lru = lru_.insert(lru_.end(), slot);
  s.on_lru = true;
}

void SlotMap::TakeOffLru(uint64_t slot) {
  Slot& s = slots_[slot];
  if (!s.on_lru) return;
  lru_.erase(s.lru);
  s.on_lru = false;
}

}  // namespace kvoffload::tier
