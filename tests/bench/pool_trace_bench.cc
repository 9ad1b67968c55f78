// pool_trace_bench: N data-parallel replicas of one model serving a shared-prefix trace, each
// with a private region vs all of them in one pool, at the same total budget.
// It drives the daemon's own SlotIndex (daemon/index/slot_index.h) exactly as a vLLM scheduler
// does (Lookup, load the leading hits, store the rest), so hit rates, stores and evictions are
// those of the daemon's index; no bytes are copied (bytes stored = rows stored × row_bytes).
//
//   bazel run //tests/bench:pool_trace_bench             # markdown table
//   bazel run //tests/bench:pool_trace_bench -- --json   # one JSON object per row
//
// The trace (generated here from --seed, so it is committed with its seed): --prompts system
// prompts of 16..96 blocks (16-token blocks) with Zipf(--zipf) popularity; each request is one
// system prompt plus a unique suffix of 2..16 blocks. Requests arrive every --gap_us; a replica
// prefills a block it misses in 1 ms and one it hits in 0.05 ms (the model of "load").
// Routing: round_robin (request i to replica i % N) or least_loaded (the replica whose queue
// empties first, ties to the lowest index). Private: N indexes of budget/N rows; pool: one pool
// of N members of budget/N rows each, with the daemon's default floor (25 % of a member's rows).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "absl/strings/str_format.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"
#include "daemon/index/slot_index.h"
#include "daemon/index/testing/row_lists.h"

