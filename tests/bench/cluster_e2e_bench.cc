// cluster_e2e_bench: the cluster tier end to end, through real kvoffloadd processes (host
// backend) that share a local Redis Cluster (daemon/tier/cluster/testing/local_cluster.h: 3
// masters + 1 replica each, Debian's redis-server on loopback). Each node is a daemon with its own
// runtime directory, the C++ SchedulerClient, and a WorkerClient of this process whose KV blocks
// are memfds (client/host/host_kv_memory.h) mapped here too, so that every stored row carries a
// pattern derived from its key and every loaded row is compared with that pattern (wrong bytes).
// Prints one JSON object per line.
//
//   --mode=trace: N nodes (--nodes), a trace of requests with shared prefixes (documents or system
//     prompts with Zipf popularity + per-conversation histories), each request sent to a node
//     picked at random (the router does not know the cache). Per request, as vLLM's scheduler with
//     the plugin does: Lookup; while a key before the first MISS is HIT_PENDING, wait a step
//     (--step_ms) and look up again (at most --max_steps); load the leading HITs (byte-checked);
//     store the rest. Run twice on the same trace: daemons with --cluster_tier, then without.
//     Per node: token hit rate, and split by who computed each block first: "own" = blocks this
//     node computed first (its re-use), "foreign" = blocks another node computed first; a block's
//     first request anywhere is "cold" (a miss for every design). Lookup RPC latency p50/p99.
//   --mode=bandwidth: rounds of [redis-benchmark SET (the invocation of run_cluster_tier_bench.sh:
//     -d row -c 4 -n 512 -r 64), redis-benchmark SET of new keys (-r 10^9), node A stores --rows
//     new rows and the tier spills them (first commit → Admin.Stats cluster spills settled),
//     redis-benchmark GET, node B promotes them (first Lookup → all HIT) and loads them
//     (byte-checked)]; then a prefix of --prefix_rows rows promoted and loaded on a fresh node;
//     then a master SIGSTOPped (LocalCluster::Freeze) while a node looks up and loads prefixes
//     held in the cluster: every scheduler call timed against --cluster_tier_lookup_timeout_ms.
#include <hiredis/hiredis.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "client/host/host_kv_memory.h"
#include "client/kvoffload_client.h"
#include "daemon/tier/cluster/testing/local_cluster.h"
#include "grpcpp/grpcpp.h"
#include "tests/bench/bench_env.h"
#include "tests/integration/harness.h"

ABSL_FLAG(std::string, mode, "trace", "trace or bandwidth");
ABSL_FLAG(uint64_t, seed, 42, "trace and routing seed");
ABSL_FLAG(int32_t, poll_us, 1000, "Lookup / Stats poll interval while waiting (bandwidth mode)");
ABSL_FLAG(int64_t, lookup_timeout_ms, 100, "--cluster_tier_lookup_timeout_ms (the default)");
ABSL_FLAG(int64_t, command_timeout_ms, 1000, "--cluster_tier_command_timeout_ms (the default)");
// Trace.
ABSL_FLAG(int32_t, nodes, 3, "trace: kvoffloadd processes (nodes)");
ABSL_FLAG(uint64_t, trace_row_bytes, 256 << 10, "trace: row bytes (one 16-token block a row)");
ABSL_FLAG(uint64_t, trace_rows, 512, "trace: region rows per node");
ABSL_FLAG(int32_t, docs, 8, "trace: shared prefixes (documents / system prompts), Zipf(1.1)");
ABSL_FLAG(int32_t, doc_blocks, 32, "trace: blocks of a shared prefix");
ABSL_FLAG(int32_t, conversations, 48, "trace: conversations (each on one shared prefix)");
ABSL_FLAG(int32_t, conv_blocks, 16, "trace: blocks of a conversation's full history");
ABSL_FLAG(int32_t, requests, 1500, "trace: requests");
ABSL_FLAG(int32_t, step_ms, 5, "trace: an engine step (the wait before looking up again)");
ABSL_FLAG(int32_t, max_steps, 40, "trace: steps a request waits on pending keys at most");
ABSL_FLAG(int64_t, trace_promote_timeout_ms, 500, "trace: --tier_promote_timeout_ms (default)");
// Bandwidth.
ABSL_FLAG(uint64_t, row_bytes, 2ull << 20, "bandwidth: row bytes = redis-benchmark -d");
ABSL_FLAG(uint64_t, rows, 256, "bandwidth: rows spilled and promoted per round");
ABSL_FLAG(int32_t, rounds, 5, "bandwidth: rounds");
ABSL_FLAG(int32_t, clients, 4,
          "redis-benchmark -c = the daemon's --cluster_tier_threads and connections per node");
ABSL_FLAG(int32_t, redis_benchmark_requests, 512, "redis-benchmark -n");
ABSL_FLAG(int32_t, spills_in_flight, 0, "--tier_spills_in_flight (0: the daemon's default, 8)");
ABSL_FLAG(uint64_t, prefix_rows, 1024, "bandwidth: rows of the promoted prefix (0: skip)");
ABSL_FLAG(uint64_t, load_batch, 256, "bandwidth: rows per load job (the worker's blocks)");
ABSL_FLAG(int32_t, down_groups, 48, "master down: prefixes looked up with a master SIGSTOPped");
ABSL_FLAG(int32_t, down_group_rows, 8, "master down: rows of each prefix");
ABSL_FLAG(int32_t, bound_slack_ms, 25,
          "master down: a Lookup RPC may exceed --lookup_timeout_ms by this (the RPC's own time, "
          "scheduling on a loaded machine) before it counts as a delayed step");

