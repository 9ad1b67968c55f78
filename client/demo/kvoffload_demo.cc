// kvoffload_demo: one engine against a running kvoffloadd — a scheduler (this process) and two
// worker processes (kvoffload_host_worker, KV in shared memory) that store random KV blocks,
// clobber them, load them back and verify every byte.
//
//   kvoffload_demo --runtime_dir=/tmp/kvoffload-demo
#include <unistd.h>

#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "client/kvoffload_client.h"
#include "common/bytes.h"
#include "common/subprocess.h"

ABSL_FLAG(std::string, runtime_dir, "/run/kvoffload", "kvoffloadd's runtime directory");
ABSL_FLAG(std::string, worker_binary, "",
          "kvoffload_host_worker; default: next to this binary or in ../host/");
ABSL_FLAG(int32_t, rows, 8, "rows (blocks) to store and load");

namespace {

using kvoffload::client::KeyState;
using kvoffload::common::ChildProcess;

int Fail(const std::string& what) {
  std::fprintf(stderr, "kvoffload_demo: FAILED: %s\n", what.c_str());
  return 1;
}

std::string WorkerBinary() {
  if (!absl::GetFlag(FLAGS_worker_binary).empty()) return absl::GetFlag(FLAGS_worker_binary);
  char self[4096];
  ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
  std::string dir = n > 0 ? std::string(self, n) : std::string("./kvoffload_demo");
  dir = dir.substr(0, dir.rfind('/'));
  for (const std::string& candidate :
       {dir + "/kvoffload_host_worker", dir + "/../host/kvoffload_host_worker"}) {
    if (access(candidate.c_str(), X_OK) == 0) return candidate;
  }
  return "kvoffload_host_worker";
}

}  // namespace

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  const std::string socket = absl::StrCat(absl::GetFlag(FLAGS_runtime_dir), "/kvoffload.sock");
  const int num_rows = absl::GetFlag(FLAGS_rows);
  if (num_rows <= 0 || num_rows > 64) return Fail("--rows must be in [1, 64]");

  kvoffload::client::EngineSpec spec;
  spec.engine_id = "demo";
  spec.world_size = 2;
  spec.tp = 2;
  spec.num_layers = 4;
  spec.page_bytes = 16 << 10;  // one layer's K and V of one block
  spec.budget_bytes = 32 << 20;
  auto scheduler = kvoffload::client::SchedulerClient::Open(socket, spec);
  if (!scheduler.ok()) return Fail(scheduler.status().ToString());
  const auto& g = (*scheduler)->geometry();
  std::printf(
      "scheduler: engine demo/0 %s: %lu rows of %s (%u copies: one slot per local worker)\n",
      (*scheduler)->created() ? "created" : "joined", static_cast<unsigned long>(g.num_rows),
      kvoffload::common::FormatBytes(g.row_bytes).c_str(), g.num_copies);

  std::vector<std::unique_ptr<ChildProcess>> workers;
  for (int rank = 0; rank < 2; ++rank) {
    auto w = ChildProcess::Spawn(
        {WorkerBinary(), absl::StrCat("--socket=", socket), "--engine_id=demo", "--world_size=2",
         "--num_layers=4", absl::StrCat("--page_bytes=", spec.page_bytes),
         absl::StrCat("--budget_bytes=", spec.budget_bytes), absl::StrCat("--mp_rank=", rank),
         "--num_blocks=128", absl::StrCat("--seed=", 42 + rank)});
    if (!w.ok()) return Fail(w.status().ToString());
    std::string hello = (*w)->ReadLine();
    if (!absl::StartsWith(hello, "registered"))
      return Fail(absl::StrCat("worker ", rank, ": ", hello));
    std::printf("worker %d: %s\n", rank, hello.c_str());
    workers.push_back(std::move(*w));
  }

  std::vector<std::string> keys;
  std::vector<uint64_t> blocks;
  for (int i = 0; i < num_rows; ++i) {
    keys.push_back(absl::StrCat("prefix-hash-", i));
    blocks.push_back(3 + 5 * i);
  }
  const std::string block_list = absl::StrJoin(blocks, ",");
  auto states = (*scheduler)->Lookup(keys);
  if (!states.ok()) return Fail(states.status().ToString());
  int misses = 0;
  for (KeyState s : *states) misses += s == KeyState::kMiss;
  std::printf("lookup: %d of %d keys miss\n", misses, num_rows);

  auto store = (*scheduler)->PrepareStore(keys);
  if (!store.ok()) return Fail(store.status().ToString());
  const std::string rows = absl::StrJoin(store->rows, ",");
  for (auto& w : workers) w->Command(absl::StrCat("submit store 1 ", block_list, " ", rows));
  for (size_t i = 0; i < workers.size(); ++i) {
    std::string done = workers[i]->Command("wait 1 30000");
    if (!absl::StartsWith(done, "finished 1 0 ")) return Fail(absl::StrCat("store: ", done));
    std::printf("worker %zu: stored GPU blocks [%s] into rows [%s]: %s\n", i, block_list.c_str(),
                rows.c_str(), done.c_str());
  }
  if (auto s = (*scheduler)->CompleteStore(store->keys, true); !s.ok()) return Fail(s.ToString());

  for (size_t i = 0; i < workers.size(); ++i) {
    workers[i]->Command(absl::StrCat("clobber ", block_list));
    std::printf("worker %zu: clobbered its GPU blocks: %s\n", i,
                workers[i]->Command(absl::StrCat("verify ", block_list)).c_str());
  }
  auto load_rows = (*scheduler)->PrepareLoad(keys);
  if (!load_rows.ok()) return Fail(load_rows.status().ToString());
  for (auto& w : workers) {
    w->Command(absl::StrCat("submit load 2 ", block_list, " ", absl::StrJoin(*load_rows, ",")));
  }
  for (size_t i = 0; i < workers.size(); ++i) {
    std::string done = workers[i]->Command("wait 2 30000");
    if (!absl::StartsWith(done, "finished 2 0 ")) return Fail(absl::StrCat("load: ", done));
    std::string verify = workers[i]->Command(absl::StrCat("verify ", block_list));
    std::printf("worker %zu: loaded them back: %s\n", i, verify.c_str());
    if (verify != "verify ok") return Fail(absl::StrCat("worker ", i, ": ", verify));
  }
  if (auto s = (*scheduler)->CompleteLoad(keys); !s.ok()) return Fail(s.ToString());
  for (auto& w : workers) {
    w->Command("quit", 1);
    w->Wait();
  }
  std::printf("demo ok: %d rows stored and loaded byte-exact by 2 workers\n", num_rows);
  return 0;
}
