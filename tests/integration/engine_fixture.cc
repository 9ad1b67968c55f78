#include "tests/integration/engine_fixture.h"

namespace kvoffload::testing {

void RoundTrip(client::SchedulerClient& scheduler, std::vector<WorkerProcess*> workers,
               const TestEngine& engine, uint64_t store_job, int num_rows_to_use) {
  const std::vector<std::string> keys = Keys(absl::StrCat("rt", store_job), num_rows_to_use);
  auto prepared = scheduler.PrepareStore(keys);
  ASSERT_TRUE(prepared.ok()) << prepared.status();
  ASSERT_EQ(prepared->rows.size(), keys.size());
  std::vector<uint64_t> blocks;
  for (int i = 0; i < num_rows_to_use * static_cast<int>(engine.blocks_per_row); ++i) {
    blocks.push_back(3 + 2 * i);  // scattered, not contiguous
  }
  for (WorkerProcess* w : workers) {
    ASSERT_EQ(w->Command(absl::StrCat("submit store ", store_job, " ", List(blocks), " ",
                                      List(prepared->rows))),
              absl::StrCat("submitted ", store_job));
  }
  for (WorkerProcess* w : workers) {
    std::string line = w->Command(absl::StrCat("wait ", store_job, " 30000"));
    ASSERT_TRUE(absl::StartsWith(line, absl::StrCat("finished ", store_job, " 0 "))) << line;
  }
  ASSERT_TRUE(scheduler.CompleteStore(prepared->keys, true).ok());
  auto states = scheduler.Lookup(keys);
  ASSERT_TRUE(states.ok());
  for (client::KeyState s : *states) EXPECT_EQ(s, client::KeyState::kHit);

  for (WorkerProcess* w : workers) {
    ASSERT_EQ(w->Command(absl::StrCat("clobber ", List(blocks))), "ok");
    ASSERT_EQ(w->Command(absl::StrCat("verify ", List(blocks))),
              absl::StrCat("verify mismatch block=", blocks[0]));
  }
  auto rows = scheduler.PrepareLoad(keys);
  ASSERT_TRUE(rows.ok()) << rows.status();
  EXPECT_EQ(*rows, prepared->rows);
  const uint64_t load_job = store_job + 1;
  for (WorkerProcess* w : workers) {
    ASSERT_EQ(
        w->Command(absl::StrCat("submit load ", load_job, " ", List(blocks), " ", List(*rows))),
        absl::StrCat("submitted ", load_job));
  }
  for (WorkerProcess* w : workers) {
    std::string line = w->Command(absl::StrCat("wait ", load_job, " 30000"));
    ASSERT_TRUE(absl::StartsWith(line, absl::StrCat("finished ", load_job, " 0 "))) << line;
    EXPECT_EQ(w->Command(absl::StrCat("verify ", List(blocks))), "verify ok");
  }
  ASSERT_TRUE(scheduler.CompleteLoad(keys).ok());
}

}  // namespace kvoffload::testing
