#include "client/scripted/scripted_worker.h"

#include <iostream>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

ABSL_FLAG(std::string, socket, "", "kvoffloadd data socket");
ABSL_FLAG(std::string, engine_id, "test", "");
ABSL_FLAG(uint32_t, dp_rank, 0, "");
ABSL_FLAG(uint32_t, world_size, 1, "");
ABSL_FLAG(uint32_t, local_world_size, 0, "");
ABSL_FLAG(uint32_t, tp, 0, "0 = world_size");
ABSL_FLAG(uint32_t, mp_rank, 0, "");
ABSL_FLAG(std::string, attention, "mha", "mha | mla");
ABSL_FLAG(std::string, executor, "mp", "");
ABSL_FLAG(uint32_t, num_layers, 4, "");
ABSL_FLAG(uint64_t, page_bytes, 8192, "bytes of one layer's page (K and V together)");
ABSL_FLAG(uint32_t, blocks_per_row, 1, "");
ABSL_FLAG(uint64_t, budget_bytes, 16 << 20, "");
ABSL_FLAG(bool, rows_assigned_by_engine, false, "");
ABSL_FLAG(uint64_t, region_epoch, 0, "region epoch this worker must find (0: any)");
ABSL_FLAG(uint64_t, num_blocks, 64, "GPU blocks per tensor");
ABSL_FLAG(std::string, layout, "separate_kv", "separate_kv | stacked_kv | block_first");
ABSL_FLAG(uint64_t, seed, 1, "content seed (same seed + same rank-independent flag = same bytes)");
ABSL_FLAG(bool, rank_independent_data, false, "all ranks hold the same bytes (replicated MLA)");

