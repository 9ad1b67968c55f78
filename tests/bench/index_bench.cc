// index_bench: throughput of SlotIndex (daemon/index/slot_index.h) on a region of 1,000,000 rows
// with 32-byte keys (the size of a block hash), one thread, batches of 1 and 64 keys.
//
//   bazel run //tests/bench:index_bench                 # markdown table
//   bazel run //tests/bench:index_bench -- --json       # one JSON object on stdout
//   bazel run //tests/bench:index_bench -- --rows=100000
//   bazel run //tests/bench:index_bench -- --pool_members=8 --floor=1000   # a pool's index
//
// With --pool_members=N the index is a pool of N online segments of rows/N rows, and
// request i is made by member i % N (so most hits are cross-member), with a per-member floor of
// --floor rows: the same work as a private index of as many rows, plus the pool's bookkeeping.
//
// Phases, each over every key once, for batch 1 then 64: stores into free rows, random-order
// Lookup hits, Touch, PrepareLoad+CompleteLoad, Lookup misses, then stores of a disjoint key set
// into the full index (every key evicts one). Every figure is keys per second over a whole phase
// (steady_clock, or with --cpu_time the thread's CPU time), call overhead and locking included;
// keys and request vectors are built before each timed phase. Runs in about 7 s on 2 cores.
#include <time.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"
#include "daemon/index/slot_index.h"
#include "daemon/index/testing/row_lists.h"

namespace kvoffload::daemon {
namespace {

using Keys = std::vector<std::string>;
using Clock = std::chrono::steady_clock;

constexpr size_t kKeyBytes = 32;

void Check(const absl::Status& status, absl::string_view what) {
  if (status.ok()) return;
  absl::FPrintF(stderr, "index_bench: %s failed: %s\n", std::string(what).c_str(),
                status.ToString().c_str());
  std::exit(1);
}

uint64_t SplitMix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// `count` distinct pseudo-random 32-byte keys; different `salt`, different keys.
Keys MakeKeys(uint64_t count, uint64_t salt) {
  Keys keys(count);
  for (uint64_t i = 0; i < count; ++i) {
    std::string& key = keys[i];
    key.resize(kKeyBytes);
    for (size_t word = 0; word < kKeyBytes / 8; ++word) {
      const uint64_t v = SplitMix64((salt << 40) ^ (i * 4 + word));
      std::memcpy(&key[word * 8], &v, 8);
    }
  }
  return keys;
}

// Requests of `batch` keys each, taking keys in the order of `order` (all of them).
std::vector<Keys> MakeRequests(const Keys& keys, const std::vector<uint32_t>& order, size_t batch) {
  std::vector<Keys> requests;
  requests.reserve((order.size() + batch - 1) / batch);
  for (size_t i = 0; i < order.size(); i += batch) {
    Keys request;
    request.reserve(batch);
    for (size_t j = i; j < order.size() && j < i + batch; ++j) request.push_back(keys[order[j]]);
    requests.push_back(std::move(request));
  }
  return requests;
}

std::vector<uint32_t> InOrder(size_t n) {
  std::vector<uint32_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  return order;
}

std::vector<uint32_t> Shuffled(size_t n, uint32_t seed) {
  std::vector<uint32_t> order = InOrder(n);
  std::shuffle(order.begin(), order.end(), std::mt19937(seed));
  return order;
}

struct Result {
  std::string operation;
  size_t batch;
  uint64_t keys;
  double seconds;
};

class Bench {
 public:
  Bench(uint64_t rows, bool cpu_time) : rows_(rows), cpu_time_(cpu_time) {}

  double Now() const {
    if (!cpu_time_) return std::chrono::duration<double>(Clock::now().time_since_epoch()).count();
    timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
  }