namespace kvoffload::bench {
namespace {

using client::Direction;
using client::KeyState;
using client::SchedulerClient;
using client::WorkerClient;
using Clock = std::chrono::steady_clock;
using testing::DaemonProcess;
using tier::cluster::testing::LocalCluster;

std::vector<DaemonProcess*> g_daemons;  // stopped by Die (they would keep our stdout open)
std::unique_ptr<LocalCluster> g_cluster;

[[noreturn]] void Die(const std::string& what) {
  std::fprintf(stderr, "cluster_e2e_bench: %s\n", what.c_str());
  for (DaemonProcess* d : g_daemons) d->Stop();
  g_cluster.reset();
  std::fflush(stdout);
  std::exit(1);
}
template <typename T>
T Ok(absl::StatusOr<T> v, const std::string& what) {
  if (!v.ok()) Die(absl::StrCat(what, ": ", v.status().ToString()));
  return *std::move(v);
}
void Ok(const absl::Status& s, const std::string& what) {
  if (!s.ok()) Die(absl::StrCat(what, ": ", s.ToString()));
}

// ---- A node: a daemon, its engine, a worker of this process -------------------------------------

struct Node {
  int index = 0;
  std::unique_ptr<DaemonProcess> daemon;
  std::unique_ptr<v1::Admin::Stub> admin;
  std::unique_ptr<SchedulerClient> scheduler;
  client::HostKvMemory kv;
  uint8_t* map = nullptr;  // the worker's memfd, mapped here too
  uint64_t map_bytes = 0, offset = 0, stride = 0, page = 0;
  std::unique_ptr<WorkerClient> worker;
  client::EngineSpec spec;
  uint64_t job = 1;
  std::vector<double> lookup_ms;  // every Lookup RPC, at the client
  uint64_t wrong_bytes = 0, rows_checked = 0;
  double check_seconds = 0;  // this process poisoning and comparing rows (not the daemon's)

  uint8_t* Block(uint64_t b) { return map + offset + b * stride; }
  uint64_t Blocks() const { return kv.blocks(); }

  v1::TierStats Tier() {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    v1::StatsRequest request;
    v1::StatsResponse response;
    grpc::Status s = admin->Stats(&context, request, &response);
    if (!s.ok()) Die("Admin.Stats: " + s.error_message());
    for (const v1::TierStats& t : response.tiers()) {
      if (t.name() == "cluster") return t;
    }
    return {};
  }

  std::vector<KeyState> Lookup(const std::vector<std::string>& keys) {
    const auto t0 = Clock::now();
    auto states = Ok(scheduler->Lookup(keys), "Lookup");
    lookup_ms.push_back(Since(t0) * 1e3);
    return states;
  }

  // vLLM's scheduler with the plugin: Lookup; while a key before the first MISS is HIT_PENDING,
  // wait a step and look up again, at most `max_steps` times (then the HITs before the first
  // pending key). Returns how many leading keys to load.
  struct WaitCounts {
    uint64_t pending_lookups = 0, steps_waited = 0, waits_exhausted = 0;
  };
  size_t LookupPrefix(const std::vector<std::string>& keys, int max_steps, WaitCounts* w) {
    for (int step = 0;; ++step) {
      const std::vector<KeyState> states = Lookup(keys);
      size_t h = 0;
      bool pending = false;
      for (; h < states.size() && states[h] != KeyState::kMiss; ++h) {
        pending |= states[h] == KeyState::kHitPending;
      }
      if (!pending) return h;
      ++w->pending_lookups;
      if (step >= max_steps) {
        h = 0;
        while (h < states.size() && states[h] == KeyState::kHit) ++h;
        ++w->waits_exhausted;
        return h;
      }
      ++w->steps_waited;
      std::this_thread::sleep_for(std::chrono::milliseconds(absl::GetFlag(FLAGS_step_ms)));
    }
  }

  void Job(Direction d, const std::vector<uint64_t>& blocks, const std::vector<uint64_t>& rows,
           uint64_t epoch) {
    client::JobRequest request;
    request.job_id = job++;
    request.direction = d;
    request.gpu_blocks = blocks;
    request.rows = rows;
    request.region_epoch = epoch;
    Ok(worker->Submit(request), "Submit");
    auto done = Ok(worker->WaitFinished(request.job_id, absl::Seconds(120)), "WaitFinished");
    Ok(done.status, "job");
  }

  // Stores `keys` (those not present), Blocks() a job; each block gets its key's pattern first
  // unless `patterned` (the caller wrote block i for keys[i]). Returns when the first batch was
  // committed (its rows READY).
  Clock::time_point Store(const std::vector<std::string>& keys, bool patterned = false) {
    Clock::time_point first{};
    const size_t batch = patterned ? keys.size() : Blocks();
    for (size_t i = 0; i < keys.size(); i += std::min<size_t>(batch, 64)) {
      const size_t end = std::min(keys.size(), i + std::min<size_t>(batch, 64));
      std::vector<std::string> part(keys.begin() + i, keys.begin() + end);
      auto prepared = Ok(scheduler->PrepareStore(part), "PrepareStore");
      if (prepared.keys.empty()) continue;
      std::vector<uint64_t> blocks;
      for (size_t j = 0; j < prepared.keys.size(); ++j) {
        const size_t at = std::find(part.begin(), part.end(), prepared.keys[j]) - part.begin();
        const uint64_t b = patterned ? i + at : j;
        if (!patterned) WritePattern(Block(b), page, prepared.keys[j]);
        blocks.push_back(b);
      }
      Job(Direction::kStore, blocks, prepared.rows, prepared.region_epoch);
      if (first == Clock::time_point{}) first = Clock::now();
      Ok(scheduler->CompleteStore(prepared.keys, true), "CompleteStore");
    }
    return first;
  }

