#include "daemon/index/ticket_book.h"

#include <cstdint>
#include <vector>

#include "absl/strings/string_view.h"
#include "gtest/gtest.h"

namespace kvoffload::daemon {
namespace {

// Records the reservations; the row calls are not this part's.
class Reservations : public RowJournal {
 public:
  void OnFree(uint32_t) override {}
  void OnReady(uint32_t, absl::string_view, uint32_t) override {}
  void OnTouch(uint32_t) override {}
  void OnTicketsReserved(uint32_t end) override { ends.push_back(end); }
  std::vector<uint32_t> ends;
};

TEST(TicketBookTest, IssuesInOrderAndWrapsPastTheLastTicketToOne) {
  TicketBook tickets(nullptr);
  EXPECT_EQ(tickets.Issue(), 1);
  EXPECT_EQ(tickets.Issue(), 2);
  tickets.StartAt(TicketBook::kMaxTicket);
  EXPECT_EQ(tickets.Issue(), TicketBook::kMaxTicket);
  EXPECT_EQ(tickets.Issue(), 1);
  EXPECT_EQ(tickets.next(), 2);
}

TEST(TicketBookTest, AStartOutsideTheRangeMeansOne) {
  TicketBook tickets(nullptr);
  tickets.StartAt(0);
  EXPECT_EQ(tickets.next(), 1);
  tickets.StartAt(TicketBook::kMaxTicket + 1);
  EXPECT_EQ(tickets.Issue(), 1);
}

TEST(TicketBookTest, AJournalReservesAChunkBeforeItsFirstTicketIsIssued) {
  Reservations journal;
  TicketBook tickets(&journal);
  tickets.StartAt(100);
  EXPECT_TRUE(journal.ends.empty());  // nothing issued, nothing reserved
  EXPECT_EQ(tickets.Issue(), 100);
  ASSERT_EQ(journal.ends.size(), 1);
  EXPECT_EQ(journal.ends[0], 100 + TicketBook::kChunk);
  for (uint32_t i = 1; i < TicketBook::kChunk; ++i) tickets.Issue();
  EXPECT_EQ(journal.ends.size(), 1);  // one write per chunk
  EXPECT_EQ(tickets.Issue(), 100 + TicketBook::kChunk);
  ASSERT_EQ(journal.ends.size(), 2);
  EXPECT_EQ(journal.ends[1], 100 + 2 * TicketBook::kChunk);
}

TEST(TicketBookTest, AReservationThatRunsPastTheLastTicketWraps) {
  Reservations journal;
  TicketBook tickets(&journal);
  tickets.StartAt(TicketBook::kMaxTicket - 10);
  EXPECT_EQ(tickets.Issue(), TicketBook::kMaxTicket - 10);
  ASSERT_EQ(journal.ends.size(), 1);
  EXPECT_EQ(journal.ends[0], TicketBook::kChunk - 10);
}

}  // namespace
}  // namespace kvoffload::daemon