  // Runs `fn(request)` over every request and records keys per second.
  template <typename Fn>
  void Time(const std::string& operation, size_t batch, const std::vector<Keys>& requests, Fn fn) {
    uint64_t keys = 0;
    for (const Keys& r : requests) keys += r.size();
    // --cpu_time: this thread's CPU time instead of wall time, so that a loaded machine's
    // other processes do not count (they still share the caches).
    const double start = Now();
    for (const Keys& r : requests) fn(r);
    const double seconds = Now() - start;
    results_.push_back({operation, batch, keys, seconds});
  }

  void PrintMarkdown(uint64_t memory_bytes) const {
    absl::PrintF(
        "SlotIndex, %d rows, %d-byte keys, 1 thread; index metadata %.1f MiB "
        "(%.1f bytes/row, keys included)\n\n",
        rows_, kKeyBytes, memory_bytes / 1048576.0, static_cast<double>(memory_bytes) / rows_);
    absl::PrintF("| operation | batch | keys | seconds | keys/s | ns/key |\n");
    absl::PrintF("|---|---:|---:|---:|---:|---:|\n");
    for (const Result& r : results_) {
      absl::PrintF("| %s | %d | %d | %.3f | %s | %.0f |\n", r.operation.c_str(), r.batch, r.keys,
                   r.seconds, Grouped(static_cast<uint64_t>(r.keys / r.seconds)).c_str(),
                   r.seconds * 1e9 / r.keys);
    }
  }

  void PrintJson(uint64_t memory_bytes) const {
    absl::PrintF("{\"rows\": %d, \"key_bytes\": %d, \"memory_bytes\": %d, \"results\": [", rows_,
                 kKeyBytes, memory_bytes);
    for (size_t i = 0; i < results_.size(); ++i) {
      const Result& r = results_[i];
      absl::PrintF(
          "%s\n  {\"operation\": \"%s\", \"batch\": %d, \"keys\": %d, \"seconds\": %.6f, "
          "\"keys_per_second\": %.0f}",
          i ? "," : "", r.operation.c_str(), r.batch, r.keys, r.seconds, r.keys / r.seconds);
    }
    absl::PrintF("\n]}\n");
  }

 private:
  static std::string Grouped(uint64_t n) {
    std::string digits = absl::StrFormat("%d", n);
    std::string out;
    for (size_t i = 0; i < digits.size(); ++i) {
      if (i > 0 && (digits.size() - i) % 3 == 0) out.push_back(',');
      out.push_back(digits[i]);
    }
    return out;
  }

