// Row handles: a row as the wire hands it out for a store or a load, ticket << 32 | row (below
// 2^63, so it fits a signed 64-bit block id). The ticket is the one of the PrepareStore that gave
// the row its key (ticket_book.h); a copy naming another ticket is refused, so a stale part can
// never touch another key's row (slot_index.h "Row handles"). A handle with ticket 0 is a plain
// row: its ticket is not checked.
//
//   response->add_rows(StoreHandle(store.ticket, row));
//   RowRun run{RowOfHandle(handle), 1, TicketOfHandle(handle)};
//
// Thread-safety: plain functions of their arguments.
#ifndef KVOFFLOAD_DAEMON_INDEX_ROW_HANDLE_H_
#define KVOFFLOAD_DAEMON_INDEX_ROW_HANDLE_H_

#include <cstdint>

namespace kvoffload::daemon {

inline uint64_t StoreHandle(uint32_t ticket, uint64_t row) {
  return (uint64_t{ticket} << 32) | row;
}
inline uint64_t RowOfHandle(uint64_t handle) { return handle & 0xffffffffu; }
inline uint32_t TicketOfHandle(uint64_t handle) { return static_cast<uint32_t>(handle >> 32); }

}  // namespace kvoffload::daemon

#endif  // KVOFFLOAD_DAEMON_INDEX_ROW_HANDLE_H_
