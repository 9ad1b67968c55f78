#include "daemon/index/index_state.h"

#include <algorithm>
#include <utility>

#include "common/check.h"
#include "daemon/index/key_refusals.h"

namespace kvoffload::daemon {

using Row = RowTable::Row;

IndexState::IndexState(uint32_t num_rows, RowJournal* row_journal, uint64_t ready_rows,
                       const SegmentMap::Shape& shape, bool pool)
    : rows(num_rows),
      keys(rows, num_rows),  // every row may hold a key: the table never rehashes
      segments(shape, pool),
      tickets(row_journal),
      readiness(num_rows, ready_rows),
      journal(row_journal) {
  if (pool) return;  // every segment offline (SegmentMap counts its rows parked): no row listed
  // Free list in ascending order: row 0 is handed out first. Only ready rows are on it.
  for (uint32_t r = readiness.end(); r-- > 0;) rows.PushFree(r);
}

// ---- Lists ------------------------------------------------------------------------------------

void IndexState::Unlink(uint32_t row) {
  rows.Unlink(row);
  --segments.member(rows[row].member).evictable;
}

void IndexState::LinkAfter(uint32_t row, uint32_t after) {
  rows.LinkAfter(row, after);
  ++segments.member(rows[row].member).evictable;
}

void IndexState::MakeMostRecent(uint32_t row) {
  if (segments.OfflineRow(row)) {  // its segment left the pool: the key goes, the row is parked
    DropReadyKey(row);
    rows.ReleaseKey(row);
    Park(row);
    return;
  }
  LinkAfter(row, rows[rows.sentinel()].prev);
  if (journal != nullptr) journal->OnTouch(row);
}

void IndexState::Free(uint32_t row) {
  if (segments.OfflineRow(row)) {
    Park(row);
    return;
  }
  rows.PushFree(row);
}

void IndexState::FreeOrQuarantine(uint32_t row) {
  if (rows[row].copies > 0) {
    ++rows.tally().quarantined;
  } else {
    Free(row);
  }
}

void IndexState::Park(uint32_t row) {
  rows[row].next = kNil;
  segments.Park(row);
}

// ---- Row transitions --------------------------------------------------------------------------

uint32_t IndexState::TakeRow(uint32_t member, uint32_t* cursor, std::vector<std::string>* evicted) {
  if (rows.first_free() != kNil) return rows.PopFree();
  const uint32_t sentinel = rows.sentinel();
  while (*cursor != sentinel &&
         (rows[*cursor].marked || !segments.MayEvict(member, rows[*cursor].member))) {
    if (!rows[*cursor].marked) ++segments.member(member).counts.floor_skips;
    *cursor = rows[*cursor].next;
  }
  KVO_CHECK(*cursor != sentinel, "ran out of evictable rows: ", rows.rows_evictable(),
            " are listed");
  const uint32_t row = *cursor;
  *cursor = rows[row].next;
  ++segments.member(rows[row].member).counts.evicted;
  Unlink(row);
  evicted->emplace_back(RowTable::KeyOf(rows[row]));
  DropReadyKey(row);
  ++evictions;
  return row;
}

void IndexState::AssignKey(uint32_t row, absl::string_view key, uint32_t ticket, uint32_t member) {
  Row& r = rows[row];
  rows.SetKey(row, key);
  r.state = RowState::kWriting;
  r.store_failed = r.written = r.committed = false;
  r.prev = store_seq++;  // WRITING rows are on no list: prev holds the store order
  r.ticket = ticket;
  r.member = member;
  ++rows.tally().writing;
  keys.Insert(row);
}

void IndexState::AddReader(uint32_t row, uint32_t member) {
  Row& r = rows[row];
  if (r.state == RowState::kReady) {
    if (r.copies == 0) Unlink(row);
    r.state = RowState::kReading;
    --rows.tally().ready;
    ++rows.tally().reading;
  }
  ++r.readers;
  segments.Pin(member, row);
  if (r.member != member) ++segments.member(member).counts.cross_member_loads;
}

void IndexState::Commit(const std::vector<uint32_t>& committed, absl::Time now) {
  // Written rows become READY now; the others when their store job finishes (or never).
  std::vector<uint32_t> ready;
  for (uint32_t row : committed) {
    Row& r = rows[row];
    if (r.written) {
      ready.push_back(row);
    } else if (!r.committed) {
      r.committed = true;
      commits.Record(row, now);
    }
  }
  MakeReady(ready);
}

void IndexState::MakeReady(std::vector<uint32_t>& ready) {
  // Youngest PrepareStore first, so the key prepared first is pushed last: the most recent.
  // Ages are taken modulo 2^32 from the next sequence number, so the counter may wrap.
  const uint32_t next = store_seq;
  const RowTable& table = rows;
  std::sort(ready.begin(), ready.end(), [next, &table](uint32_t a, uint32_t b) {
    return uint32_t(next - table[a].prev) < uint32_t(next - table[b].prev);
  });
  for (uint32_t row : ready) {
    Row& r = rows[row];
    if (r.committed) commits.Forget(row);
    r.state = RowState::kReady;
    r.store_failed = r.written = r.committed = false;
    r.prev = kNil;
    ++segments.member(r.member).counts.rows_held;
    // Published only now: the row's bytes are written and the scheduler committed them.
    if (journal != nullptr) journal->OnReady(row, RowTable::KeyOf(r), r.ticket);
    if (ready_listener) ready_listener(RowTable::KeyOf(r));
    if (r.copies == 0) MakeMostRecent(row);
  }
  rows.tally().writing -= ready.size();
  rows.tally().ready += ready.size();
}

void IndexState::DropReadyKey(uint32_t row) {
  Row& r = rows[row];
  KVO_CHECK(r.state == RowState::kReady && r.readers == 0 && r.copies == 0, "row ", row, " is ",
            RowStateName(r.state), " with ", r.readers, " readers and ", r.copies, " copies");
  // Unpublished before the row can be handed to another key or written again.
  if (journal != nullptr) journal->OnFree(row);
  keys.Erase(row);
  r.state = RowState::kFree;
  r.ticket = 0;
  --rows.tally().ready;
  --segments.member(r.member).counts.rows_held;
}

std::string IndexState::DropWritingKey(uint32_t row) {
  Row& r = rows[row];
  std::string key(RowTable::KeyOf(r));
  if (r.committed) commits.Forget(row);
  keys.Erase(row);
  rows.ReleaseKey(row);
  r.state = RowState::kFree;
  r.store_failed = r.written = r.committed = false;
  r.prev = kNil;
  r.ticket = 0;
  --rows.tally().writing;
  FreeOrQuarantine(row);
  return key;
}

void IndexState::DropReader(uint32_t row) {
  Row& r = rows[row];
  if (--r.readers > 0) return;
  r.state = RowState::kReady;
  --rows.tally().reading;
  ++rows.tally().ready;
  if (r.copies == 0) MakeMostRecent(row);
}

// ---- Readiness and restore --------------------------------------------------------------------

void IndexState::AdoptKey(uint32_t row, absl::string_view key, uint32_t ticket) {
  rows.SetKey(row, key);
  rows[row].state = RowState::kReady;
  rows[row].ticket = ticket;
  keys.Insert(row);
}

uint64_t IndexState::RaiseReadiness(uint64_t end) {
  Readiness::Raised raised = readiness.Raise(end);
  uint64_t back = 0;
  // Parked rows first (ascending), then the rest onto the free list, highest first so that the
  // lowest new row is handed out first.
  for (const RestoredRow& p : raised.back) {
    if (keys.Find(p.key) != kNil) {
      // Stored again while parked: the newer row wins; the journal forgets the old one.
      if (journal != nullptr) journal->OnFree(p.row);
      continue;
    }
    AdoptKey(p.row, p.key, p.ticket);
    LinkAfter(p.row, rows.sentinel());  // the least recent: a parked row coming back
    ++rows.tally().ready;
    ++segments.member(rows[p.row].member).counts.rows_held;  // a private index: member 0
    ++back;
  }
  for (uint32_t row = raised.to; row-- > raised.from;) {
    if (rows[row].state == RowState::kFree) Free(row);
  }
  return back;
}

IndexState::Adopted IndexState::AdoptRestored(std::vector<RestoredRow> entries) {
  Adopted result;
  // Most recent first, so that of two entries naming one row or one key the newer one wins.
  std::sort(entries.begin(), entries.end(),
            [](const RestoredRow& a, const RestoredRow& b) { return a.seq > b.seq; });
  std::vector<uint32_t> accepted;  // most recent first
  std::vector<uint32_t> refused_rows;
  for (const RestoredRow& entry : entries) {
    const bool row_ok = entry.row < rows.num_rows();
    const bool ok = row_ok && ValidKeySize(entry.key) && entry.ticket != 0 &&
                    entry.ticket <= TicketBook::kMaxTicket &&
                    rows[entry.row].state == RowState::kFree && keys.Find(entry.key) == kNil;
    if (!ok) {
      ++result.dropped;
      if (row_ok) refused_rows.push_back(entry.row);
      continue;
    }
    AdoptKey(entry.row, entry.key, entry.ticket);
    accepted.push_back(entry.row);
  }
  // Rows whose memory is not ready yet are parked: out of the key table, FREE and on no list,
  // until the watermark reaches them.
  std::vector<uint32_t> ready;
  ready.reserve(accepted.size());
  for (uint32_t row : accepted) {
    if (row < readiness.end()) {
      ready.push_back(row);
      continue;
    }
    Row& r = rows[row];
    readiness.Park(RestoredRow{row, std::string(RowTable::KeyOf(r)), r.ticket, 0});
    keys.Erase(row);
    rows.ReleaseKey(row);
    r.state = RowState::kFree;
    r.ticket = 0;
  }
  readiness.SortParked();
  // The constructor listed every ready row as free; list again the rows left FREE, in ascending
  // order as a new index hands them out.
  rows.ClearFreeList();
  for (uint32_t r = readiness.end(); r-- > 0;) {
    if (rows[r].state == RowState::kFree) Free(r);
  }
  // Least recent first onto the LRU list. The journal already holds these rows' recency, so it is
  // not told again (MakeMostRecent would renumber them all).
  for (auto it = ready.rbegin(); it != ready.rend(); ++it) {
    LinkAfter(*it, rows[rows.sentinel()].prev);
  }
  rows.tally().ready = ready.size();
  segments.member(0).counts.rows_held = ready.size();  // a restored index is private
  result.restored = ready.size();
  if (journal != nullptr) {
    for (uint32_t row : refused_rows) {
      // A refused entry's row that holds a parked row keeps it (the journal has that row).
      if (rows[row].state == RowState::kFree && !readiness.IsParked(row)) journal->OnFree(row);
    }
  }
  return result;
}

// ---- Introspection ----------------------------------------------------------------------------

uint64_t IndexState::MetadataBytesFor(uint64_t num_rows) {
  // Saturating: a request for 2^64 - 1 bytes must still get a number (and a refusal), not wrap.
  auto mul = [](uint64_t a, uint64_t b) {
    return (b != 0 && a > UINT64_MAX / b) ? UINT64_MAX : a * b;
  };
  auto add = [](uint64_t a, uint64_t b) { return a > UINT64_MAX - b ? UINT64_MAX : a + b; };
  // Row table: num_rows + 1 cache lines (the LRU sentinel), never resized.
  const uint64_t row_table = mul(add(num_rows, 1), sizeof(Row));
  // Key table reserved for num_rows elements: absl grows to capacity 2^k - 1 holding at least
  // n + n/7 elements (max load 7/8); a slot is the element plus a control byte, plus one group
  // of cloned control bytes. Bounding the capacity by 2 × (n + n/7 + 1) covers the rounding.
  const uint64_t capacity = mul(add(add(num_rows, num_rows / 7), 1), 2);
  const uint64_t key_table = add(mul(capacity, sizeof(uint32_t) + 1), 64);
  return add(row_table, key_table);
}

uint64_t IndexState::NotReadyRows() const {
  return rows.num_rows() - readiness.end() + segments.NotReadyOnlineRows();
}

}  // namespace kvoffload::daemon