  // Loads `keys` (all present), Blocks() a job, and compares every row with its key's pattern.
  void LoadAndCheck(const std::vector<std::string>& keys) {
    for (size_t i = 0; i < keys.size(); i += Blocks()) {
      std::vector<std::string> part(keys.begin() + i,
                                    keys.begin() + std::min<size_t>(keys.size(), i + Blocks()));
      std::vector<uint64_t> blocks(part.size());
      const auto c0 = Clock::now();
      for (size_t j = 0; j < part.size(); ++j) {
        blocks[j] = j;
        std::memset(Block(j), 0xA5, page);
      }
      check_seconds += Since(c0);
      uint64_t epoch = 0;
      auto rows = Ok(scheduler->PrepareLoad(part, &epoch), "PrepareLoad");
      Job(Direction::kLoad, blocks, rows, epoch);
      Ok(scheduler->CompleteLoad(part), "CompleteLoad");
      const auto c1 = Clock::now();
      for (size_t j = 0; j < part.size(); ++j) {
        wrong_bytes += WrongBytes(Block(j), page, part[j]);
        ++rows_checked;
      }
      check_seconds += Since(c1);
    }
  }

  static uint64_t Settled(const v1::TierStats& t) {
    return t.spills_ok() + t.spills_gone() + t.spills_already_held() + t.spills_failed() +
           t.spill_queue_dropped();
  }
  v1::TierStats WaitSpilled(uint64_t n, absl::Duration timeout = absl::Seconds(300)) {
    const absl::Time deadline = absl::Now() + timeout;
    for (;;) {
      v1::TierStats t = Tier();
      if (Settled(t) >= n) return t;
      if (absl::Now() > deadline) Die(absl::StrCat("spills did not reach ", n));
      std::this_thread::sleep_for(std::chrono::microseconds(absl::GetFlag(FLAGS_poll_us)));
    }
  }
  // Lookup every poll until every key is HIT; false on a MISS or after 120 s.
  bool LookupUntilHit(const std::vector<std::string>& keys, int* lookups = nullptr) {
    const auto deadline = Clock::now() + std::chrono::seconds(120);
    for (int n = 1;; ++n) {
      const std::vector<KeyState> states = Lookup(keys);
      bool all = true, miss = false;
      for (KeyState s : states) all &= s == KeyState::kHit, miss |= s == KeyState::kMiss;
      if (lookups) *lookups = n;
      if (all) return true;
      if (miss || Clock::now() > deadline) return false;
      std::this_thread::sleep_for(std::chrono::microseconds(absl::GetFlag(FLAGS_poll_us)));
    }
  }
};

std::vector<std::string> TierArgs(const std::string& url, int64_t promote_timeout_ms) {
  if (url.empty()) return {};
  const int clients = absl::GetFlag(FLAGS_clients);
  std::vector<std::string> args = {
      "--cluster_tier=" + url,
      absl::StrCat("--cluster_tier_lookup_timeout_ms=", absl::GetFlag(FLAGS_lookup_timeout_ms)),
      absl::StrCat("--cluster_tier_command_timeout_ms=", absl::GetFlag(FLAGS_command_timeout_ms)),
      absl::StrCat("--cluster_tier_threads=", clients),
      absl::StrCat("--cluster_tier_connections_per_node=", clients),
      absl::StrCat("--tier_promote_timeout_ms=", promote_timeout_ms)};
  if (absl::GetFlag(FLAGS_spills_in_flight) > 0) {
    args.push_back(absl::StrCat("--tier_spills_in_flight=", absl::GetFlag(FLAGS_spills_in_flight)));
  }
  return args;
}

std::unique_ptr<Node> StartNode(int index, const std::string& url, uint64_t row_bytes,
                                uint64_t rows, uint64_t worker_blocks, int64_t promote_timeout_ms) {
  auto node = std::make_unique<Node>();
  node->index = index;
  std::vector<std::string> args = {
      absl::StrCat("--max_region_bytes=", rows * row_bytes + (64 << 20))};
  for (std::string& a : TierArgs(url, promote_timeout_ms)) args.push_back(std::move(a));
  node->daemon = Ok(DaemonProcess::Start(args), "start kvoffloadd");
  g_daemons.push_back(node->daemon.get());
  node->admin = node->daemon->AdminStub();
  node->spec.engine_id = "clusterbench";  // the same engine on every node: one namespace
  node->spec.num_layers = 1;
  node->spec.page_bytes = row_bytes;
  node->spec.budget_bytes = rows * row_bytes;
  node->spec.rows_assigned_by_engine = false;
  node->spec.model_identity = "cluster-e2e-bench";
  node->scheduler =
      Ok(SchedulerClient::Open(node->daemon->data_socket(), node->spec), "OpenEngine");
  Ok(node->scheduler->WaitUntilReady(absl::Seconds(120)), "WaitUntilReady");
  Ok(node->kv.Create("stacked_kv", 1, row_bytes, worker_blocks), "HostKvMemory");
  node->kv.Fill(7);
  const std::vector<common::TensorHandle> handles = node->kv.Handles();
  if (handles.size() != 1) Die("expected one KV tensor");
  const common::TensorHandle& h = handles[0];
  int fd = -1;
  if (!absl::SimpleAtoi(absl::StripPrefix(h.allocation_handle, "memfd:"), &fd)) {
    Die("handle " + h.allocation_handle);
  }
  node->map_bytes = h.allocation_bytes;
  void* m = mmap(nullptr, h.allocation_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (m == MAP_FAILED) Die("mmap of the worker's memfd");
  node->map = static_cast<uint8_t*>(m);
  node->offset = h.offset, node->stride = h.block_stride_bytes, node->page = h.page_bytes;
  if (node->page != row_bytes) Die("page != row bytes");
  client::WorkerOptions options;
  options.socket_path = node->daemon->data_socket();
  options.spec = node->spec;
  options.tensors = handles;
  node->worker = Ok(WorkerClient::Connect(options), "WorkerClient::Connect");
  return node;
}

void StopNode(std::unique_ptr<Node>& node) {
  if (!node) return;
  node->worker.reset();
  node->scheduler.reset();
  node->admin.reset();
  if (node->map) munmap(node->map, node->map_bytes);
  g_daemons.erase(std::remove(g_daemons.begin(), g_daemons.end(), node->daemon.get()),
                  g_daemons.end());
  if (node->daemon) node->daemon->Stop();
  node.reset();
}

std::vector<std::string> Keys(const std::string& prefix, uint64_t n) {
  std::vector<std::string> keys;
  for (uint64_t i = 0; i < n; ++i) keys.push_back(absl::StrCat(prefix, "-", i));
  return keys;
}

std::unique_ptr<LocalCluster> StartCluster() {
  tier::cluster::testing::LocalClusterOptions options;  // 3 masters + 1 replica each
  options.config_lines = {"maxmemory 6gb", "maxmemory-policy allkeys-lru"};
  return Ok(LocalCluster::Start(options), "LocalCluster::Start");
}

// ---- The trace ----------------------------------------------------------------------------------

struct NodeCounts {
  uint64_t requested = 0, loaded = 0;
  uint64_t own = 0, own_hit = 0, foreign = 0, foreign_hit = 0, cold = 0;
  // Foreign blocks this node asks for the first time (no design but a shared tier hits them).
  uint64_t foreign_first = 0, foreign_first_hit = 0;
  Node::WaitCounts wait;
};

std::string LatencyJson(const std::vector<double>& ms) {
  return absl::StrFormat("{\"n\": %d, \"p50_ms\": %.3f, \"p99_ms\": %.3f, \"max_ms\": %.3f}",
                         ms.size(), Percentile(ms, 0.5), Percentile(ms, 0.99), Percentile(ms, 1.0));
}

// One pass over the trace; returns the JSON line (also printed).
struct TraceSummary {
  double hit = 0, own = 0, foreign = 0;
  uint64_t wrong = 0;
};

TraceSummary RunTraceOnce(const std::string& url) {
  const bool with_tier = !url.empty();
  const uint64_t R = absl::GetFlag(FLAGS_trace_row_bytes);
  const uint64_t rows = absl::GetFlag(FLAGS_trace_rows);
  const int n_nodes = absl::GetFlag(FLAGS_nodes);
  const int docs = absl::GetFlag(FLAGS_docs), doc_blocks = absl::GetFlag(FLAGS_doc_blocks);
  const int convs = absl::GetFlag(FLAGS_conversations);
  const int conv_blocks = absl::GetFlag(FLAGS_conv_blocks);
  const int max_steps = absl::GetFlag(FLAGS_max_steps);
  std::vector<std::unique_ptr<Node>> nodes;
  for (int i = 0; i < n_nodes; ++i) {
    nodes.push_back(StartNode(i, url, R, rows, doc_blocks + conv_blocks,
                              absl::GetFlag(FLAGS_trace_promote_timeout_ms)));
  }
  // The trace: the same for both passes (its own generator), the routing too.
  std::mt19937_64 rng(absl::GetFlag(FLAGS_seed));
  std::vector<double> zipf;
  double z = 0;
  for (int i = 0; i < docs; ++i) zipf.push_back(z += 1.0 / std::pow(i + 1, 1.1));
  std::vector<int> doc_of(convs), turn(convs, 0);
  for (int c = 0; c < convs; ++c) {
    const double u = std::uniform_real_distribution<double>(0, z)(rng);
    doc_of[c] = std::lower_bound(zipf.begin(), zipf.end(), u) - zipf.begin();
  }
  std::map<std::string, int> origin;  // block key → the node that computed it first
  std::vector<std::set<std::string>> seen(n_nodes);  // blocks each node was asked for
  std::vector<NodeCounts> counts(n_nodes);
  const int requests = absl::GetFlag(FLAGS_requests);
  const auto t0 = Clock::now();
  for (int q = 0; q < requests; ++q) {
    const int c = std::uniform_int_distribution<int>(0, convs - 1)(rng);
    const int n = std::uniform_int_distribution<int>(0, n_nodes - 1)(rng);  // cache-blind router
    turn[c] = turn[c] % (conv_blocks / 2) + 1;
    std::vector<std::string> keys;
    for (int b = 0; b < doc_blocks; ++b) keys.push_back(absl::StrCat("doc", doc_of[c], "-", b));
    for (int b = 0; b < 2 * turn[c]; ++b) {
      keys.push_back(absl::StrCat("doc", doc_of[c], "/conv", c, "-", b));
    }
    Node& node = *nodes[n];
    NodeCounts& k = counts[n];
    const size_t hits = node.LookupPrefix(keys, max_steps, &k.wait);
    if (hits > 0) node.LoadAndCheck(std::vector<std::string>(keys.begin(), keys.begin() + hits));
    if (hits < keys.size()) node.Store(std::vector<std::string>(keys.begin() + hits, keys.end()));
    for (size_t i = 0; i < keys.size(); ++i) {
      const bool hit = i < hits;
      auto [it, first] = origin.emplace(keys[i], n);
      if (first) {
        ++k.cold;
      } else if (it->second == n) {
        ++k.own, k.own_hit += hit;
      } else {
        ++k.foreign, k.foreign_hit += hit;
        if (!seen[n].count(keys[i])) ++k.foreign_first, k.foreign_first_hit += hit;
      }
      seen[n].insert(keys[i]);
    }
    k.requested += keys.size();
    k.loaded += hits;
  }
  const double seconds = Since(t0);
  NodeCounts all;
  std::vector<double> all_ms;
  uint64_t wrong = 0, checked = 0;
  std::vector<std::string> per_node;
  uint64_t spills_ok = 0, already = 0, promotions_ok = 0, timed_out = 0, failed = 0, corrupt = 0;
  for (int i = 0; i < n_nodes; ++i) {
    const NodeCounts& k = counts[i];
    Node& node = *nodes[i];
    const v1::TierStats t = with_tier ? node.Tier() : v1::TierStats();
    spills_ok += t.spills_ok(), already += t.spills_already_held();
    promotions_ok += t.promotions_ok(), timed_out += t.promotions_timed_out();
    failed += t.promotions_failed(), corrupt += t.read_corrupt();
    all.requested += k.requested, all.loaded += k.loaded, all.own += k.own;
    all.own_hit += k.own_hit, all.foreign += k.foreign, all.foreign_hit += k.foreign_hit;
    all.foreign_first += k.foreign_first, all.foreign_first_hit += k.foreign_first_hit;
    all.cold += k.cold, all.wait.pending_lookups += k.wait.pending_lookups;
    all.wait.steps_waited += k.wait.steps_waited;
    all.wait.waits_exhausted += k.wait.waits_exhausted;
    all_ms.insert(all_ms.end(), node.lookup_ms.begin(), node.lookup_ms.end());
    wrong += node.wrong_bytes, checked += node.rows_checked;
    per_node.push_back(absl::StrFormat(
        "{\"node\": %d, \"blocks_requested\": %d, \"blocks_loaded\": %d, \"token_hit_rate\": %.4f, "
        "\"own_blocks\": %d, \"own_hit_rate\": %.4f, \"foreign_blocks\": %d, "
        "\"foreign_hit_rate\": %.4f, \"foreign_first_blocks\": %d, "
        "\"foreign_first_hit_rate\": %.4f, \"cold_blocks\": %d, \"lookup\": %s, "
        "\"pending_lookups\": %d, \"steps_waited\": %d, \"waits_exhausted\": %d, "
        "\"rows_checked\": %d, \"wrong_bytes\": %d, \"spills_ok\": %d, "
        "\"spills_already_held\": %d, \"promotions_ok\": %d, \"promotions_timed_out\": %d, "
        "\"promotions_failed\": %d}",
        i, k.requested, k.loaded, k.requested ? double(k.loaded) / k.requested : 0, k.own,
        k.own ? double(k.own_hit) / k.own : 0, k.foreign,
        k.foreign ? double(k.foreign_hit) / k.foreign : 0, k.foreign_first,
        k.foreign_first ? double(k.foreign_first_hit) / k.foreign_first : 0, k.cold,
        LatencyJson(node.lookup_ms), k.wait.pending_lookups, k.wait.steps_waited,
        k.wait.waits_exhausted, node.rows_checked, node.wrong_bytes, t.spills_ok(),
        t.spills_already_held(), t.promotions_ok(), t.promotions_timed_out(),
        t.promotions_failed()));
  }
  for (auto& node : nodes) StopNode(node);
  TraceSummary s;
  s.hit = all.requested ? double(all.loaded) / all.requested : 0;
  s.own = all.own ? double(all.own_hit) / all.own : 0;
  s.foreign = all.foreign ? double(all.foreign_hit) / all.foreign : 0;
  s.wrong = wrong;
  Emit(absl::StrFormat(
      "{\"phase\": \"trace\", \"tier\": %s, \"nodes\": %d, \"row_bytes\": %d, "
      "\"region_rows\": %d, \"docs\": %d, \"doc_blocks\": %d, \"conversations\": %d, "
      "\"conv_blocks\": %d, \"working_set_rows\": %d, \"requests\": %d, \"routing\": \"uniform "
      "random\", \"step_ms\": %d, \"max_steps\": %d, \"blocks_requested\": %d, "
      "\"blocks_loaded\": %d, \"token_hit_rate\": %.4f, \"own_blocks\": %d, "
      "\"own_hit_rate\": %.4f, \"foreign_blocks\": %d, \"foreign_hit_rate\": %.4f, "
      "\"foreign_over_own\": %.4f, \"foreign_first_blocks\": %d, "
      "\"foreign_first_hit_rate\": %.4f, \"cold_blocks\": %d, \"lookup\": %s, "
      "\"pending_lookups\": %d, \"steps_waited\": %d, \"waits_exhausted\": %d, "
      "\"rows_checked\": %d, \"wrong_bytes\": %d, \"spills_ok\": %d, \"spills_already_held\": %d, "
      "\"promotions_ok\": %d, \"promotions_timed_out\": %d, \"promotions_failed\": %d, "
      "\"read_corrupt\": %d, \"seconds\": %.2f, \"loadavg\": %s, \"per_node\": [%s]}",
      with_tier ? "true" : "false", n_nodes, R, rows, docs, doc_blocks, convs, conv_blocks,
      docs * doc_blocks + convs * conv_blocks, requests, absl::GetFlag(FLAGS_step_ms), max_steps,
      all.requested, all.loaded, s.hit, all.own, s.own, all.foreign, s.foreign,
      s.own > 0 ? s.foreign / s.own : 0, all.foreign_first,
      all.foreign_first ? double(all.foreign_first_hit) / all.foreign_first : 0, all.cold,
      LatencyJson(all_ms), all.wait.pending_lookups, all.wait.steps_waited,
      all.wait.waits_exhausted, checked, wrong, spills_ok, already, promotions_ok, timed_out,
      failed, corrupt, seconds, LoadAvg(), absl::StrJoin(per_node, ", ")));
  return s;
}

int RunTrace() {
  Emit(absl::StrFormat("{\"phase\": \"machine\", \"machine\": %s, \"loadavg\": %s}", Machine(),
                       LoadAvg()));
  g_cluster = StartCluster();
  const TraceSummary with = RunTraceOnce(g_cluster->url());
  const TraceSummary without = RunTraceOnce("");
  Emit(absl::StrFormat(
      "{\"phase\": \"trace_summary\", \"hit_rate_with\": %.4f, \"hit_rate_without\": %.4f, "
      "\"own_hit_rate_with\": %.4f, \"foreign_hit_rate_with\": %.4f, "
      "\"foreign_over_own_with\": %.4f, \"own_hit_rate_without\": %.4f, "
      "\"foreign_hit_rate_without\": %.4f, \"foreign_over_own_without\": %.4f, "
      "\"wrong_bytes\": %d}",
      with.hit, without.hit, with.own, with.foreign, with.own > 0 ? with.foreign / with.own : 0,
      without.own, without.foreign, without.own > 0 ? without.foreign / without.own : 0,
      with.wrong + without.wrong));
  g_cluster.reset();
  return 0;
}

// ---- Bandwidth, the prefix, a master down -------------------------------------------------------

// redis-benchmark --csv: requests per second of `test` (SET, GET) at --row_bytes, -c --clients.
double RedisBenchmarkRps(const std::string& test, uint64_t keyspace, int requests) {
  const std::string cmd =
      absl::StrCat("redis-benchmark -h 127.0.0.1 -p ", g_cluster->nodes()[0].port, " --cluster -t ",
                   test, " -d ", absl::GetFlag(FLAGS_row_bytes), " -n ", requests, " -c ",
                   absl::GetFlag(FLAGS_clients), " -r ", keyspace, " --csv 2>&1");
  FILE* p = popen(cmd.c_str(), "r");
  if (p == nullptr) Die("popen redis-benchmark");
  std::string out;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), p)) > 0) out.append(buf, n);
  if (pclose(p) != 0) Die("redis-benchmark failed: " + out.substr(0, 2000));
  for (absl::string_view line : absl::StrSplit(out, '\n')) {
    std::vector<std::string> f = absl::StrSplit(line, ',');
    if (f.size() < 2 || f[0] != absl::StrCat("\"", test, "\"")) continue;
    double rps = 0;
    if (absl::SimpleAtod(
            absl::StripAsciiWhitespace(absl::string_view(f[1]).substr(1, f[1].size() - 2)), &rps)) {
      return rps;
    }
  }
  Die("no " + test + " line in redis-benchmark's output: " + out);
}