  uint64_t rows_;
  bool cpu_time_;
  std::vector<Result> results_;
};

int Main(int argc, char** argv) {
  bool json = false;
  bool cpu_time = false;
  uint64_t rows = 1000000;
  uint32_t pool_members = 0;
  uint64_t floor = 0;
  for (int i = 1; i < argc; ++i) {
    absl::string_view arg = argv[i];
    if (arg == "--json") {
      json = true;
    } else if (arg == "--cpu_time") {
      cpu_time = true;
    } else if (absl::ConsumePrefix(&arg, "--rows=") && absl::SimpleAtoi(arg, &rows) && rows > 0) {
    } else if (absl::ConsumePrefix(&arg, "--pool_members=") &&
               absl::SimpleAtoi(arg, &pool_members) && pool_members > 0 &&
               pool_members <= SlotIndex::kMaxMembers) {
    } else if (absl::ConsumePrefix(&arg, "--floor=") && absl::SimpleAtoi(arg, &floor)) {
    } else {
      absl::FPrintF(stderr,
                    "usage: index_bench [--json] [--cpu_time] [--rows=N] [--pool_members=1..16] "
                    "[--floor=R]\n");
      return 2;
    }
  }

  absl::StatusOr<std::unique_ptr<SlotIndex>> created;
  if (pool_members == 0) {
    created = SlotIndex::Create(rows);
  } else {
    rows -= rows % pool_members;
    created = SlotIndex::CreatePool(
        {static_cast<uint32_t>(rows / pool_members), pool_members, floor});
    for (uint32_t s = 0; created.ok() && s < pool_members; ++s) {
      Check((*created)->segments().BringOnline(s), "BringOnline");
    }
  }
  Check(created.status(), "Create");
  SlotIndex& index = **created;
  // The member making the next request (pools): round robin.
  uint32_t turn = 0;
  auto member = [&]() -> uint32_t {
    if (pool_members == 0) return 0;
    turn = turn + 1 == pool_members ? 0 : turn + 1;
    return turn;
  };
  // Two disjoint key sets as large as the index: storing one into an index full of the other
  // evicts on every key.
  const Keys keys_a = MakeKeys(rows, 1);
  const Keys keys_b = MakeKeys(rows, 2);
  Bench bench(rows, cpu_time);
  uint64_t sink = 0;

  auto store = [&](const Keys& request) {
    absl::StatusOr<SlotIndex::PrepareStoreResult> r = index.PrepareStore(request, member());
    Check(r.status(), "PrepareStore");
    sink += r->evicted_keys.size();
    // A row is READY once its store job is written and committed (SlotIndex life cycle): the
    // job engine's guards run here as they do for every store.
    Check(BeginCopy(index, CopyDirection::kStore, r->rows), "BeginCopy");
    Check(EndStoreCopy(index, r->rows, true), "EndStoreCopy");
    Check(index.CompleteStore(r->keys, true), "CompleteStore");
  };

  for (size_t batch : {size_t{1}, size_t{64}}) {
    const std::string b = absl::StrFormat("batch %d", batch);
    // Stores into free rows.
    index.Reset();
    if (index.counts().rows_free != rows) {
      Check(absl::InternalError("Reset left rows in use"), "Reset");
    }
    {
      std::vector<Keys> requests = MakeRequests(keys_a, InOrder(rows), batch);
      bench.Time("PrepareStore+CompleteStore (free rows)", batch, requests, store);
    }
    // Index full of keys_a, READY. Random-order hits.
    {
      std::vector<Keys> requests = MakeRequests(keys_a, Shuffled(rows, 7), batch);
      bench.Time("Lookup (hits)", batch, requests, [&](const Keys& request) {
        for (SlotIndex::KeyState s : index.Lookup(request, member())) sink += static_cast<int>(s);
      });
      bench.Time("Touch", batch, requests,
                 [&](const Keys& request) { Check(index.Touch(request), "Touch"); });
      bench.Time("PrepareLoad+CompleteLoad", batch, requests, [&](const Keys& request) {
        absl::StatusOr<std::vector<uint64_t>> r = index.PrepareLoad(request, nullptr, member());
        Check(r.status(), "PrepareLoad");
        sink += r->size();
        Check(index.CompleteLoad(request), "CompleteLoad");
      });
    }
    {
      std::vector<Keys> requests = MakeRequests(keys_b, Shuffled(rows, 8), batch);
      bench.Time("Lookup (misses)", batch, requests, [&](const Keys& request) {
        for (SlotIndex::KeyState s : index.Lookup(request, member())) sink += static_cast<int>(s);
      });
      // Every key of keys_b evicts one of keys_a.
      bench.Time("PrepareStore+CompleteStore (evicting)", batch, requests, store);
    }
    const SlotIndex::Counts c = index.counts();
    if (c.rows_ready != rows || c.rows_writing != 0 || c.rows_reading != 0) {
      Check(absl::InternalError("unexpected row states after a phase"), "counts");
    }
  }
  const uint64_t memory_bytes = index.MemoryBytes();
  if (json) {
    bench.PrintJson(memory_bytes);
  } else {
    bench.PrintMarkdown(memory_bytes);
  }
  std::fflush(stdout);
  absl::FPrintF(stderr, "(checksum %d, evictions %d)\n", sink, index.counts().evictions);
  return 0;
}

}  // namespace
}  // namespace kvoffload::daemon

int main(int argc, char** argv) { return kvoffload::daemon::Main(argc, argv); }