namespace kvoffload::client {
namespace {

bool ParseList(const std::string& text, std::vector<uint64_t>* out) {
  out->clear();
  if (text == "-") return true;
  for (absl::string_view item : absl::StrSplit(text, ',')) {
    uint64_t v;
    if (!absl::SimpleAtoi(item, &v)) return false;
    out->push_back(v);
  }
  return true;
}

std::string FinishedLine(const FinishedJob& job) {
  std::string line = absl::StrCat("finished ", job.job_id, " ", static_cast<int>(job.status.code()),
                                  " ", job.bytes);
  if (!job.status.ok()) absl::StrAppend(&line, " ", job.status.message());
  return line;
}

}  // namespace

int ScriptedWorkerMain(int argc, char** argv, const KvBlocksFactory& factory) {
  absl::ParseCommandLine(argc, argv);
  EngineSpec spec;
  spec.engine_id = absl::GetFlag(FLAGS_engine_id);
  spec.dp_rank = absl::GetFlag(FLAGS_dp_rank);
  spec.world_size = absl::GetFlag(FLAGS_world_size);
  spec.local_world_size = absl::GetFlag(FLAGS_local_world_size);
  spec.tp = absl::GetFlag(FLAGS_tp) == 0 ? spec.world_size : absl::GetFlag(FLAGS_tp);
  auto executor = common::ParseExecutor(absl::GetFlag(FLAGS_executor));
  auto attention = common::ParseAttention(absl::GetFlag(FLAGS_attention));
  if (!executor.ok() || !attention.ok()) {
    std::cout << "error bad executor or attention" << std::endl;
    return 2;
  }
  spec.executor = *executor;
  spec.attention = *attention;
  spec.num_layers = absl::GetFlag(FLAGS_num_layers);
  spec.page_bytes = absl::GetFlag(FLAGS_page_bytes);
  spec.blocks_per_row = absl::GetFlag(FLAGS_blocks_per_row);
  spec.budget_bytes = absl::GetFlag(FLAGS_budget_bytes);
  spec.rows_assigned_by_engine = absl::GetFlag(FLAGS_rows_assigned_by_engine);

  const uint32_t mp_rank = absl::GetFlag(FLAGS_mp_rank);
  auto memory = factory(absl::GetFlag(FLAGS_layout), spec.num_layers, spec.page_bytes,
                        absl::GetFlag(FLAGS_num_blocks));
  if (!memory.ok()) {
    std::cout << "error " << memory.status().ToString() << std::endl;
    return 2;
  }
  KvBlocks& gpu = **memory;
  const uint64_t seed = absl::GetFlag(FLAGS_seed);
  gpu.Fill(absl::GetFlag(FLAGS_rank_independent_data) ? seed : seed * 1000003 + mp_rank);

  WorkerOptions options;
  options.socket_path = absl::GetFlag(FLAGS_socket);
  options.spec = spec;
  options.mp_rank = mp_rank;
  options.region_epoch = absl::GetFlag(FLAGS_region_epoch);
  if (absl::Status s = gpu.Describe(&options); !s.ok()) {
    std::cout << "error " << s.ToString() << std::endl;
    return 2;
  }
  auto worker = WorkerClient::Connect(options);
  gpu.Registered();
  if (!worker.ok()) {
    std::cout << "refused " << static_cast<int>(worker.status().code()) << " "
              << worker.status().message() << std::endl;
    return 1;
  }
  const auto& reg = (*worker)->registration();
  std::cout << "registered slot=" << reg.slot << " writer=" << reg.writer
            << " rows=" << reg.geometry.num_rows << " copies=" << reg.geometry.num_copies
            << " epoch=" << reg.region_epoch << std::endl;

  std::string line;
  while (std::getline(std::cin, line)) {
    std::vector<std::string> w = absl::StrSplit(line, ' ', absl::SkipEmpty());
    if (w.empty()) continue;
    const std::string& cmd = w[0];
    std::vector<uint64_t> blocks, rows;
    if (cmd == "quit") break;
    if ((cmd == "store" || cmd == "load") && w.size() >= 4) {
      JobRequest job;
      uint64_t id;
      if (!absl::SimpleAtoi(w[1], &id) || !ParseList(w[2], &job.gpu_blocks) ||
          !ParseList(w[3], &job.rows)) {
        std::cout << "error bad arguments" << std::endl;
        continue;
      }
      job.job_id = id;
      job.direction = cmd == "store" ? Direction::kStore : Direction::kLoad;
      if (w.size() >= 5) absl::SimpleAtoi(w[4], &job.event_index);
      if (w.size() >= 6) absl::SimpleAtoi(w[5], &job.region_epoch);
      absl::Status s = (*worker)->Submit(job);
      if (!s.ok()) {
        std::cout << "error " << s.ToString() << std::endl;
        continue;
      }
      auto done = (*worker)->WaitFinished(id, absl::Seconds(60));
      if (!done.ok()) {
        std::cout << "error " << done.status().ToString() << std::endl;
      } else {
        std::cout << FinishedLine(*done) << std::endl;
      }
    } else if (cmd == "submit" && w.size() >= 5) {
      JobRequest job;
      uint64_t id;
      if (!absl::SimpleAtoi(w[2], &id) || !ParseList(w[3], &job.gpu_blocks) ||
          !ParseList(w[4], &job.rows)) {
        std::cout << "error bad arguments" << std::endl;
        continue;
      }
      job.job_id = id;
      job.direction = w[1] == "store" ? Direction::kStore : Direction::kLoad;
      absl::Status s = (*worker)->Submit(job);
      std::cout << (s.ok() ? absl::StrCat("submitted ", id) : absl::StrCat("error ", s.ToString()))
                << std::endl;
    } else if (cmd == "wait" && w.size() >= 3) {
      uint64_t id, ms;
      if (!absl::SimpleAtoi(w[1], &id) || !absl::SimpleAtoi(w[2], &ms)) {
        std::cout << "error bad arguments" << std::endl;
        continue;
      }
      auto done = (*worker)->WaitFinished(id, absl::Milliseconds(ms));
      std::cout << (done.ok() ? FinishedLine(*done)
                              : absl::StrCat("error ", static_cast<int>(done.status().code()), " ",
                                             done.status().message()))
                << std::endl;
    } else if ((cmd == "clobber" || cmd == "verify" || cmd == "digest") && w.size() >= 2 &&
               ParseList(w[1], &blocks)) {
      bool bad_block = false;
      for (uint64_t b : blocks) bad_block = bad_block || b >= gpu.blocks();
      if (bad_block) {
        std::cout << "error block out of range" << std::endl;
        continue;
      }
      if (cmd == "clobber") {
        for (uint64_t b : blocks) gpu.Clobber(b);
        std::cout << "ok" << std::endl;
      } else if (cmd == "verify") {
        std::string result = "verify ok";
        for (uint64_t b : blocks) {
          if (!gpu.Verify(b)) {
            result = absl::StrCat("verify mismatch block=", b);
            break;
          }
        }
        std::cout << result << std::endl;
      } else {
        uint64_t h = 1469598103934665603ull;
        for (uint64_t b : blocks) {
          for (unsigned char c : gpu.BlockBytes(b)) h = (h ^ c) * 1099511628211ull;
        }
        std::cout << "digest " << std::hex << h << std::dec << std::endl;
      }
    } else if (cmd == "refill" && w.size() >= 2) {
      uint64_t s;
      absl::SimpleAtoi(w[1], &s);
      gpu.Fill(s);
      std::cout << "ok" << std::endl;
    } else if (!gpu.HandleCommand(w, **worker, std::cout)) {
      std::cout << "error unknown command: " << line << std::endl;
    }
  }
  return 0;
}

}  // namespace kvoffload::client
