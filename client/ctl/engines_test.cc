// Tests for `kvoffloadctl engines` and `cleanup` output text.
#include "client/ctl/engines.h"

#include "client/ctl/cleanup.h"
#include "gtest/gtest.h"

namespace kvoffload::client::ctl {
namespace {

TEST(EnginesTextTest, Table) {
  v1::ListEnginesResponse r;
  v1::EngineStats* a = r.add_engines();
  a->set_engine_id("llama");
  a->set_dp_rank(0);
  a->mutable_geometry()->set_replicated(false);
  a->mutable_geometry()->set_num_copies(4);
  a->mutable_geometry()->set_row_bytes(2 << 20);
  a->set_num_rows(4096);
  a->set_region_bytes(8ull << 30);
  a->set_workers(4);
  a->set_idle_seconds(0);
  v1::EngineStats* b = r.add_engines();
  b->set_engine_id("deepseek");
  b->set_dp_rank(3);
  b->mutable_geometry()->set_replicated(true);
  b->mutable_geometry()->set_num_copies(1);
  b->mutable_geometry()->set_row_bytes(70 << 10);
  b->set_num_rows(100);
  b->set_region_bytes(7000 << 10);
  b->set_idle_seconds(42.6);
  EXPECT_EQ(EnginesText(r),
            "engine      replicated  copies  row bytes  rows  region bytes  workers  idle s\n"
            "llama/0     no               4      2 MiB  4096         8 GiB        4       -\n"
            "deepseek/3  yes              1     70 KiB   100      7000 KiB        0      43\n");
}

TEST(EnginesTextTest, NoEngines) { EXPECT_EQ(EnginesText(v1::ListEnginesResponse()), "no engines\n"); }

TEST(CleanupTextTest, ResetAndDropped) {
  v1::CleanupRequest request;
  request.set_drop_idle(true);
  request.set_reset_engine_id("llama");
  request.set_reset_dp_rank(2);
  v1::CleanupResponse response;
  response.set_rows_reset(4096);
  response.add_dropped("a/0");
  response.add_dropped("b/1");
  EXPECT_EQ(CleanupText(request, response),
            "reset llama/2: 4096 rows freed\n"
            "dropped idle engine a/0\n"
            "dropped idle engine b/1\n");
}

TEST(CleanupTextTest, NothingToDo) {
  v1::CleanupRequest request;
  request.set_drop_idle(true);
  EXPECT_EQ(CleanupText(request, v1::CleanupResponse()), "no idle engines\n");
  v1::CleanupRequest reset;
  reset.set_reset_engine_id("x");
  v1::CleanupResponse one;
  one.set_rows_reset(1);
  EXPECT_EQ(CleanupText(reset, one), "reset x/0: 1 row freed\n");
}

}  // namespace
}  // namespace kvoffload::client::ctl
