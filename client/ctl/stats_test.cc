// Tests for `kvoffloadctl stats` output: the exact JSON keys (in order, zero values included,
// integers as numbers), escaping, and the exact table.
#include "client/ctl/stats.h"

#include <string>

#include "absl/strings/match.h"
#include "gtest/gtest.h"

namespace kvoffload::client::ctl {
namespace {

v1::EngineStats Llama() {
  v1::EngineStats e;
  e.set_engine_id("llama");
  e.set_dp_rank(1);
  e.mutable_geometry()->set_replicated(true);
  e.mutable_geometry()->set_num_copies(1);
  e.mutable_geometry()->set_row_bytes(2 << 20);
  e.set_num_rows(4096);
  e.set_rows_free(2999);
  e.set_rows_writing(10);
  e.set_rows_ready(80);
  e.set_rows_reading(6);
  e.set_rows_quarantined(1);
  e.set_rows_not_ready(1000);  // 2000 MiB of the region still being pinned
  e.set_region_bytes(8ull << 30);
  e.set_region_ready_bytes(6192ull << 20);
  e.set_store_bytes(3ull << 30);
  e.set_load_bytes(1536ull << 20);
  e.set_jobs_done(1234);
  e.set_jobs_failed(2);
  e.set_jobs_in_flight(3);
  e.set_hits(900);
  e.set_misses(100);
  e.set_evictions(17);
  e.set_workers(8);
  e.set_job_latency_p50_us(250.4);
  e.set_job_latency_p99_us(1999.6);
  e.set_idle_seconds(0);
  return e;
}

v1::StatsResponse Node() {
  v1::StatsResponse s;
  s.set_backend("cuda");
  s.set_uptime_seconds(93784.5);
  s.set_region_bytes(8ull << 30);
  s.set_max_region_bytes(64ull << 30);
  (*s.mutable_gpu_memory_bytes())[1] = 96ull << 20;
  (*s.mutable_gpu_memory_bytes())[0] = 64ull << 20;
  *s.add_engines() = Llama();
  v1::EngineStats* idle = s.add_engines();
  idle->set_engine_id("tiny");
  return s;
}

TEST(StatsJsonTest, ExactKeysAndValues) {
  EXPECT_EQ(
      StatsJson(Node()),
      "{\"backend\":\"cuda\",\"uptime_seconds\":93784.5,\"region_bytes\":8589934592,"
      "\"max_region_bytes\":68719476736,\"gpu_memory_bytes\":{\"0\":67108864,\"1\":100663296},"
      "\"engines\":["
      "{\"engine_id\":\"llama\",\"dp_rank\":1,\"num_rows\":4096,\"rows_free\":2999,"
      "\"rows_writing\":10,\"rows_ready\":80,\"rows_reading\":6,\"rows_quarantined\":1,"
      "\"rows_not_ready\":1000,\"region_bytes\":8589934592,\"region_ready_bytes\":6492782592,"
      "\"store_bytes\":3221225472,\"load_bytes\":1610612736,\"jobs_done\":1234,"
      "\"jobs_failed\":2,\"jobs_in_flight\":3,\"hits\":900,\"misses\":100,\"evictions\":17,"
      "\"workers\":8,\"job_latency_p50_us\":250.4,\"job_latency_p99_us\":1999.6,"
      "\"idle_seconds\":0,\"replicated\":true,\"num_copies\":1,\"row_bytes\":2097152},"
      "{\"engine_id\":\"tiny\",\"dp_rank\":0,\"num_rows\":0,\"rows_free\":0,"
      "\"rows_writing\":0,\"rows_ready\":0,\"rows_reading\":0,\"rows_quarantined\":0,"
      "\"rows_not_ready\":0,\"region_bytes\":0,\"region_ready_bytes\":0,\"store_bytes\":0,"
      "\"load_bytes\":0,\"jobs_done\":0,\"jobs_failed\":0,"
      "\"jobs_in_flight\":0,\"hits\":0,\"misses\":0,\"evictions\":0,\"workers\":0,"
      "\"job_latency_p50_us\":0,\"job_latency_p99_us\":0,\"idle_seconds\":0,"
      "\"replicated\":false,\"num_copies\":0,\"row_bytes\":0}],\"pools\":[],\"tiers\":[]}");
}

TEST(StatsJsonTest, EmptyNodeHasEveryTopLevelKey) {
  EXPECT_EQ(StatsJson(v1::StatsResponse()),
            "{\"backend\":\"\",\"uptime_seconds\":0,\"region_bytes\":0,\"max_region_bytes\":0,"
            "\"gpu_memory_bytes\":{},\"engines\":[],\"pools\":[],\"tiers\":[]}");
}

TEST(StatsJsonTest, EscapesStringsAndLargeNumbers) {
  v1::StatsResponse s;
  s.set_backend("we\"ird\\\n\x01");
  s.set_max_region_bytes(18446744073709551615ull);
  (*s.mutable_gpu_memory_bytes())[-1] = 1;
  s.add_engines()->set_engine_id("a\tb");
  const std::string json = StatsJson(s);
  EXPECT_TRUE(absl::StartsWith(
      json,
      "{\"backend\":\"we\\\"ird\\\\\\n\\u0001\",\"uptime_seconds\":0,\"region_bytes\":0,"
      "\"max_region_bytes\":18446744073709551615,"))
      << json;
  EXPECT_NE(json.find("\"gpu_memory_bytes\":{\"-1\":1}"), std::string::npos) << json;
  EXPECT_NE(json.find("{\"engine_id\":\"a\\tb\",\"dp_rank\":0,"), std::string::npos) << json;
}

TEST(StatsTextTest, HeaderAndOneRowPerEngine) {
  EXPECT_EQ(StatsText(Node()),
            "backend       cuda\n"
            "uptime        1d 2h 3m 4s\n"
            "region bytes  8 GiB of 64 GiB node cap\n"
            "gpu memory    cuda:0 64 MiB, cuda:1 96 MiB\n"
            "\n"
            "engine   rows  free  writing  ready  reading  not ready       region ready  "
            "store bytes  load bytes  jobs done  failed  in flight  hits  misses  evictions  "
            "workers  p50/p99 µs\n"
            "llama/1  4096  2999       10     80        6       1000  6192 MiB of 8 GiB  "
            "      3 GiB    1536 MiB       1234       2          3   900     100         17  "
            "      8    250/2000\n"
            "tiny/0      0     0        0      0        0          0         0 B of 0 B  "
            "        0 B         0 B          0       0          0     0       0          0  "
            "      0         0/0\n");
}

v1::StatsResponse WithPool() {
  v1::StatsResponse s;
  s.set_backend("host");
  s.add_engines()->set_engine_id("a");
  v1::PoolStats* p = s.add_pools();
  p->set_name("qwen");
  p->set_owner_uid(1000);
  p->set_model_identity("Qwen3-8B bf16");
  p->set_rows_per_member(16);
  p->set_row_bytes(8192);
  p->set_rows_online(32);
  p->set_hits(9);
  v1::PoolMemberStats* a = p->add_members();
  a->set_member(0);
  a->set_engine("a/0");
  a->set_rows_held(12);
  a->set_hits(4);
  a->set_stores(12);
  v1::PoolMemberStats* b = p->add_members();
  b->set_member(1);
  b->set_engine("b/0");
  b->set_draining(true);
  b->set_hits(5);
  b->set_cross_member_hits(5);
  b->set_loads(5);
  b->set_cross_member_loads(5);
  return s;
}

TEST(StatsTextTest, OneRowPerPoolMember) {
  const std::string text = StatsText(WithPool());
  const size_t pools = text.find("pool ");
  ASSERT_NE(pools, std::string::npos) << text;
  EXPECT_EQ(text.substr(pools),
            "pool            member  engine          rows held  hits  cross-member hits  loads  "
            "cross-member loads  stores  evicted\n"
            "qwen (32 rows)       0  a/0                    12     4                  0      0  "
            "                 0      12        0\n"
            "qwen (32 rows)       1  b/0 (draining)          0     5                  5      5  "
            "                 5       0        0\n");
}

TEST(StatsJsonTest, PoolsWithTheirMembers) {
  const std::string json = StatsJson(WithPool());
  EXPECT_NE(json.find("\"pools\":[{\"name\":\"qwen\",\"owner_uid\":1000,"
                      "\"model_identity\":\"Qwen3-8B bf16\",\"rows_per_member\":16,"
                      "\"row_bytes\":8192,\"rows_online\":32,\"rows_free\":0,"
                      "\"rows_writing\":0,\"rows_ready\":0,\"rows_reading\":0,\"hits\":9,"
                      "\"misses\":0,\"evictions\":0,\"reserved_bytes\":0,\"members\":["
                      "{\"member\":0,\"engine\":\"a/0\",\"draining\":false,\"rows_held\":12,"
                      "\"hits\":4,\"cross_member_hits\":0,\"loads\":0,\"cross_member_loads\":0,"
                      "\"stores\":12,\"evicted\":0,\"floor_skips\":0},"),
            std::string::npos)
      << json;
}

TEST(StatsTextTest, NoEnginesNoGpu) {
  v1::StatsResponse s;
  s.set_backend("host");
  s.set_uptime_seconds(59.9);
  s.set_max_region_bytes(1 << 30);
  EXPECT_EQ(StatsText(s),
            "backend       host\n"
            "uptime        59s\n"
            "region bytes  0 B of 1 GiB node cap\n"
            "\n"
            "no engines\n");
}

TEST(FormatUptimeTest, Units) {
  EXPECT_EQ(FormatUptime(0), "0s");
  EXPECT_EQ(FormatUptime(61), "1m 1s");
  EXPECT_EQ(FormatUptime(3600), "1h 0m 0s");
  EXPECT_EQ(FormatUptime(86400 * 3 + 5), "3d 0h 0m 5s");
  EXPECT_EQ(FormatUptime(-4), "0s");
}

TEST(RunStatsTest, UsageErrors) {
  std::ostringstream out, err;
  EXPECT_EQ(RunStats({"--jsn"}, AdminTarget{"/nonexistent/admin.sock"}, out, err), 2);
  EXPECT_EQ(err.str(), "kvoffloadctl stats: unknown flag --jsn (see kvoffloadctl stats --help)\n");
  std::ostringstream out2, err2;
  EXPECT_EQ(RunStats({"extra"}, AdminTarget{"/nonexistent/admin.sock"}, out2, err2), 2);
  EXPECT_EQ(err2.str(),
            "kvoffloadctl stats: unexpected argument \"extra\" (see kvoffloadctl stats --help)\n");
  EXPECT_EQ(out.str() + out2.str(), "");
}

v1::StatsResponse WithDiskTier() {
  v1::StatsResponse s;
  s.set_backend("host");
  v1::TierStats* t = s.add_tiers();
  t->set_name("disk");
  t->set_capacity_bytes(uint64_t{2} << 40);
  t->set_used_bytes(uint64_t{3} << 30);
  t->set_records(1536);
  t->set_spills_ok(1600);
  t->set_spill_bytes(uint64_t{3200} << 20);
  t->set_spill_queue_depth(7);
  t->set_lookup_tier_hits(70);
  t->set_promotions_ok(64);
  t->set_promotion_bytes(uint64_t{128} << 20);
  t->set_promotion_seconds_sum(0.128);
  t->set_promotion_seconds_max(0.0105);
  t->set_promotions_timed_out(1);
  t->set_spills_failed(2);
  t->set_promotions_failed(3);
  t->set_read_corrupt(3);
  t->set_write_errors(2);
  return s;
}

TEST(StatsTextTest, OneRowPerTierBeforeTheEngines) {
  EXPECT_EQ(StatsText(WithDiskTier()),
            "backend       host\n"
            "uptime        0s\n"
            "region bytes  0 B of 0 B node cap\n"
            "\n"
            "tier  records            used          spilled  spill queue  tier hits  "
            "    promoted  mean/max promote ms  timed out  failed  corrupt  I/O errors\n"
            "disk     1536  3 GiB of 2 TiB  1600 (3200 MiB)            7         70  "
            "64 (128 MiB)             2.0/10.5          1       5        3           2\n"
            "\n"
            "no engines\n");
}

TEST(StatsJsonTest, TiersWithEveryCounter) {
  const std::string json = StatsJson(WithDiskTier());
  EXPECT_NE(json.find("\"tiers\":[{\"name\":\"disk\",\"capacity_bytes\":2199023255552,"
                      "\"used_bytes\":3221225472,\"records\":1536,\"writes_ok\":0,"
                      "\"write_errors\":2,\"bytes_written\":0,\"reads_ok\":0,"
                      "\"read_misses\":0,\"read_corrupt\":3,\"read_errors\":0,"
                      "\"bytes_read\":0,\"evictions\":0,\"queue_depth\":0,"
                      "\"spills_queued\":0,\"spills_ok\":1600,\"spill_bytes\":3355443200,"
                      "\"spills_failed\":2,\"spills_already_held\":0,\"spills_gone\":0,"
                      "\"spill_queue_dropped\":0,\"spill_queue_depth\":7,"
                      "\"lookup_tier_hits\":70,\"promotions_started\":0,"
                      "\"promotions_ok\":64,\"promotions_failed\":3,"
                      "\"promotion_bytes\":134217728,\"promotions_timed_out\":1,"
                      "\"promotions_in_flight\":0,\"promotion_seconds_sum\":0.128,"
                      "\"promotion_seconds_max\":0.0105}]}"),
            std::string::npos)
      << json;
}

}  // namespace
}  // namespace kvoffload::client::ctl