void FlushAll() {
  for (int i = 0; i < static_cast<int>(g_cluster->nodes().size()); ++i) {
    auto reply = g_cluster->Command(i, {"ROLE"});
    if (!reply.ok()) continue;
    const redisReply* r = reply->get();
    if (r->type == REDIS_REPLY_ARRAY && r->elements > 0 &&
        std::string(r->element[0]->str, r->element[0]->len) == "master") {
      Ok(g_cluster->Command(i, {"FLUSHALL"}).status(), "FLUSHALL");
    }
  }
}

int RunBandwidth() {
  const uint64_t R = absl::GetFlag(FLAGS_row_bytes);
  const uint64_t N = absl::GetFlag(FLAGS_rows);
  const double gb = 1e9;
  const int64_t big_timeout = 60000;
  Emit(absl::StrFormat("{\"phase\": \"machine\", \"machine\": %s, \"loadavg\": %s}", Machine(),
                       LoadAvg()));
  g_cluster = StartCluster();
  const std::string url = g_cluster->url();
  {
    // A: N pre-patterned blocks, region N rows (+ slack); B: promotes N rows, loads 64 a job.
    std::unique_ptr<Node> a = StartNode(0, url, R, N + 16, N, big_timeout);
    std::unique_ptr<Node> b = StartNode(1, url, R, N + 16, std::min<uint64_t>(N, 64), big_timeout);
    const int rb_n = absl::GetFlag(FLAGS_redis_benchmark_requests);
    for (int round = 0; round < absl::GetFlag(FLAGS_rounds); ++round) {
      FlushAll();
      const double rb_set = RedisBenchmarkRps("SET", 64, rb_n) * R;
      const double rb_set_new = RedisBenchmarkRps("SET", 1000000000, rb_n / 2) * R;
      // Spill: N new keys on A.
      const std::vector<std::string> keys = Keys(absl::StrCat("bw", round), N);
      for (uint64_t i = 0; i < N; ++i) WritePattern(a->Block(i), R, keys[i]);
      const v1::TierStats a0 = a->Tier();
      const auto first = a->Store(keys, /*patterned=*/true);
      const double stores_s = Since(first);
      const uint64_t spilled_when_stored = a->Tier().spills_ok() - a0.spills_ok();
      const v1::TierStats a1 = a->WaitSpilled(Node::Settled(a0) + N);
      const double spill_s = Since(first);
      const uint64_t spill_bytes = a1.spill_bytes() - a0.spill_bytes();
      const uint64_t spilled = a1.spills_ok() - a0.spills_ok();
      const double rb_get = RedisBenchmarkRps("GET", 64, rb_n) * R;
      // Promote: B looks the N keys up until all HIT, then loads them (byte-checked).
      const v1::TierStats b0 = b->Tier();
      const uint64_t wrong0 = b->wrong_bytes;
      const auto p0 = Clock::now();
      int lookups = 0;
      if (!b->LookupUntilHit(keys, &lookups)) Die("B did not promote the round's rows");
      const double promote_s = Since(p0);
      const double check0 = b->check_seconds;
      b->LoadAndCheck(keys);
      const double loaded_s = Since(p0) - (b->check_seconds - check0);
      const v1::TierStats b1 = b->Tier();
      const uint64_t promoted_bytes = b1.promotion_bytes() - b0.promotion_bytes();
      const double spill_gbps = spill_bytes / spill_s, promote_gbps = promoted_bytes / promote_s;
      Emit(absl::StrFormat(
          "{\"phase\": \"round\", \"round\": %d, \"row_bytes\": %d, \"rows\": %d, "
          "\"clients\": %d, \"spills_in_flight\": %d, \"redis_benchmark_set_gbps\": %.3f, "
          "\"redis_benchmark_set_new_keys_gbps\": %.3f, \"redis_benchmark_get_gbps\": %.3f, "
          "\"spills_ok\": %d, \"spill_bytes\": %d, \"spill_seconds\": %.4f, \"spill_gbps\": %.3f, "
          "\"stores_seconds\": %.4f, \"spilled_when_stores_done\": %d, "
          "\"spill_ratio\": %.3f, \"spill_ratio_new_keys\": %.3f, \"promotions_ok\": %d, "
          "\"promotion_bytes\": %d, \"promote_seconds\": %.4f, \"promote_gbps\": %.3f, "
          "\"promote_ratio\": %.3f, \"lookups\": %d, \"promoted_and_loaded_s\": %.4f, "
          "\"rows_checked\": %d, \"wrong_bytes\": %d, \"promotions_failed\": %d, "
          "\"loadavg\": %s}",
          round, R, N, absl::GetFlag(FLAGS_clients), absl::GetFlag(FLAGS_spills_in_flight),
          rb_set / gb, rb_set_new / gb, rb_get / gb, spilled, spill_bytes, spill_s, spill_gbps / gb,
          stores_s, spilled_when_stored, spill_gbps / rb_set, spill_gbps / rb_set_new,
          b1.promotions_ok() - b0.promotions_ok(), promoted_bytes, promote_s, promote_gbps / gb,
          promote_gbps / rb_get, lookups, loaded_s, N, b->wrong_bytes - wrong0,
          b1.promotions_failed() - b0.promotions_failed(), LoadAvg()));
    }
    StopNode(a);
    StopNode(b);
  }
  // The prefix: A stores it 64 rows a job (its region holds load_batch rows: older rows are
  // evicted once spilled), B (a fresh node, region = the prefix) promotes all of it, then loads it
  // load_batch rows a job, byte-checked.
  const uint64_t P = absl::GetFlag(FLAGS_prefix_rows);
  const uint64_t LB = std::min<uint64_t>(absl::GetFlag(FLAGS_load_batch), std::max<uint64_t>(P, 1));
  if (P > 0) {
    FlushAll();
    std::unique_ptr<Node> a = StartNode(0, url, R, LB + 64, 64, big_timeout);
    const std::vector<std::string> prefix = Keys("prefix", P);
    const v1::TierStats a0 = a->Tier();
    const auto s0 = Clock::now();
    for (uint64_t i = 0; i < P; i += 64) {
      a->Store(std::vector<std::string>(prefix.begin() + i,
                                        prefix.begin() + std::min<uint64_t>(P, i + 64)));
      // Every earlier batch spilled (evictable) before the next: the region holds LB + 64 rows.
      a->WaitSpilled(Node::Settled(a0) + i);
    }
    const v1::TierStats a1 = a->WaitSpilled(Node::Settled(a0) + P);
    const double spill_s = Since(s0);
    if (a1.spills_ok() - a0.spills_ok() != P) {
      Die(absl::StrCat("not every prefix row was spilled: ok ", a1.spills_ok() - a0.spills_ok(),
                       " gone ", a1.spills_gone() - a0.spills_gone(), " held ",
                       a1.spills_already_held() - a0.spills_already_held(), " failed ",
                       a1.spills_failed() - a0.spills_failed(), " dropped ",
                       a1.spill_queue_dropped() - a0.spill_queue_dropped()));
    }
    StopNode(a);
    for (int i = 0; i < 3; ++i) Ok(g_cluster->AwaitReplicated(i, absl::Seconds(60)), "replicas");
    std::unique_ptr<Node> b = StartNode(1, url, R, P + 16, LB, big_timeout);
    const v1::TierStats b0 = b->Tier();
    const auto p0 = Clock::now();
    std::vector<KeyState> first_states = b->Lookup(prefix);
    const double first_lookup_ms = b->lookup_ms.back();
    uint64_t found = 0;
    for (KeyState s : first_states) found += s != KeyState::kMiss;
    int lookups = 0;
    if (!b->LookupUntilHit(prefix, &lookups)) Die("the prefix was not promoted");
    const double promote_s = Since(p0);
    const double check0 = b->check_seconds;
    b->LoadAndCheck(prefix);
    const double loaded_s = Since(p0) - (b->check_seconds - check0);
    const double check1 = b->check_seconds;
    const auto l0 = Clock::now();
    b->LoadAndCheck(prefix);  // again, resident now: the load alone
    const double load_only_s = Since(l0) - (b->check_seconds - check1);
    const v1::TierStats b1 = b->Tier();
    Emit(absl::StrFormat(
        "{\"phase\": \"prefix\", \"row_bytes\": %d, \"rows\": %d, \"bytes\": %d, "
        "\"tokens_llama3_8b\": %d, \"spill_seconds\": %.3f, \"first_lookup_ms\": %.3f, "
        "\"found_by_first_lookup\": %d, \"lookups\": %d, \"promote_seconds\": %.4f, "
        "\"promote_gbps\": %.3f, \"promoted_and_loaded_s\": %.4f, \"load_only_s\": %.4f, "
        "\"load_batch\": %d, \"promotions_ok\": %d, \"promotions_failed\": %d, "
        "\"daemon_promotion_seconds_max\": %.4f, \"rows_checked\": %d, \"wrong_bytes\": %d, "
        "\"loadavg\": %s}",
        R, P, P * R, P * R / (128 << 10), spill_s, first_lookup_ms, found, lookups, promote_s,
        (b1.promotion_bytes() - b0.promotion_bytes()) / promote_s / gb, loaded_s, load_only_s, LB,
        b1.promotions_ok() - b0.promotions_ok(), b1.promotions_failed() - b0.promotions_failed(),
        b1.promotion_seconds_max(), b->rows_checked, b->wrong_bytes, LoadAvg()));
    StopNode(b);
  }
  // A master down: prefixes of G rows stored by A (replicated), then master 0 SIGSTOPped while a
  // fresh node C looks each prefix up (wait a step while pending, bounded), loads the leading
  // hits (byte-checked), next prefix. Every scheduler call is timed.
  if (absl::GetFlag(FLAGS_down_groups) > 0) {
    FlushAll();
    const int groups = absl::GetFlag(FLAGS_down_groups);
    const int G = absl::GetFlag(FLAGS_down_group_rows);
    const int64_t bound_ms = absl::GetFlag(FLAGS_lookup_timeout_ms);
    std::unique_ptr<Node> a = StartNode(0, url, R, groups * G + 16, 64, 500);
    std::vector<std::vector<std::string>> prefixes;
    for (int g = 0; g < groups; ++g) {
      prefixes.push_back(Keys(absl::StrCat("down", g), G));
      a->Store(prefixes.back());
    }
    a->WaitSpilled(groups * G);
    StopNode(a);
    for (int i = 0; i < 3; ++i) Ok(g_cluster->AwaitReplicated(i, absl::Seconds(60)), "replicas");
    std::unique_ptr<Node> c = StartNode(2, url, R, 4 * G + 16, G, 500);
    Ok(g_cluster->Freeze(0), "Freeze");
    const auto f0 = Clock::now();
    std::vector<double> load_call_ms;
    uint64_t full = 0, partial = 0, none = 0, blocks_loaded = 0;
    Node::WaitCounts wait;
    double first_full_after_s = -1, last_miss_s = -1;
    const int max_steps = 200;  // 1 s of 5 ms steps
    for (int g = 0; g < groups; ++g) {
      const std::vector<std::string>& keys = prefixes[g];
      const size_t hits = c->LookupPrefix(keys, max_steps, &wait);
      if (hits > 0) {
        const auto l0 = Clock::now();
        const double check0 = c->check_seconds;
        c->LoadAndCheck(std::vector<std::string>(keys.begin(), keys.begin() + hits));
        load_call_ms.push_back((Since(l0) - (c->check_seconds - check0)) * 1e3);
      }
      blocks_loaded += hits;
      if (hits == keys.size()) {
        ++full;
        if (first_full_after_s < 0) first_full_after_s = Since(f0);
      } else {
        hits > 0 ? ++partial : ++none;
        last_miss_s = Since(f0);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));  // spread over the failover
    }
    const double window_s = Since(f0);
    uint64_t over = 0, over_slack = 0;
    const int slack = absl::GetFlag(FLAGS_bound_slack_ms);
    for (double ms : c->lookup_ms) over += ms > bound_ms, over_slack += ms > bound_ms + slack;
    const v1::TierStats t = c->Tier();
    Emit(absl::StrFormat(
        "{\"phase\": \"master_down\", \"row_bytes\": %d, \"prefixes\": %d, \"prefix_rows\": %d, "
        "\"frozen\": \"master 0 (SIGSTOP)\", \"lookup_timeout_ms\": %d, \"lookup\": %s, "
        "\"lookups_over_bound\": %d, \"bound_slack_ms\": %d, \"lookups_over_bound_plus_slack\": "
        "%d, \"load_calls\": %s, \"prefixes_fully_hit\": %d, "
        "\"prefixes_partly_hit\": %d, \"prefixes_missed\": %d, \"waits_exhausted\": %d, "
        "\"blocks_loaded\": %d, \"rows_checked\": %d, \"wrong_bytes\": %d, "
        "\"first_full_hit_after_s\": %.3f, \"last_miss_after_s\": %.3f, \"window_s\": %.3f, "
        "\"promotions_ok\": %d, \"promotions_failed\": %d, \"promotions_timed_out\": %d, "
        "\"loadavg\": %s}",
        R, groups, G, bound_ms, LatencyJson(c->lookup_ms), over, slack, over_slack,
        LatencyJson(load_call_ms), full, partial, none, wait.waits_exhausted, blocks_loaded,
        c->rows_checked, c->wrong_bytes, first_full_after_s, last_miss_s, window_s,
        t.promotions_ok(), t.promotions_failed(), t.promotions_timed_out(), LoadAvg()));
    StopNode(c);
  }
  g_cluster.reset();
  return 0;
}

}  // namespace
}  // namespace kvoffload::bench

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  const std::string mode = absl::GetFlag(FLAGS_mode);
  if (mode == "trace") return kvoffload::bench::RunTrace();
  if (mode == "bandwidth") return kvoffload::bench::RunBandwidth();
  std::fprintf(stderr, "--mode: trace or bandwidth\n");
  return 2;
}
