// Two daemons stand for two nodes of one TP4 engine with two local workers each. The engine's
// own manager assigns rows (rows_assigned_by_engine): the scheduler's node decides, every node's
// daemon copies its local workers' slots, and each node finishes the job on its local votes.
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/integration/harness.h"

namespace kvoffload::testing {
namespace {

std::vector<std::string> Args(uint32_t mp_rank) {
  return {"--engine_id=tp4x2",      "--world_size=4",
          "--local_world_size=2",   "--num_layers=3",
          "--page_bytes=4096",      "--rows_assigned_by_engine=true",
          "--budget_bytes=1048576", absl::StrCat("--mp_rank=", mp_rank)};
}

TEST(MultiNodeTest, Tp4OverTwoNodesWithEngineAssignedRows) {
  auto node_a = DaemonProcess::Start();
  auto node_b = DaemonProcess::Start();
  ASSERT_TRUE(node_a.ok() && node_b.ok());
  std::vector<std::unique_ptr<WorkerProcess>> workers;
  for (uint32_t rank = 0; rank < 4; ++rank) {
    DaemonProcess& node = rank < 2 ? **node_a : **node_b;
    auto w = WorkerProcess::Start(node.data_socket(), Args(rank));
    ASSERT_TRUE(w.ok());
    // Ranks 2 and 3 on the second node land in slots 0 and 1; rows hold 2 copies, not 4.
    EXPECT_TRUE(absl::StartsWith((*w)->hello(),
                                 absl::StrCat("registered slot=", rank % 2, " writer=1 rows=")))
        << (*w)->hello();
    EXPECT_NE((*w)->hello().find("copies=2"), std::string::npos) << (*w)->hello();
    workers.push_back(std::move(*w));
  }
  const uint64_t row_bytes = 2 * 3 * 4096;
  // Rows chosen by the engine: 5, 17, 30. Each node finishes on its own two votes.
  for (auto& w : workers) ASSERT_EQ(w->Command("submit store 1 4,9,11 5,17,30"), "submitted 1");
  for (auto& w : workers) {
    EXPECT_EQ(w->Command("wait 1 10000"), absl::StrCat("finished 1 0 ", 3 * row_bytes));
  }
  for (auto& w : workers) ASSERT_EQ(w->Command("clobber 4,9,11"), "ok");
  for (auto& w : workers) ASSERT_EQ(w->Command("submit load 2 4,9,11 5,17,30"), "submitted 2");
  for (auto& w : workers) {
    EXPECT_EQ(w->Command("wait 2 10000"), absl::StrCat("finished 2 0 ", 3 * row_bytes));
    EXPECT_EQ(w->Command("verify 4,9,11"), "verify ok");
  }
  for (DaemonProcess* node : {node_a->get(), node_b->get()}) {
    auto stats = node->EngineStats("tp4x2");
    ASSERT_TRUE(stats.ok());
    EXPECT_EQ(stats->store_bytes(), 2 * 3 * 3 * 4096u);  // two local workers, three rows
    EXPECT_EQ(stats->jobs_done(), 2u);
    EXPECT_EQ(stats->geometry().num_copies(), 2u);
    EXPECT_EQ(stats->num_rows(), (1u << 20) / row_bytes);
  }
  // A third worker on a node with two local slots is refused.
  auto extra = WorkerProcess::Start((*node_a)->data_socket(), Args(2));
  ASSERT_TRUE(extra.ok());
  EXPECT_TRUE(absl::StartsWith((*extra)->hello(), "refused 6 ")) << (*extra)->hello();
}

}  // namespace
}  // namespace kvoffload::testing
