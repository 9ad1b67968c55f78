// TicketBook: the store tickets of a SlotIndex (slot_index.h "Row handles"). Each PrepareStore
// takes the next ticket, 1..kMaxTicket and then 1 again; a row keeps its ticket while it holds
// its key, so a copy naming another ticket is refused. With a journal (durable regions), tickets
// are reserved in chunks before they are issued (RowJournal::OnTicketsReserved), so that an
// index restored after a crash starts past every ticket the previous one may have handed out.
//
//   TicketBook tickets(journal);  // journal may be null
//   tickets.StartAt(first);       // a new index: a random point; a restored one: where it left off
//   uint32_t ticket = tickets.Issue();
//
// Thread-safety: none of its own; a plain value. SlotIndex holds it ABSL_GUARDED_BY its mutex,
// so clang's -Wthread-safety proves every use holds that lock. Ownership: the journal is not
// owned (the index owns it and outlives this part).
#ifndef KVOFFLOAD_DAEMON_INDEX_TICKET_BOOK_H_
#define KVOFFLOAD_DAEMON_INDEX_TICKET_BOOK_H_

#include <cstdint>

#include "daemon/index/row_journal.h"

namespace kvoffload::daemon {

class TicketBook {
 public:
  static constexpr uint32_t kMaxTicket = (uint32_t{1} << 31) - 1;
  // Tickets reserved from the journal at a time.
  static constexpr uint32_t kChunk = 1u << 16;

  explicit TicketBook(RowJournal* journal) : journal_(journal) {}

  // The next ticket issued is `first` (a value outside 1..kMaxTicket means 1); none of the
  // tickets from there on is reserved yet.
  void StartAt(uint32_t first) {
    next_ = first >= 1 && first <= kMaxTicket ? first : 1;
    reserved_end_ = next_;
  }

  // Issues the next ticket. With a journal, when it is the first one not yet reserved, the next
  // kChunk tickets are reserved first (one journal write per kChunk stores).
  uint32_t Issue() {
    if (journal_ != nullptr && next_ == reserved_end_) {
      uint64_t end = uint64_t{next_} + kChunk;
      if (end > kMaxTicket) end -= kMaxTicket;  // tickets run 1..kMaxTicket, then 1 again
      reserved_end_ = static_cast<uint32_t>(end);
      journal_->OnTicketsReserved(reserved_end_);
    }
    const uint32_t ticket = next_;
    next_ = next_ == kMaxTicket ? 1 : next_ + 1;
    return ticket;
  }

  uint32_t next() const { return next_; }

 private:
  RowJournal* const journal_;  // may be null
  uint32_t next_ = 1;          // 1..kMaxTicket
  uint32_t reserved_end_ = 1;  // with a journal: the first ticket not reserved yet
};

}  // namespace kvoffload::daemon

#endif  // KVOFFLOAD_DAEMON_INDEX_TICKET_BOOK_H_
