// TestEngine (one engine's spec as worker flags and as a scheduler EngineSpec) and RoundTrip
// (prepare rows, store, clobber, pin, load, verify), shared by the host and GPU end-to-end tests.
#ifndef KVOFFLOAD_TESTS_INTEGRATION_ENGINE_FIXTURE_H_
#define KVOFFLOAD_TESTS_INTEGRATION_ENGINE_FIXTURE_H_

#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "client/kvoffload_client.h"
#include "gtest/gtest.h"
#include "tests/integration/harness.h"

namespace kvoffload::testing {

// One engine's spec, in the two shapes the tests need: worker flags and a scheduler EngineSpec.
struct TestEngine {
  std::string engine_id = "it";
  uint32_t dp_rank = 0;
  uint32_t world_size = 1;
  uint32_t local_world_size = 0;
  std::string attention = "mha";
  uint32_t num_layers = 4;
  uint64_t page_bytes = 8192;
  uint32_t blocks_per_row = 1;
  uint64_t budget_bytes = 4 << 20;
  bool rows_assigned_by_engine = false;
  std::string layout = "separate_kv";
  uint64_t num_blocks = 64;

  common::EngineSpec Spec() const {
    common::EngineSpec s;
    s.engine_id = engine_id;
    s.dp_rank = dp_rank;
    s.world_size = world_size;
    s.local_world_size = local_world_size;
    s.tp = world_size;
    s.attention = attention == "mla" ? common::Attention::kMla : common::Attention::kMha;
    s.num_layers = num_layers;
    s.page_bytes = page_bytes;
    s.blocks_per_row = blocks_per_row;
    s.budget_bytes = budget_bytes;
    s.rows_assigned_by_engine = rows_assigned_by_engine;
    return s;
  }

  std::vector<std::string> WorkerArgs(uint32_t mp_rank, std::vector<std::string> extra = {}) const {
    std::vector<std::string> args = {
        absl::StrCat("--engine_id=", engine_id),
        absl::StrCat("--dp_rank=", dp_rank),
        absl::StrCat("--world_size=", world_size),
        absl::StrCat("--local_world_size=", local_world_size),
        absl::StrCat("--attention=", attention),
        absl::StrCat("--num_layers=", num_layers),
        absl::StrCat("--page_bytes=", page_bytes),
        absl::StrCat("--blocks_per_row=", blocks_per_row),
        absl::StrCat("--budget_bytes=", budget_bytes),
        absl::StrCat("--rows_assigned_by_engine=", rows_assigned_by_engine ? "true" : "false"),
        absl::StrCat("--layout=", layout),
        absl::StrCat("--num_blocks=", num_blocks),
        absl::StrCat("--mp_rank=", mp_rank)};
    args.insert(args.end(), extra.begin(), extra.end());
    return args;
  }

  uint64_t worker_bytes_per_block() const { return page_bytes * num_layers; }
};

inline std::string List(const std::vector<uint64_t>& v) { return absl::StrJoin(v, ","); }

inline std::vector<std::string> Keys(const std::string& prefix, int n, int first = 0) {
  std::vector<std::string> keys;
  for (int i = first; i < first + n; ++i) keys.push_back(absl::StrCat(prefix, "-", i));
  return keys;
}

inline std::string Finished(uint64_t job, uint64_t bytes) {
  return absl::StrCat("finished ", job, " 0 ", bytes);
}

// The round trip every engine does: the scheduler prepares rows, workers store, clobber their GPU
// blocks, the scheduler pins the rows, workers load, bytes are verified. Fatal failures return.
void RoundTrip(client::SchedulerClient& scheduler, std::vector<WorkerProcess*> workers,
               const TestEngine& engine, uint64_t store_job, int num_rows_to_use);

}  // namespace kvoffload::testing

#endif  // KVOFFLOAD_TESTS_INTEGRATION_ENGINE_FIXTURE_H_
