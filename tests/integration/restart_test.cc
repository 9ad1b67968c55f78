// Durable regions, the daemon side: the cache outlives the daemon. The real kvoffloadd under
// kvoffload-supervise (the fd store a service manager keeps), real worker processes, the host
// copy backend. Every hit after a restart is loaded back and compared byte for byte with what
// was stored (each batch of rows is filled from its own seed).
//   - a clean restart under load keeps every READY row (a few hundred MiB; less under sanitizers),
//     the region epoch and the owner; what was in flight is FREE;
//   - an upgrade to a second binary on the same path does the same;
//   - SIGKILL at random points of a store/load soak: 0 wrong rows, committed rows restored;
//     and of a soak that evicts (stores past the region's rows): 0 wrong rows;
//   - a corrupted (header, one row record, the layout page) or truncated state descriptor is
//     refused, its engine starts empty under a new region epoch, the
//     others are restored; a dropped engine's descriptors leave the store.
// Figures (restart times, rows, rates) are printed as "restart-figure name=value" lines.
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "tests/integration/harness.h"
#include "tests/integration/restart_fixture.h"

namespace kvoffload::testing {
namespace {

using v1::KeyState;

void Figure(const std::string& name, double value) {
  std::printf("restart-figure %s=%.3f\n", name.c_str(), value);
  std::fflush(stdout);
}

// Rows stored from one fill of the worker's blocks: key i holds block blocks[i] of seed `seed`.
struct Batch {
  uint64_t seed = 0;
  std::vector<std::string> keys;
  std::vector<uint64_t> blocks;
};

Batch MakeBatch(const std::string& prefix, uint64_t seed, int n) {
  Batch b;
  b.seed = seed;
  for (int i = 0; i < n; ++i) {
    b.keys.push_back(absl::StrCat(prefix, "-", seed, "-", i));
    b.blocks.push_back(static_cast<uint64_t>(i));
  }
  return b;
}

std::atomic<uint64_t> next_job{1};

// Submits a store of `batch` into `rows` and returns the job id (the worker refilled first).
absl::StatusOr<uint64_t> SubmitStore(WorkerProcess& worker, const Batch& batch,
                                     const std::vector<uint64_t>& rows) {
  if (worker.Command(absl::StrCat("refill ", batch.seed), 10) != "ok") {
    return absl::UnavailableError("refill");
  }
  const uint64_t job = next_job++;
  const std::string line = worker.Command(
      absl::StrCat("submit store ", job, " ", List(batch.blocks), " ", List(rows)), 10);
  if (line != absl::StrCat("submitted ", job)) return absl::UnavailableError(line);
  return job;
}

absl::Status Wait(WorkerProcess& worker, uint64_t job, int ms = 20000) {
  const std::string line = worker.Command(absl::StrCat("wait ", job, " ", ms), ms / 1000 + 5);
  if (absl::StartsWith(line, absl::StrCat("finished ", job, " 0 "))) return absl::OkStatus();
  return absl::UnavailableError(line.empty() ? "no answer" : line);
}

// Prepare, copy, commit: OK once the rows are READY.
absl::Status StoreBatch(RawScheduler& scheduler, WorkerProcess& worker, const Batch& batch) {
  absl::StatusOr<v1::PrepareStoreResponse> prepared = scheduler.PrepareStore(batch.keys);
  if (!prepared.ok()) return prepared.status();
  if (prepared->keys_size() != static_cast<int>(batch.keys.size())) {
    return absl::InternalError("keys already present");
  }
  std::vector<uint64_t> rows(prepared->rows().begin(), prepared->rows().end());
  absl::StatusOr<uint64_t> job = SubmitStore(worker, batch, rows);
  if (!job.ok()) return job.status();
  if (absl::Status s = Wait(worker, *job); !s.ok()) return s;
  return scheduler.CompleteStore(batch.keys, true);
}

struct Verified {
  uint64_t hits = 0;
  uint64_t wrong = 0;
  uint64_t misses = 0;
};

// Loads every HIT key of `batch` back into its block (after clobbering it) and compares the
// bytes with the batch's seed. An error (the daemon died under it) is returned as such.
absl::StatusOr<Verified> TryVerifyBatch(RawScheduler& scheduler, WorkerProcess& worker,
                                        const Batch& batch) {
  Verified v;
  absl::StatusOr<std::vector<KeyState>> states = scheduler.Lookup(batch.keys);
  if (!states.ok()) return states.status();
  std::vector<std::string> keys;
  std::vector<uint64_t> blocks;
  for (size_t i = 0; i < batch.keys.size(); ++i) {
    if ((*states)[i] == v1::KEY_STATE_HIT_PENDING) {
      return absl::InternalError(absl::StrCat(batch.keys[i], " is HIT_PENDING"));
    }
    if ((*states)[i] == v1::KEY_STATE_HIT) {
      keys.push_back(batch.keys[i]);
      blocks.push_back(batch.blocks[i]);
    } else {
      ++v.misses;
    }
  }
  if (keys.empty()) return v;
  if (worker.Command(absl::StrCat("refill ", batch.seed)) != "ok" ||
      worker.Command(absl::StrCat("clobber ", List(blocks))) != "ok") {
    return absl::UnavailableError("worker refill/clobber");
  }
  absl::StatusOr<std::vector<uint64_t>> rows = scheduler.PrepareLoad(keys);
  if (!rows.ok()) return rows.status();
  const uint64_t job = next_job++;
  const std::string submitted =
      worker.Command(absl::StrCat("submit load ", job, " ", List(blocks), " ", List(*rows)));
  if (submitted != absl::StrCat("submitted ", job)) return absl::UnavailableError(submitted);
  if (absl::Status s = Wait(worker, job); !s.ok()) return s;
  for (uint64_t block : blocks) {
    const std::string line = worker.Command(absl::StrCat("verify ", block));
    if (line.empty()) return absl::UnavailableError("worker gone");
    ++v.hits;
    if (line != "verify ok") ++v.wrong;
  }
  if (absl::Status s = scheduler.CompleteLoad(keys); !s.ok()) return s;
  return v;
}

// The same where nothing may fail.
Verified VerifyBatch(RawScheduler& scheduler, WorkerProcess& worker, const Batch& batch) {
  absl::StatusOr<Verified> v = TryVerifyBatch(scheduler, worker, batch);
  EXPECT_TRUE(v.ok()) << v.status();
  return v.ok() ? *v : Verified{};
}

uint64_t EpochOf(const WorkerProcess& worker) {
  const std::string& hello = worker.hello();
  const size_t at = hello.find("epoch=");
  return at == std::string::npos ? 0 : std::stoull(hello.substr(at + 6));
}

// A worker process registered with the current daemon. A previous worker of the same rank
// (killed by the caller) may still hold its registration for a moment: its client reconnects by
// itself after a restart, and the daemon refuses the rank until it has seen it go.
std::unique_ptr<WorkerProcess> StartWorker(const SupervisedDaemon& daemon, const TestEngine& e) {
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  for (;;) {
    auto worker = WorkerProcess::Start(daemon.data_socket(), e.WorkerArgs(0));
    EXPECT_TRUE(worker.ok()) << worker.status();
    if (!worker.ok()) return nullptr;
    if (absl::StartsWith((*worker)->hello(), "registered")) return std::move(*worker);
    if (absl::Now() > deadline) {
      ADD_FAILURE() << (*worker)->hello();
      return nullptr;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

absl::StatusOr<v1::EngineStats> StatsOf(SupervisedDaemon& daemon, const TestEngine& e) {
  v1::StatsRequest request;
  v1::StatsResponse response;
  grpc::ClientContext context;
  grpc::Status s = daemon.AdminStub()->Stats(&context, request, &response);
  if (!s.ok()) return FromGrpc(s);
  for (const v1::EngineStats& stats : response.engines()) {
    if (stats.engine_id() == e.engine_id && stats.dp_rank() == e.dp_rank) return stats;
  }
  return absl::NotFoundError(e.engine_id);
}

// ---- Clean restart under load ---------------------------------------------------------------

TEST(RestartTest, CleanRestartUnderLoadKeepsEveryReadyRowByteExact) {
  // 256 KiB rows; 2 GiB READY by default (the issue asks for GiBs), 64 MiB under sanitizers
  // (the CI machine's 2 cores).
  const int mib = UnderSanitizer() ? 64 : 2048;
  TestEngine e;
  e.engine_id = "restart-load";
  e.num_layers = 4;
  e.page_bytes = 64 << 10;
  e.num_blocks = 256;
  const int rows_per_batch = 256;
  const int batches = mib * 4 / rows_per_batch;             // 4 rows per MiB
  e.budget_bytes = static_cast<uint64_t>(mib + 128) << 20;  // room for the in-flight batches
  auto daemon = SupervisedDaemon::Start({absl::StrCat("--max_region_bytes=", mib + 256, "MiB")});
  ASSERT_TRUE(daemon.ok()) << daemon.status();
  auto worker = StartWorker(**daemon, e);
  ASSERT_NE(worker, nullptr);
  RawScheduler scheduler((*daemon)->data_socket(), e);
  auto opened = scheduler.Open();
  ASSERT_TRUE(opened.ok()) << opened.status();
  const uint64_t epoch = opened->region_epoch();
  EXPECT_EQ(EpochOf(*worker), epoch);
  const uint32_t owner = opened->owner_uid();

  std::vector<Batch> committed;
  for (int b = 0; b < batches; ++b) {
    committed.push_back(MakeBatch("ready", 100 + b, rows_per_batch));
    ASSERT_TRUE(StoreBatch(scheduler, *worker, committed.back()).ok()) << "batch " << b;
  }
  // Load at the moment of the restart: a store submitted and never committed, a commit whose
  // store was never submitted, and rows pinned by a load.
  Batch in_flight = MakeBatch("inflight", 900, 64);
  auto p1 = scheduler.PrepareStore(in_flight.keys);
  ASSERT_TRUE(p1.ok());
  ASSERT_TRUE(SubmitStore(*worker, in_flight, {p1->rows().begin(), p1->rows().end()}).ok());
  Batch commit_first = MakeBatch("commitfirst", 901, 64);
  ASSERT_TRUE(scheduler.PrepareStore(commit_first.keys).ok());
  ASSERT_TRUE(scheduler.CompleteStore(commit_first.keys, true).ok());
  ASSERT_TRUE(scheduler.PrepareLoad({committed[0].keys[0], committed[0].keys[1]}).ok());

  const absl::Time start = absl::Now();
  ASSERT_TRUE((*daemon)->Restart().ok());
  Figure("clean_restart_ms", absl::ToDoubleMilliseconds(absl::Now() - start));
  Figure("clean_restart_start_to_ready_ms",
         absl::ToDoubleMilliseconds((*daemon)->start_to_ready()));
  EXPECT_EQ((*daemon)->fds_at_start(), 2);  // the engine's region and state

  worker.reset();  // a fresh worker process: IPC handles are per daemon process
  worker = StartWorker(**daemon, e);
  ASSERT_NE(worker, nullptr);
  EXPECT_EQ(EpochOf(*worker), epoch);
  RawScheduler again((*daemon)->data_socket(), e);
  auto reopened = again.Open(epoch);  // FAILED_PRECONDITION if the region had been recreated
  ASSERT_TRUE(reopened.ok()) << reopened.status();
  EXPECT_FALSE(reopened->created());
  EXPECT_EQ(reopened->region_epoch(), epoch);
  EXPECT_EQ(reopened->owner_uid(), owner);

  // In flight at the restart: FREE, never READY.
  for (const Batch* b : {&in_flight, &commit_first}) {
    auto states = again.Lookup(b->keys);
    ASSERT_TRUE(states.ok());
    for (KeyState s : *states) EXPECT_EQ(s, v1::KEY_STATE_MISS);
  }
  Verified total;
  const absl::Time verify_start = absl::Now();
  for (const Batch& b : committed) {
    Verified v = VerifyBatch(again, *worker, b);
    total.hits += v.hits;
    total.wrong += v.wrong;
    total.misses += v.misses;
  }
  const uint64_t ready_rows = uint64_t{committed.size()} * rows_per_batch;
  EXPECT_EQ(total.hits, ready_rows);
  EXPECT_EQ(total.misses, 0u);
  EXPECT_EQ(total.wrong, 0u);
  Figure("ready_rows", static_cast<double>(ready_rows));
  Figure("region_gib", static_cast<double>(ready_rows) * e.worker_bytes_per_block() / (1u << 30));
  Figure("clean_restart_hit_rate", static_cast<double>(total.hits) / ready_rows);
  Figure("verify_s", absl::ToDoubleSeconds(absl::Now() - verify_start));
  auto stats = StatsOf(**daemon, e);
  ASSERT_TRUE(stats.ok()) << stats.status();
  EXPECT_EQ(stats->rows_ready(), ready_rows);
  EXPECT_EQ(stats->rows_writing(), 0u);
}

// ---- Upgrade --------------------------------------------------------------------------------

ino_t InodeOf(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0 ? st.st_ino : 0;
}

std::string FileBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

TEST(RestartTest, UpgradeToASecondBinaryKeepsTheRows) {
  char dir[] = "/tmp/kvo-upgrade-XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  const std::string binary = absl::StrCat(dir, "/kvoffloadd");
  const std::string built = std::filesystem::absolute(RunfilePath("daemon/kvoffloadd")).string();
  std::filesystem::copy_file(built, binary);
  TestEngine e;
  e.engine_id = "upgrade";
  e.num_layers = 4;
  e.page_bytes = 16 << 10;  // 64 KiB rows
  e.num_blocks = 128;
  e.budget_bytes = 80 << 20;  // 1280 rows: the 1024 stored are never evicted
  {
    auto daemon = SupervisedDaemon::Start({"--max_region_bytes=128MiB"}, binary);
    ASSERT_TRUE(daemon.ok()) << daemon.status();
    auto worker = StartWorker(**daemon, e);
    ASSERT_NE(worker, nullptr);
    RawScheduler scheduler((*daemon)->data_socket(), e);
    auto opened = scheduler.Open();
    ASSERT_TRUE(opened.ok());
    std::vector<Batch> batches;
    for (int b = 0; b < 8; ++b) {
      batches.push_back(MakeBatch("upgrade", 200 + b, 128));
      ASSERT_TRUE(StoreBatch(scheduler, *worker, batches.back()).ok());
    }
    const ino_t old_inode = InodeOf(binary);
    // The package manager's way: the new binary is written beside and renamed over the old.
    // It is another build of this tree (another label compiled in), so its bytes differ.
    const std::string next =
        std::filesystem::absolute(RunfilePath("daemon/kvoffloadd_next")).string();
    ASSERT_NE(FileBytes(next), FileBytes(built));
    std::filesystem::copy_file(next, binary + ".new");
    std::filesystem::rename(binary + ".new", binary);
    ASSERT_NE(InodeOf(binary), old_inode);
    ASSERT_TRUE((*daemon)->Restart().ok());
    char exe[4096];
    const ssize_t n =
        readlink(absl::StrCat("/proc/", (*daemon)->pid(), "/exe").c_str(), exe, sizeof(exe) - 1);
    ASSERT_GT(n, 0);
    exe[n] = '\0';
    EXPECT_EQ(std::string(exe), binary);  // the new file (the old one would read "(deleted)")
    EXPECT_EQ(FileBytes(exe), FileBytes(next));
    worker.reset();
    worker = StartWorker(**daemon, e);
    ASSERT_NE(worker, nullptr);
    RawScheduler again((*daemon)->data_socket(), e);
    ASSERT_TRUE(again.Open(opened->region_epoch()).ok());
    for (const Batch& b : batches) {
      Verified v = VerifyBatch(again, *worker, b);
      EXPECT_EQ(v.hits, b.keys.size());
      EXPECT_EQ(v.wrong, 0u);
    }
  }
  std::filesystem::remove_all(dir);
}

// ---- SIGKILL soak ---------------------------------------------------------------------------

// The engine of the SIGKILL soaks: 16 KiB rows (4 layers of 4 KiB pages), 64 worker blocks.
TestEngine SoakEngine(const std::string& id, uint64_t budget_bytes) {
  TestEngine e;
  e.engine_id = id;
  e.num_layers = 4;
  e.page_bytes = 4096;
  e.num_blocks = 64;
  e.budget_bytes = budget_bytes;
  return e;
}

// SIGKILLs the daemon after `delay`, from a thread of its own, while the test sends traffic.
class DelayedKill {
 public:
  DelayedKill(SupervisedDaemon& daemon, std::chrono::milliseconds delay)
      : thread_([this, &daemon, delay] {
          std::this_thread::sleep_for(delay);
          killed_ = daemon.Kill9().ok();
        }) {}
  ~DelayedKill() { Join(); }
  bool killed() const { return killed_.load(); }
  // Whether a failure the test just saw is the kill's: it may still be setting its flag.
  bool Died() const {
    for (int i = 0; i < 100 && !killed_.load(); ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return killed_.load();
  }
  void Join() {
    if (thread_.joinable()) thread_.join();
  }

 private:
  std::atomic<bool> killed_{false};
  std::thread thread_;
};

TEST(RestartTest, SigkillAtRandomPointsServesNoWrongRow) {
  const int crash_points = UnderSanitizer() ? 12 : 40;
  const TestEngine e = SoakEngine("soak", 96 << 20);  // 6144 rows
  const int per_batch = 16;
  // Stores stop at 80 % of the rows so that nothing is evicted: every committed row must return.
  const size_t max_batches = (e.budget_bytes / e.worker_bytes_per_block()) * 8 / 10 / per_batch;
  auto daemon = SupervisedDaemon::Start({"--max_region_bytes=256MiB"});
  ASSERT_TRUE(daemon.ok()) << daemon.status();
  std::mt19937_64 rng(19);
  uint64_t epoch = 0;
  std::vector<Batch> batches;        // every batch ever prepared
  std::set<size_t> known_committed;  // stored OK and CompleteStore OK: READY for sure
  std::set<size_t> unchecked;        // touched since the last verification
  uint64_t wrong = 0, hits = 0, restored = 0, expected_restored = 0;
  double kill_to_ready_ms = 0;
  for (int crash = 0; crash <= crash_points; ++crash) {
    auto worker = StartWorker(**daemon, e);
    ASSERT_NE(worker, nullptr);
    RawScheduler scheduler((*daemon)->data_socket(), e);
    auto opened = scheduler.Open(epoch);
    ASSERT_TRUE(opened.ok()) << "after crash " << crash << ": " << opened.status();
    if (epoch == 0) epoch = opened->region_epoch();
    ASSERT_EQ(opened->region_epoch(), epoch);

    // After a crash: every committed row is back (counted), every hit is byte-exact.
    if (crash > 0) {
      std::vector<std::string> keys;
      for (size_t b : known_committed) {
        for (const std::string& k : batches[b].keys) keys.push_back(k);
      }
      auto states = scheduler.Lookup(keys);
      ASSERT_TRUE(states.ok());
      expected_restored += keys.size();
      for (KeyState s : *states) restored += s == v1::KEY_STATE_HIT;
      // Verified now: what was touched since the last crash and a sample of the rest.
      std::set<size_t> check = unchecked;
      for (int i = 0; i < 4 && !batches.empty(); ++i) check.insert(rng() % batches.size());
      for (size_t b : check) {
        Verified v = VerifyBatch(scheduler, *worker, batches[b]);
        hits += v.hits;
        wrong += v.wrong;
      }
      unchecked.clear();
    }
    if (crash == crash_points) break;

    // Traffic until the killer strikes: stores of new batches, loads of committed ones.
    DelayedKill kill(**daemon, std::chrono::milliseconds(30 + rng() % 400));
    while (!kill.killed()) {
      if ((rng() % 3 != 0 || known_committed.empty()) && batches.size() < max_batches) {
        const size_t b = batches.size();
        batches.push_back(MakeBatch("soak", 1000 + b, per_batch));
        unchecked.insert(b);
        absl::Status stored = StoreBatch(scheduler, *worker, batches[b]);
        if (stored.ok()) {
          known_committed.insert(b);
        } else if (!kill.Died()) {
          ADD_FAILURE() << "a store failed with the daemon alive: " << stored;
        }
      } else {
        auto it = known_committed.begin();
        std::advance(it, rng() % known_committed.size());
        unchecked.insert(*it);
        if (kill.killed()) break;
        absl::StatusOr<Verified> v = TryVerifyBatch(scheduler, *worker, batches[*it]);
        if (v.ok()) {
          // A load that completed is checked like any other, killer or not.
          hits += v->hits;
          wrong += v->wrong;
          EXPECT_EQ(v->wrong, 0u);
          EXPECT_EQ(v->hits, uint64_t{per_batch});
        } else if (!kill.Died()) {
          ADD_FAILURE() << "a load failed with the daemon alive: " << v.status();
        }
      }
    }
    kill.Join();
    ASSERT_TRUE(kill.killed());
    auto ready = (*daemon)->WaitReady();
    ASSERT_TRUE(ready.ok()) << ready.status();
    kill_to_ready_ms += absl::ToDoubleMilliseconds(*ready);
  }
  // The traffic above ends with loads that may fail (the daemon died under them): count only the
  // verification after each restart.
  ::testing::Test::RecordProperty("crash_points", crash_points);
  Figure("crash_points", crash_points);
  Figure("crash_rows_verified", static_cast<double>(hits));
  Figure("crash_rows_served_wrong", static_cast<double>(wrong));
  Figure("crash_committed_rows_checked", static_cast<double>(expected_restored));
  Figure("crash_committed_rows_distinct", static_cast<double>(known_committed.size() * per_batch));
  Figure("crash_committed_restored_rate",
         expected_restored == 0 ? 0 : static_cast<double>(restored) / expected_restored);
  Figure("kill_to_ready_ms_mean", kill_to_ready_ms / crash_points);
  EXPECT_EQ(wrong, 0u);
  EXPECT_GT(hits, 0u);
  EXPECT_GT(expected_restored, 0u);
  EXPECT_GE(static_cast<double>(restored), 0.99 * static_cast<double>(expected_restored));
}

TEST(RestartTest, SigkillWhileEvictingServesNoWrongRow) {
  // The soak above never evicts, so every row it kills under was FREE before. Here stores run
  // many times past the region's rows: most stores evict a READY row and write another key's
  // bytes into it, so a crash lands in the middle of a row's second life, and a crash-consistent
  // record must never bring back the evicted key, nor the new key before its store committed.
  // After each restart every key ever stored that hits is loaded and compared byte for byte; a
  // key that misses may have been evicted. Stores go on after the restart, evicting restored rows.
  const int crash_points = UnderSanitizer() ? 6 : 16;
  // 512 rows; 128 under sanitizers, whose six crash points store ~1000 rows.
  const TestEngine e = SoakEngine("evict-soak", UnderSanitizer() ? 2 << 20 : 8 << 20);
  const int per_batch = 16;
  const uint64_t rows = e.budget_bytes / e.worker_bytes_per_block();
  auto daemon = SupervisedDaemon::Start({"--max_region_bytes=64MiB"});
  ASSERT_TRUE(daemon.ok()) << daemon.status();
  std::mt19937_64 rng(23);
  uint64_t epoch = 0;
  std::vector<Batch> batches;
  uint64_t wrong = 0, hits = 0, misses = 0, stored_rows = 0;
  for (int crash = 0; crash <= crash_points; ++crash) {
    auto worker = StartWorker(**daemon, e);
    ASSERT_NE(worker, nullptr);
    RawScheduler scheduler((*daemon)->data_socket(), e);
    auto opened = scheduler.Open(epoch);
    ASSERT_TRUE(opened.ok()) << "after crash " << crash << ": " << opened.status();
    if (epoch == 0) epoch = opened->region_epoch();
    ASSERT_EQ(opened->region_epoch(), epoch);
    if (crash > 0) {
      uint64_t hits_now = 0;
      for (const Batch& b : batches) {
        Verified v = VerifyBatch(scheduler, *worker, b);
        hits_now += v.hits;
        wrong += v.wrong;
        misses += v.misses;
      }
      hits += hits_now;
      EXPECT_LE(hits_now, rows);
      EXPECT_GT(hits_now, 0u) << "after crash " << crash << ": nothing came back";
    }
    if (crash == crash_points) break;

    DelayedKill kill(**daemon, std::chrono::milliseconds(30 + rng() % 300));
    while (!kill.killed()) {
      if (rng() % 4 != 0 || batches.empty()) {
        const size_t b = batches.size();
        batches.push_back(MakeBatch("evict", 5000 + b, per_batch));
        absl::Status s = StoreBatch(scheduler, *worker, batches[b]);
        if (s.ok()) {
          stored_rows += per_batch;
        } else if (!kill.Died()) {
          ADD_FAILURE() << "a store failed with the daemon alive: " << s;
        }
      } else {
        absl::StatusOr<Verified> v =
            TryVerifyBatch(scheduler, *worker, batches[rng() % batches.size()]);
        if (v.ok()) {
          hits += v->hits;
          wrong += v->wrong;
          EXPECT_EQ(v->wrong, 0u);
        } else if (!kill.Died()) {
          ADD_FAILURE() << "a load failed with the daemon alive: " << v.status();
        }
      }
    }
    kill.Join();
    ASSERT_TRUE(kill.killed());
    ASSERT_TRUE((*daemon)->WaitReady().ok());
  }
  std::printf("evict-soak crash_points=%d stored_rows=%llu region_rows=%llu hits=%llu "
              "misses=%llu wrong=%llu\n",
              crash_points, static_cast<unsigned long long>(stored_rows),
              static_cast<unsigned long long>(rows), static_cast<unsigned long long>(hits),
              static_cast<unsigned long long>(misses), static_cast<unsigned long long>(wrong));
  EXPECT_EQ(wrong, 0u);
  EXPECT_GT(hits, 0u);
  // The stores evicted: more rows were stored than the region holds.
  EXPECT_GT(stored_rows, 2 * rows);
}

// ---- Corrupted state, dropped engines -------------------------------------------------------

// The daemon's descriptor of the state memfd of `key` (the fd store holds the same file).
std::string StatePath(pid_t pid, const std::string& key) {
  const std::string dir = absl::StrCat("/proc/", pid, "/fd");
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    std::error_code ec;
    const std::string target = std::filesystem::read_symlink(entry.path(), ec).string();
    if (!ec && absl::StrContains(target, absl::StrCat("memfd:kvoffload-state:", key))) {
      return entry.path().string();
    }
  }
  return "";
}

bool HasEvent(const SupervisedDaemon& daemon, const std::string& prefix) {
  for (const std::string& e : daemon.events()) {
    if (absl::StartsWith(e, prefix)) return true;
  }
  return false;
}

TEST(RestartTest, CorruptedOrTruncatedStateIsRefusedAndTheOthersRestored) {
  auto daemon = SupervisedDaemon::Start({"--max_region_bytes=256MiB"});
  ASSERT_TRUE(daemon.ok()) << daemon.status();
  // Refused (the first four): a header, a truncation, one row record, the layout page; then one
  // intact. A refused engine starts empty under a new epoch: the same epoch would tell clients
  // that every row survived.
  constexpr int kEngines = 5;
  constexpr int kRefused = 4;
  std::vector<TestEngine> engines(kEngines);
  const char* names[] = {"corrupt", "truncated", "record", "layout", "intact"};
  std::vector<uint64_t> epochs;
  std::vector<Batch> batches;
  for (int i = 0; i < kEngines; ++i) {
    engines[i].engine_id = names[i];
    engines[i].num_blocks = 32;
    auto worker = StartWorker(**daemon, engines[i]);
    ASSERT_NE(worker, nullptr);
    RawScheduler scheduler((*daemon)->data_socket(), engines[i]);
    auto opened = scheduler.Open();
    ASSERT_TRUE(opened.ok());
    epochs.push_back(opened->region_epoch());
    batches.push_back(MakeBatch(names[i], 300 + i, 32));
    ASSERT_TRUE(StoreBatch(scheduler, *worker, batches.back()).ok());
  }
  // Damage two state files through the daemon's own descriptors (the store holds the same file).
  const std::string corrupt = StatePath((*daemon)->pid(), "corrupt/0");
  const std::string truncated = StatePath((*daemon)->pid(), "truncated/0");
  ASSERT_FALSE(corrupt.empty());
  ASSERT_FALSE(truncated.empty());
  {
    const int fd = open(corrupt.c_str(), O_RDWR);
    ASSERT_GE(fd, 0);
    const char garbage[16] = "not a state!";
    ASSERT_EQ(pwrite(fd, garbage, sizeof(garbage), 40), 16);  // inside the checksummed header
    close(fd);
    const int tfd = open(truncated.c_str(), O_RDWR);
    ASSERT_GE(tfd, 0);
    struct stat st;
    ASSERT_EQ(fstat(tfd, &st), 0);
    ASSERT_EQ(ftruncate(tfd, st.st_size / 2), 0);
    close(tfd);
  }
  // One key byte of the first READY row record (state_file.h: records from header_bytes, the
  // u32 at offset 12; key bytes at +24), and one byte of the layout page (the header's last).
  for (const char* name : {"record", "layout"}) {
    const std::string path = StatePath((*daemon)->pid(), absl::StrCat(name, "/0"));
    ASSERT_FALSE(path.empty()) << name;
    const int fd = open(path.c_str(), O_RDWR);
    ASSERT_GE(fd, 0);
    uint32_t header_bytes = 0;
    ASSERT_EQ(pread(fd, &header_bytes, 4, 12), 4);
    ASSERT_GE(header_bytes, 8192u);
    off_t at = header_bytes - 4096 + 16;  // a layout run
    if (std::string(name) == "record") {
      for (at = header_bytes;; at += 64) {
        uint32_t state = 0;
        ASSERT_EQ(pread(fd, &state, 4, at), 4);
        if (state != 0) break;
      }
      at += 24;
    }
    uint8_t byte = 0;
    ASSERT_EQ(pread(fd, &byte, 1, at), 1);
    byte ^= 1;
    ASSERT_EQ(pwrite(fd, &byte, 1, at), 1);
    close(fd);
  }
  ASSERT_TRUE((*daemon)->Kill9().ok());
  ASSERT_TRUE((*daemon)->WaitReady().ok());
  EXPECT_EQ((*daemon)->fds_at_start(), 2 * kEngines);
  // The refused engines' descriptors leave the store (their memory is freed).
  for (int i = 0; i < kRefused; ++i) {
    const std::string engine_name = absl::StrCat(names[i], ".0");
    bool state_removed = false;
    bool region_removed = false;
    for (int wait = 0; wait < 50 && !(state_removed && region_removed); ++wait) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      for (const std::string& ev : (*daemon)->events()) {
        state_removed |= absl::StartsWith(ev, "removed name=kvoffload.state.") &&
                         absl::StrContains(ev, engine_name);
        region_removed |= absl::StartsWith(ev, "removed name=kvoffload.region.") &&
                          absl::StrContains(ev, engine_name);
      }
      if (!(state_removed && region_removed)) (void)(*daemon)->WaitReady(0);  // read events
    }
    EXPECT_TRUE(state_removed) << names[i];
    EXPECT_TRUE(region_removed) << names[i];
  }
  for (int i = 0; i < kEngines; ++i) {
    RawScheduler scheduler((*daemon)->data_socket(), engines[i]);
    auto same = scheduler.Open(epochs[i]);
    if (i < kRefused) {
      // Refused: the old region is gone, and a caller who knew it is told so.
      EXPECT_EQ(same.status().code(), absl::StatusCode::kFailedPrecondition) << names[i];
      auto fresh = scheduler.Open();
      ASSERT_TRUE(fresh.ok());
      EXPECT_TRUE(fresh->created());
      EXPECT_NE(fresh->region_epoch(), epochs[i]);
      auto states = scheduler.Lookup(batches[i].keys);
      ASSERT_TRUE(states.ok());
      for (KeyState s : *states) EXPECT_EQ(s, v1::KEY_STATE_MISS);
    } else {
      ASSERT_TRUE(same.ok()) << same.status();
      auto worker = StartWorker(**daemon, engines[i]);
      ASSERT_NE(worker, nullptr);
      Verified v = VerifyBatch(scheduler, *worker, batches[i]);
      EXPECT_EQ(v.hits, 32u);
      EXPECT_EQ(v.wrong, 0u);
    }
  }
}

// A restart with a smaller --max_region_bytes (a flag change): engines that no longer fit are
// refused (and leave the store), the others come back.
TEST(RestartTest, EnginesThatNoLongerFitTheNodeCapAreRefused) {
  char dir[] = "/tmp/kvo-cap-XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  const std::string flagfile = absl::StrCat(dir, "/flags");
  auto write_cap = [&](const std::string& cap) {
    FILE* f = fopen(flagfile.c_str(), "w");
    ASSERT_NE(f, nullptr);
    fprintf(f, "--max_region_bytes=%s\n", cap.c_str());
    fclose(f);
  };
  write_cap("96MiB");
  auto daemon = SupervisedDaemon::Start({absl::StrCat("--flagfile=", flagfile)});
  ASSERT_TRUE(daemon.ok()) << daemon.status();
  std::vector<TestEngine> engines(2);
  std::vector<uint64_t> epochs;
  for (int i = 0; i < 2; ++i) {
    engines[i].engine_id = absl::StrCat("cap", i);
    engines[i].budget_bytes = 40 << 20;
    RawScheduler scheduler((*daemon)->data_socket(), engines[i]);
    auto opened = scheduler.Open();
    ASSERT_TRUE(opened.ok()) << opened.status();
    epochs.push_back(opened->region_epoch());
  }
  write_cap("64MiB");  // room for one of the two
  ASSERT_TRUE((*daemon)->Restart().ok());
  EXPECT_EQ((*daemon)->fds_at_start(), 4);
  int restored = 0;
  for (int i = 0; i < 2; ++i) {
    auto same = RawScheduler((*daemon)->data_socket(), engines[i]).Open(epochs[i]);
    if (same.ok()) {
      ++restored;
    } else {
      EXPECT_EQ(same.status().code(), absl::StatusCode::kFailedPrecondition) << same.status();
      EXPECT_TRUE(HasEvent(**daemon, absl::StrCat("removed name=kvoffload.state.")));
    }
  }
  EXPECT_EQ(restored, 1);
  ASSERT_TRUE((*daemon)->Restart().ok());
  EXPECT_EQ((*daemon)->fds_at_start(), 2);  // the refused engine's descriptors are gone
  std::filesystem::remove_all(dir);
}

// --durable_regions=false after a restart: what the store held is released, nothing is served.
TEST(RestartTest, DurabilityTurnedOffReleasesTheStore) {
  char dir[] = "/tmp/kvo-off-XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  const std::string flagfile = absl::StrCat(dir, "/flags");
  auto write_flags = [&](bool durable) {
    FILE* f = fopen(flagfile.c_str(), "w");
    ASSERT_NE(f, nullptr);
    fprintf(f, "--max_region_bytes=64MiB\n--durable_regions=%s\n", durable ? "true" : "false");
    fclose(f);
  };
  write_flags(true);
  auto daemon = SupervisedDaemon::Start({absl::StrCat("--flagfile=", flagfile)});
  ASSERT_TRUE(daemon.ok()) << daemon.status();
  TestEngine e;
  e.engine_id = "off";
  auto opened = RawScheduler((*daemon)->data_socket(), e).Open();
  ASSERT_TRUE(opened.ok());
  write_flags(false);
  ASSERT_TRUE((*daemon)->Restart().ok());
  EXPECT_EQ((*daemon)->fds_at_start(), 2);
  EXPECT_EQ(RawScheduler((*daemon)->data_socket(), e).Open(opened->region_epoch()).status().code(),
            absl::StatusCode::kFailedPrecondition);
  ASSERT_TRUE((*daemon)->Restart().ok());
  EXPECT_EQ((*daemon)->fds_at_start(), 0);  // released, and nothing new was stored
  std::filesystem::remove_all(dir);
}

// The layout identity outlives the daemon: after a restart, a worker whose tensors split the same
// bytes per block differently is refused, as it would have been before (the rows hold the first
// layout's bytes).
TEST(RestartTest, AnotherLayoutOfTheSameBytesIsRefusedAfterARestart) {
  auto daemon = SupervisedDaemon::Start({"--max_region_bytes=64MiB"});
  ASSERT_TRUE(daemon.ok()) << daemon.status();
  TestEngine e;
  e.engine_id = "layout";
  e.num_blocks = 16;
  Batch batch = MakeBatch("layout", 400, 16);
  {
    auto worker = StartWorker(**daemon, e);  // separate_kv: a K and a V tensor per layer
    ASSERT_NE(worker, nullptr);
    RawScheduler scheduler((*daemon)->data_socket(), e);
    ASSERT_TRUE(scheduler.Open().ok());
    ASSERT_TRUE(StoreBatch(scheduler, *worker, batch).ok());
  }
  ASSERT_TRUE((*daemon)->Kill9().ok());
  ASSERT_TRUE((*daemon)->WaitReady().ok());
  TestEngine other = e;
  other.layout = "block_first";  // the same bytes per block in one tensor
  auto refused = WorkerProcess::Start((*daemon)->data_socket(), other.WorkerArgs(0));
  ASSERT_TRUE(refused.ok());
  EXPECT_TRUE(absl::StartsWith((*refused)->hello(), "refused 9 ")) << (*refused)->hello();
  refused->reset();
  auto worker = StartWorker(**daemon, e);
  ASSERT_NE(worker, nullptr);
  RawScheduler scheduler((*daemon)->data_socket(), e);
  Verified v = VerifyBatch(scheduler, *worker, batch);
  EXPECT_EQ(v.hits, 16u);
  EXPECT_EQ(v.wrong, 0u);
}

TEST(RestartTest, DroppedEngineLeavesTheStore) {
  auto daemon = SupervisedDaemon::Start({"--max_region_bytes=64MiB"});
  ASSERT_TRUE(daemon.ok()) << daemon.status();
  TestEngine e;
  e.engine_id = "dropped";
  RawScheduler scheduler((*daemon)->data_socket(), e);
  ASSERT_TRUE(scheduler.Open().ok());
  v1::DropEngineRequest request;
  request.set_engine_id("dropped");
  v1::Empty response;
  grpc::ClientContext context;
  ASSERT_TRUE((*daemon)->AdminStub()->DropEngine(&context, request, &response).ok());
  ASSERT_TRUE((*daemon)->Restart().ok());
  EXPECT_EQ((*daemon)->fds_at_start(), 0);
  EXPECT_TRUE(HasEvent(**daemon, "removed name=kvoffload.state."));
  EXPECT_TRUE(HasEvent(**daemon, "removed name=kvoffload.region."));
  auto states = RawScheduler((*daemon)->data_socket(), e).Lookup({"k"});
  EXPECT_EQ(states.status().code(), absl::StatusCode::kNotFound);
}

// kvoffload-supervise gives a daemon that cannot start a bounded number of tries, as systemd's
// StartLimitBurst= does, instead of restarting it for ever.
TEST(RestartTest, SupervisorGivesUpOnADaemonThatCannotStart) {
  auto supervisor = common::ChildProcess::Spawn(
      {std::filesystem::absolute(RunfilePath("daemon/restart/kvoffload-supervise")).string(),
       "--restart_delay_ms=1", "--start_limit_burst=3", "--", "/bin/false"});
  ASSERT_TRUE(supervisor.ok());
  std::vector<std::string> lines;
  for (std::string line = (*supervisor)->ReadLine(10); !line.empty();
       line = (*supervisor)->ReadLine(10)) {
    lines.push_back(line);
  }
  EXPECT_EQ((*supervisor)->Wait(), 1);
  int started = 0;
  for (const std::string& l : lines) started += absl::StartsWith(l, "started ");
  EXPECT_EQ(started, 3) << absl::StrJoin(lines, "\n");
  ASSERT_GE(lines.size(), 2u);
  EXPECT_TRUE(absl::StartsWith(lines[lines.size() - 2], "gave up after 3 failures"));
  EXPECT_EQ(lines.back(), "stopped");
}

}  // namespace
}  // namespace kvoffload::testing