namespace kvoffload::daemon {
namespace {

struct Options {
  uint64_t seed = 20261201;
  uint32_t prompts = 300;
  double zipf = 1.1;
  uint32_t requests = 40000;
  // Total budgets (all replicas together), in rows: each is one table.
  std::vector<uint64_t> budgets = {2000, 4000, 8000};
  // Qwen3-8B, bf16 KV: 36 layers × 8 KV heads × 128 × 2 (K, V) × 2 bytes × 16 tokens.
  uint64_t row_bytes = 36ull * 8 * 128 * 2 * 2 * 16;
  double gap_us = 1500;
  double floor = 0.25;
  bool json = false;
};

uint64_t Mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// A 32-byte key (a block hash stand-in) for block `block` of stream `stream`.
std::string Key(uint64_t stream, uint64_t block) {
  std::string key(32, '\0');
  for (uint64_t w = 0; w < 4; ++w) {
    const uint64_t v = Mix(stream * 0x100000001b3ULL ^ Mix(block * 4 + w));
    std::memcpy(&key[w * 8], &v, 8);
  }
  return key;
}

struct Request {
  uint32_t prompt = 0;
  uint32_t suffix_blocks = 0;
};

struct Trace {
  std::vector<uint32_t> prompt_blocks;
  std::vector<Request> requests;
};

Trace MakeTrace(const Options& o) {
  std::mt19937_64 rng(o.seed);
  Trace t;
  std::uniform_int_distribution<uint32_t> prompt_len(16, 96), suffix_len(2, 16);
  for (uint32_t p = 0; p < o.prompts; ++p) t.prompt_blocks.push_back(prompt_len(rng));
  std::vector<double> weights(o.prompts);
  for (uint32_t p = 0; p < o.prompts; ++p) weights[p] = 1.0 / std::pow(p + 1.0, o.zipf);
  std::discrete_distribution<uint32_t> popularity(weights.begin(), weights.end());
  for (uint32_t i = 0; i < o.requests; ++i) t.requests.push_back({popularity(rng), suffix_len(rng)});
  return t;
}

struct Outcome {
  uint64_t blocks = 0, hit_blocks = 0, requests_hit = 0, rows_stored = 0, evictions = 0;
};

void Check(const absl::Status& s, const char* what) {
  if (s.ok()) return;
  std::fprintf(stderr, "pool_trace_bench: %s: %s\n", what, s.ToString().c_str());
  std::exit(1);
}

// Replays the trace; index_of(replica) and member_of(replica) say where a replica's calls go.
Outcome Replay(const Options& o, const Trace& trace, uint32_t replicas, bool least_loaded,
               const std::vector<SlotIndex*>& indexes, bool pooled) {
  Outcome out;
  std::vector<double> busy_until(replicas, 0);
  for (size_t i = 0; i < trace.requests.size(); ++i) {
    const Request& req = trace.requests[i];
    const double now = i * o.gap_us;
    uint32_t r = static_cast<uint32_t>(i % replicas);
    if (least_loaded) {
      r = 0;
      for (uint32_t k = 1; k < replicas; ++k) {
        if (std::max(busy_until[k], now) < std::max(busy_until[r], now)) r = k;
      }
    }
    SlotIndex& index = *indexes[pooled ? 0 : r];
    const uint32_t member = pooled ? r : 0;
    std::vector<std::string> keys;
    for (uint32_t b = 0; b < trace.prompt_blocks[req.prompt]; ++b) keys.push_back(Key(req.prompt, b));
    for (uint32_t b = 0; b < req.suffix_blocks; ++b) keys.push_back(Key(1000000 + i, b));
    const std::vector<SlotIndex::KeyState> states = index.Lookup(keys, member);
    size_t hit = 0;
    while (hit < keys.size() && states[hit] == SlotIndex::KeyState::kHit) ++hit;
    if (hit > 0) {
      const std::vector<std::string> loaded(keys.begin(), keys.begin() + hit);
      auto rows = index.PrepareLoad(loaded, nullptr, member);
      Check(rows.status(), "PrepareLoad");
      Check(index.CompleteLoad(loaded), "CompleteLoad");
      ++out.requests_hit;
    }
    const std::vector<std::string> missed(keys.begin() + hit, keys.end());
    auto store = index.PrepareStore(missed, member);
    if (store.ok() && !store->rows.empty()) {
      Check(BeginCopy(index, CopyDirection::kStore, store->rows), "BeginCopy");
      Check(EndStoreCopy(index, store->rows, true), "EndStoreCopy");
      Check(index.CompleteStore(store->keys, true), "CompleteStore");
      out.rows_stored += store->rows.size();
    }
    out.blocks += keys.size();
    out.hit_blocks += hit;
    const double service_us = (keys.size() - hit) * 1000.0 + hit * 50.0;
    busy_until[r] = std::max(busy_until[r], now) + service_us;
  }
  for (SlotIndex* index : indexes) out.evictions += index->counts().evictions;
  return out;
}

int Main(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    absl::string_view arg = argv[i];
    if (arg == "--json") {
      o.json = true;
    } else if (absl::ConsumePrefix(&arg, "--seed=") && absl::SimpleAtoi(arg, &o.seed)) {
    } else if (absl::ConsumePrefix(&arg, "--budget_rows=")) {
      o.budgets.clear();
      for (absl::string_view b : absl::StrSplit(arg, ',')) {
        uint64_t rows = 0;
        if (!absl::SimpleAtoi(b, &rows) || rows == 0) return 2;
        o.budgets.push_back(rows);
      }
    } else if (absl::ConsumePrefix(&arg, "--requests=") && absl::SimpleAtoi(arg, &o.requests)) {
    } else if (absl::ConsumePrefix(&arg, "--prompts=") && absl::SimpleAtoi(arg, &o.prompts)) {
    } else if (absl::ConsumePrefix(&arg, "--zipf=") && absl::SimpleAtod(arg, &o.zipf)) {
    } else if (absl::ConsumePrefix(&arg, "--floor=") && absl::SimpleAtod(arg, &o.floor)) {
    } else {
      std::fprintf(stderr,
                   "usage: pool_trace_bench [--json] [--seed=N] [--budget_rows=N,N,...] "
                   "[--requests=N] [--prompts=N] [--zipf=S] [--floor=F]\n");
      return 2;
    }
  }
  const Trace trace = MakeTrace(o);
  uint64_t prompt_blocks = 0;
  for (uint32_t b : trace.prompt_blocks) prompt_blocks += b;
  if (!o.json) {
    absl::PrintF(
        "Trace: seed %d, %d system prompts (%d blocks in all), Zipf %.2f, %d requests, unique "
        "suffixes of 2..16 blocks; rows of %d bytes; pool floor %.0f %%.\n",
        o.seed, o.prompts, prompt_blocks, o.zipf, o.requests, o.row_bytes, o.floor * 100);
  }
  for (uint64_t budget_rows : o.budgets) {
  if (!o.json) {
    absl::PrintF("\nTotal budget %d rows (%.1f GiB):\n\n", budget_rows,
                 budget_rows * o.row_bytes / 1073741824.0);
    absl::PrintF(
        "| replicas | routing | private token hit | pool token hit | ratio | private request hit "
        "| pool request hit | private bytes stored | pool bytes stored | private evictions | "
        "pool evictions |\n|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
  }
  for (uint32_t n : {2u, 4u, 8u}) {
    for (bool least_loaded : {false, true}) {
      const uint64_t per_member = budget_rows / n;
      std::vector<std::unique_ptr<SlotIndex>> owned;
      std::vector<SlotIndex*> privates;
      for (uint32_t r = 0; r < n; ++r) {
        auto index = SlotIndex::Create(per_member);
        Check(index.status(), "Create");
        privates.push_back(index->get());
        owned.push_back(*std::move(index));
      }
      auto pool = SlotIndex::CreatePool({static_cast<uint32_t>(per_member), n,
                                         static_cast<uint64_t>(per_member * o.floor)});
      Check(pool.status(), "CreatePool");
      for (uint32_t s = 0; s < n; ++s) Check((*pool)->segments().BringOnline(s), "online");
      const Outcome priv = Replay(o, trace, n, least_loaded, privates, false);
      const Outcome pooled = Replay(o, trace, n, least_loaded, {pool->get()}, true);
      const char* routing = least_loaded ? "least_loaded" : "round_robin";
      const double pt = double(priv.hit_blocks) / priv.blocks;
      const double qt = double(pooled.hit_blocks) / pooled.blocks;
      const double pr = double(priv.requests_hit) / o.requests;
      const double qr = double(pooled.requests_hit) / o.requests;
      const uint64_t budget_bytes = per_member * n * o.row_bytes;
      if (o.json) {
        absl::PrintF(
            "{\"replicas\": %d, \"routing\": \"%s\", \"budget_bytes\": %d, "
            "\"private_token_hit_rate\": %.4f, \"pool_token_hit_rate\": %.4f, "
            "\"private_request_hit_rate\": %.4f, \"pool_request_hit_rate\": %.4f, "
            "\"private_bytes_stored\": %d, \"pool_bytes_stored\": %d, "
            "\"private_evictions\": %d, \"pool_evictions\": %d, \"seed\": %d, \"requests\": %d}\n",
            n, routing, budget_bytes, pt, qt, pr, qr, priv.rows_stored * o.row_bytes,
            pooled.rows_stored * o.row_bytes, priv.evictions, pooled.evictions, o.seed,
            o.requests);
      } else {
        absl::PrintF("| %d | %s | %.1f %% | %.1f %% | %.2fx | %.1f %% | %.1f %% | %.1f GiB | %.1f "
                     "GiB | %d | %d |\n",
                     n, routing, pt * 100, qt * 100, pt > 0 ? qt / pt : 0.0, pr * 100, qr * 100,
                     priv.rows_stored * o.row_bytes / 1073741824.0,
                     pooled.rows_stored * o.row_bytes / 1073741824.0, priv.evictions,
                     pooled.evictions);
      }
    }
  }
  }
  return 0;
}

}  // namespace
}  // namespace kvoffload::daemon

int main(int argc, char** argv) { return kvoffload::daemon::Main(argc, argv); }
