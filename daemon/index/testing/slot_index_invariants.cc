// SlotIndex::CheckInvariants, linked into tests only (see slot_index_invariants.h).
#include "daemon/index/testing/slot_index_invariants.h"

#include <array>
#include <vector>

#include "absl/strings/str_cat.h"

namespace kvoffload::daemon {

absl::Status CheckSlotIndexInvariants(const SlotIndex& index) {
  return SlotIndexInvariants::Check(index);
}

absl::Status SlotIndex::CheckInvariants() const {
  absl::ReaderMutexLock lock(&mu_);
  const IndexState& s = state_;
  const RowTable& rows = s.rows;
  const RowTable::Tally& tally = s.rows.tally();
  const uint32_t sentinel = s.rows.sentinel();
  const uint32_t ready_end = s.readiness.end();
  const uint32_t segment_rows = s.segments.segment_rows();
  const SegmentMap& segments = s.segments;
  auto fail = [](auto&&... args) {
    return absl::InternalError(absl::StrCat("SlotIndex invariant: ", args...));
  };
  std::vector<uint8_t> on_list(num_rows_, 0);  // 1: LRU list, 2: free list
  // LRU list: READY, no copies, links consistent.
  uint64_t lru_length = 0;
  for (uint32_t prev = sentinel, row = rows[sentinel].next; row != sentinel;
       prev = row, row = rows[row].next) {
    if (row >= num_rows_) return fail("LRU list reaches row ", row);
    if (on_list[row]) return fail("row ", row, " twice on the lists");
    on_list[row] = 1;
    const RowTable::Row& r = rows[row];
    if (r.prev != prev) return fail("row ", row, " has a wrong LRU back link");
    if (r.state != RowState::kReady || r.copies != 0 || r.readers != 0) {
      return fail("row ", row, " is on the LRU list but ", RowStateName(r.state), " with ",
                  r.copies, " copies and ", r.readers, " readers");
    }
    ++lru_length;
  }
  if (rows[rows[sentinel].prev].next != sentinel) return fail("LRU tail link");
  if (lru_length != rows.rows_evictable()) {
    return fail("LRU list has ", lru_length, " rows, counter says ", rows.rows_evictable());
  }
  uint64_t free_length = 0;
  for (uint32_t row = rows.first_free(); row != RowTable::kNil; row = rows[row].next) {
    if (row >= num_rows_) return fail("free list reaches row ", row);
    if (on_list[row]) return fail("row ", row, " twice on the lists");
    on_list[row] = 2;
    if (rows[row].state != RowState::kFree || rows[row].copies != 0) {
      return fail("row ", row, " is on the free list but not FREE and idle");
    }
    ++free_length;
  }
  if (free_length != rows.rows_free()) {
    return fail("free list has ", free_length, " rows, counter says ", rows.rows_free());
  }
  uint64_t quarantined = 0, writing = 0, ready = 0, reading = 0, copies = 0, heap_bytes = 0;
  uint64_t committed = 0, offline = 0;
  std::array<uint64_t, kMaxMembers> held{}, evictable{}, parked{};
  for (uint32_t row = 0; row < num_rows_; ++row) {
    const RowTable::Row& r = rows[row];
    copies += r.copies;
    if ((r.written || r.committed || r.store_failed) && r.state != RowState::kWriting) {
      return fail("row ", row, " is ", RowStateName(r.state), " with store flags set");
    }
    if (r.written && r.committed) return fail("WRITING row ", row, " written and committed");
    if (r.committed) {
      ++committed;
      if (!s.commits.Contains(row)) return fail("committed row ", row, " has no time");
    }
    if (r.key_size > kInlineKeyBytes) heap_bytes += r.key_size;
    if (r.marked) return fail("row ", row, " left marked");
    if (r.state == RowState::kFree) {
      if (r.readers != 0) return fail("FREE row ", row, " has readers");
      if (r.key_size != 0) return fail("FREE row ", row, " holds a key");
      if (r.ticket != 0) return fail("FREE row ", row, " holds ticket ", r.ticket);
      if (row >= ready_end) {
        if (r.copies > 0 || on_list[row]) {
          return fail("row ", row, " above the readiness watermark ", ready_end,
                      " has copies or is listed");
        }
      } else if (r.copies > 0) {
        ++quarantined;
        if (on_list[row]) return fail("quarantined row ", row, " is on a list");
      } else if (segments.ParkedRow(row)) {
        if (on_list[row]) return fail("parked row ", row, " is on a list");
        ++offline;
        ++parked[row / segment_rows];
      } else if (on_list[row] != 2) {
        return fail("idle FREE row ", row, " is not on the free list");
      }
      continue;
    }
    if (r.key_size == 0) return fail("row ", row, " in use without a key");
    if (row >= ready_end) return fail("row ", row, " in use above the readiness watermark");
    if (r.ticket == 0 || r.ticket > kMaxTicket) return fail("row ", row, " has ticket ", r.ticket);
    if (s.keys.Find(RowTable::KeyOf(r)) != row)
      return fail("row ", row, "'s key does not map back to it");
    if (r.member >= s.segments.num_segments())
      return fail("row ", row, " has member tag ", r.member);
    if (r.state == RowState::kReady || r.state == RowState::kReading) ++held[r.member];
    if (on_list[row] == 1) ++evictable[r.member];
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
  if (quarantined != tally.quarantined || writing != tally.writing || ready != tally.ready ||
      reading != tally.reading) {
    return fail("state counters differ: quarantined ", quarantined, "/", tally.quarantined,
                " writing ", writing, "/", tally.writing, " ready ", ready, "/", tally.ready,
                " reading ", reading, "/", tally.reading);
  }
  if (offline != segments.rows_parked()) {
    return fail(offline, " parked rows, counter says ", segments.rows_parked());
  }
  // Pools: the members' recorded pins are READING rows' readers, all of them.
  if (segments.pool()) {
    std::vector<uint64_t> pins(num_rows_, 0);
    for (uint32_t m = 0; m < kMaxMembers; ++m) {
      for (const auto& [row, count] : segments.pins(m)) {
        if (row >= num_rows_ || count == 0) return fail("pin record of row ", row, " x", count);
        pins[row] += count;
      }
    }
    for (uint32_t row = 0; row < num_rows_; ++row) {
      if (pins[row] != rows[row].readers) {
        return fail("row ", row, " has ", rows[row].readers, " readers, members pin it ", pins[row],
                    " times");
      }
    }
  }
  for (uint32_t m = 0; m < kMaxMembers; ++m) {
    const SegmentMap::Member& member = segments.member(m);
    if (held[m] != member.counts.rows_held || evictable[m] != member.evictable) {
      return fail("member ", m, ": ", held[m], " rows held / ", evictable[m],
                  " evictable, counters say ", member.counts.rows_held, " / ", member.evictable);
    }
    if (m < s.segments.num_segments() && parked[m] != segments.parked(m)) {
      return fail("segment ", m, ": ", parked[m], " parked rows, counter says ",
                  segments.parked(m));
    }
  }
  if (free_length + quarantined + writing + ready + reading + offline + (num_rows_ - ready_end) !=
      num_rows_) {
    return fail("rows do not add up to num_rows");
  }
  if (s.keys.size() != writing + ready + reading) {
    return fail("hash table holds ", s.keys.size(), " keys for ", writing + ready + reading,
                " rows in use");
  }
  if (copies != tally.copies_in_flight) {
    return fail("copies ", copies, " vs counter ", tally.copies_in_flight);
  }
  if (committed != s.commits.pending()) {
    return fail(committed, " committed rows, ", s.commits.pending(), " commit times");
  }
  if (heap_bytes != rows.key_heap_bytes()) {
    return fail("key heap bytes ", heap_bytes, " vs counter ", rows.key_heap_bytes());
  }
  return absl::OkStatus();
}

}  // namespace kvoffload::daemon
