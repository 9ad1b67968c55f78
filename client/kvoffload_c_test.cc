// The C ABI (kvoffload_c.h) against the real kvoffloadd on its host backend: a full store →
// clobber → load → verify round trip, the scheduler calls, eviction reporting, poll buffering,
// and the status codes and messages of the error paths (including connect_cuda without a GPU).
#include "client/kvoffload_c.h"

#include <cuda_runtime_api.h>

#include <chrono>
#include <cstring>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "client/host/host_kv_memory.h"
#include "client/testing/readiness_daemon.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "kvoffload/v1/kvoffload.grpc.pb.h"
#include "tests/integration/harness.h"

namespace kvoffload {
namespace {

using testing::DaemonProcess;

constexpr uint32_t kLayers = 4;
constexpr uint64_t kLayerPage = 8192;
constexpr uint64_t kBlocks = 64;
constexpr uint64_t kWorkerBytesPerBlock = kLayers * kLayerPage;

// Keys as the ABI takes them: pointers and lengths into owned strings.
class Keys {
 public:
  Keys(std::initializer_list<std::string> keys) : keys_(keys) {
    for (const std::string& k : keys_) {
      ptrs_.push_back(reinterpret_cast<const uint8_t*>(k.data()));
      lens_.push_back(k.size());
    }
  }
  const uint8_t* const* ptrs() const { return ptrs_.data(); }
  const size_t* lens() const { return lens_.data(); }
  size_t size() const { return keys_.size(); }

 private:
  std::vector<std::string> keys_;
  std::vector<const uint8_t*> ptrs_;
  std::vector<size_t> lens_;
};

kvo_engine_spec Spec(const char* engine_id, uint64_t budget_bytes = 16 << 20) {
  kvo_engine_spec spec;
  kvo_engine_spec_init(&spec);
  spec.engine_id = engine_id;
  spec.num_layers = kLayers;
  spec.page_bytes = kLayerPage;
  spec.budget_bytes = budget_bytes;
  return spec;
}

// A host-backend worker over HostKvMemory; the tensors' names outlive the call.
struct HostWorker {
  client::HostKvMemory memory;
  std::vector<client::TensorHandle> handles;
  std::vector<kvo_host_tensor> tensors;
  kvo_worker* worker = nullptr;

  ~HostWorker() { kvo_worker_close(worker); }

  int Connect(const std::string& socket, const kvo_engine_spec& spec, uint64_t seed,
              std::string* error) {
    if (!memory.Create("separate_kv", kLayers, kLayerPage, kBlocks).ok()) return -1;
    memory.Fill(seed);
    handles = memory.Handles();
    for (const client::TensorHandle& h : handles) {
      tensors.push_back({h.allocation_handle.c_str(), h.allocation_bytes, h.offset, h.num_blocks,
                         h.block_stride_bytes, h.page_bytes});
    }
    char err[1024] = "sentinel";
    const int code = kvo_worker_connect_host(socket.c_str(), &spec, 0, tensors.data(),
                                             tensors.size(), &worker, err, sizeof(err));
    if (error != nullptr) *error = err;
    return code;
  }
};

class KvoffloadCTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto daemon = DaemonProcess::Start();
    ASSERT_TRUE(daemon.ok()) << daemon.status();
    daemon_ = std::move(*daemon);
  }
  void TearDown() override {
    for (kvo_scheduler* s : schedulers_) kvo_scheduler_close(s);
  }

  kvo_scheduler* OpenScheduler(const kvo_engine_spec& spec, kvo_geometry* geometry = nullptr) {
    kvo_scheduler* s = nullptr;
    char err[1024];
    const int code =
        kvo_scheduler_open(daemon_->data_socket().c_str(), &spec, &s, geometry, err, sizeof(err));
    EXPECT_EQ(code, KVO_OK) << err;
    if (code == KVO_OK) schedulers_.push_back(s);
    return s;
  }

  // Waits for one job through the ABI and returns its code (the wait itself must succeed).
  static kvo_finished Wait(kvo_worker* worker, uint64_t job_id) {
    kvo_finished done;
    std::memset(&done, 0, sizeof(done));
    char err[512];
    EXPECT_EQ(kvo_worker_wait(worker, job_id, 30000, &done, err, sizeof(err)), KVO_OK) << err;
    return done;
  }

  std::unique_ptr<DaemonProcess> daemon_;
  std::vector<kvo_scheduler*> schedulers_;
};

TEST(KvoffloadCVersionTest, ReportsVersionAndAbi) {
  ASSERT_NE(kvo_version(), nullptr);
  EXPECT_EQ(std::string(kvo_version()).rfind("kvoffload-c ", 0), 0u) << kvo_version();
  EXPECT_EQ(kvo_abi_version(), KVO_ABI_VERSION);
}

TEST(KvoffloadCSpecTest, InitMatchesEngineSpecDefaults) {
  kvo_engine_spec spec;
  std::memset(&spec, 0xFF, sizeof(spec));
  kvo_engine_spec_init(&spec);
  EXPECT_STREQ(spec.engine_id, "engine");
  EXPECT_EQ(spec.world_size, 1u);
  EXPECT_EQ(spec.local_world_size, 0u);
  EXPECT_EQ(spec.tp, 1u);
  EXPECT_EQ(spec.executor, KVO_EXECUTOR_MP);
  EXPECT_EQ(spec.attention, KVO_ATTENTION_MHA);
  EXPECT_EQ(spec.blocks_per_row, 1u);
  EXPECT_EQ(spec.secondary_tiers, nullptr);
}

TEST_F(KvoffloadCTest, StoreClobberLoadVerifyRoundTrip) {
  const kvo_engine_spec spec = Spec("c-roundtrip");
  kvo_geometry geometry;
  kvo_scheduler* scheduler = OpenScheduler(spec, &geometry);
  ASSERT_NE(scheduler, nullptr);
  EXPECT_EQ(geometry.created, 1);
  EXPECT_EQ(geometry.worker_bytes_per_block, kWorkerBytesPerBlock);
  EXPECT_EQ(geometry.num_copies, 1u);
  EXPECT_EQ(geometry.num_rows, (16u << 20) / geometry.row_bytes);
  EXPECT_NE(std::string(geometry.fingerprint), "");

  HostWorker w;
  std::string error;
  ASSERT_EQ(w.Connect(daemon_->data_socket(), spec, 42, &error), KVO_OK) << error;
  EXPECT_EQ(error, "");  // success clears the error buffer
  struct kvo_worker_info info;
  char err[512];
  ASSERT_EQ(kvo_worker_info(w.worker, &info, err, sizeof(err)), KVO_OK) << err;
  EXPECT_EQ(info.slot, 0u);
  EXPECT_EQ(info.writer, 1);
  EXPECT_EQ(info.replicated, 0);
  EXPECT_EQ(info.num_rows, geometry.num_rows);
  EXPECT_EQ(info.row_bytes, geometry.row_bytes);
  EXPECT_EQ(info.worker_bytes_per_block, kWorkerBytesPerBlock);
  EXPECT_EQ(info.blocks_per_row, 1u);
  EXPECT_EQ(info.device, -1);
  EXPECT_EQ(info.num_events, 0u);

  const Keys keys = {"chunk-a", "chunk-b", std::string("bin\0ary", 7)};
  int32_t states[3];
  ASSERT_EQ(kvo_scheduler_lookup(scheduler, keys.ptrs(), keys.lens(), 3, states, err, sizeof(err)),
            KVO_OK)
      << err;
  EXPECT_EQ(std::vector<int32_t>(states, states + 3),
            (std::vector<int32_t>{KVO_KEY_MISS, KVO_KEY_MISS, KVO_KEY_MISS}));

  uint8_t mask[3];
  uint64_t rows[3];
  size_t num_evicted = 99;
  ASSERT_EQ(kvo_scheduler_prepare_store(scheduler, keys.ptrs(), keys.lens(), 3, mask, rows,
                                        nullptr, 0, nullptr, &num_evicted, err, sizeof(err)),
            KVO_OK)
      << err;
  EXPECT_EQ(std::vector<uint8_t>(mask, mask + 3), (std::vector<uint8_t>{1, 1, 1}));
  EXPECT_EQ(num_evicted, 0u);
  EXPECT_EQ(std::set<uint64_t>(rows, rows + 3).size(), 3u);
  ASSERT_EQ(kvo_scheduler_lookup(scheduler, keys.ptrs(), keys.lens(), 3, states, err, sizeof(err)),
            KVO_OK);
  EXPECT_EQ(states[1], KVO_KEY_HIT_PENDING);

  const uint64_t blocks[3] = {3, 17, 40};
  ASSERT_EQ(kvo_worker_submit(w.worker, 1, KVO_STORE, blocks, 3, rows, 3, -1, err, sizeof(err)),
            KVO_OK)
      << err;
  kvo_finished stored = Wait(w.worker, 1);
  EXPECT_EQ(stored.job_id, 1u);
  EXPECT_EQ(stored.code, KVO_OK) << stored.message;
  EXPECT_EQ(stored.bytes, 3 * kWorkerBytesPerBlock);
  ASSERT_EQ(kvo_scheduler_complete_store(scheduler, keys.ptrs(), keys.lens(), 3, 1, err,
                                         sizeof(err)),
            KVO_OK)
      << err;
  ASSERT_EQ(kvo_scheduler_lookup(scheduler, keys.ptrs(), keys.lens(), 3, states, err, sizeof(err)),
            KVO_OK);
  EXPECT_EQ(std::vector<int32_t>(states, states + 3),
            (std::vector<int32_t>{KVO_KEY_HIT, KVO_KEY_HIT, KVO_KEY_HIT}));

  for (uint64_t b : blocks) w.memory.Clobber(b);
  for (uint64_t b : blocks) ASSERT_FALSE(w.memory.Verify(b));

  uint64_t load_rows[3];
  ASSERT_EQ(kvo_scheduler_prepare_load(scheduler, keys.ptrs(), keys.lens(), 3, load_rows, err,
                                       sizeof(err)),
            KVO_OK)
      << err;
  EXPECT_EQ(std::vector<uint64_t>(load_rows, load_rows + 3), std::vector<uint64_t>(rows, rows + 3));
  ASSERT_EQ(
      kvo_worker_submit(w.worker, 2, KVO_LOAD, blocks, 3, load_rows, 3, -1, err, sizeof(err)),
      KVO_OK)
      << err;
  kvo_finished loaded = Wait(w.worker, 2);
  EXPECT_EQ(loaded.code, KVO_OK) << loaded.message;
  EXPECT_EQ(loaded.bytes, 3 * kWorkerBytesPerBlock);
  for (uint64_t b : blocks) EXPECT_TRUE(w.memory.Verify(b)) << "block " << b;
  EXPECT_EQ(kvo_scheduler_complete_load(scheduler, keys.ptrs(), keys.lens(), 3, err, sizeof(err)),
            KVO_OK)
      << err;
  EXPECT_EQ(kvo_scheduler_touch(scheduler, keys.ptrs(), keys.lens(), 3, err, sizeof(err)), KVO_OK)
      << err;

  // Present keys are skipped: the mask maps the new key back to its request index.
  const Keys again = {"chunk-b", "chunk-new"};
  ASSERT_EQ(kvo_scheduler_prepare_store(scheduler, again.ptrs(), again.lens(), 2, mask, rows,
                                        nullptr, 0, nullptr, &num_evicted, err, sizeof(err)),
            KVO_OK)
      << err;
  EXPECT_EQ(mask[0], 0);
  EXPECT_EQ(rows[0], KVO_NO_ROW);
  EXPECT_EQ(mask[1], 1);
  EXPECT_LT(rows[1] & 0xffffffffu, geometry.num_rows);  // a handle: ticket << 32 | row
  const Keys fresh = {"chunk-new"};
  EXPECT_EQ(kvo_scheduler_complete_store(scheduler, fresh.ptrs(), fresh.lens(), 1, 0, err,
                                         sizeof(err)),
            KVO_OK)
      << err;

  ASSERT_EQ(kvo_worker_session_status(w.worker, err, sizeof(err)), KVO_OK) << err;
}

TEST_F(KvoffloadCTest, PrepareStoreReportsEvictedKeys) {
  // Two rows: a third key evicts the least recently used one.
  const kvo_engine_spec spec = Spec("c-evict", 2 * kWorkerBytesPerBlock);
  kvo_geometry geometry;
  kvo_scheduler* scheduler = OpenScheduler(spec, &geometry);
  ASSERT_NE(scheduler, nullptr);
  ASSERT_EQ(geometry.num_rows, 2u);
  char err[512];
  uint8_t mask[2];
  uint64_t rows[2];
  size_t num_evicted = 0;
  const Keys first = {"old-key-number-one", "k2"};
  ASSERT_EQ(kvo_scheduler_prepare_store(scheduler, first.ptrs(), first.lens(), 2, mask, rows,
                                        nullptr, 0, nullptr, &num_evicted, err, sizeof(err)),
            KVO_OK)
      << err;
  // A commit makes rows READY only once a store job wrote them.
  HostWorker w;
  std::string error;
  ASSERT_EQ(w.Connect(daemon_->data_socket(), spec, 3, &error), KVO_OK) << error;
  const uint64_t blocks[2] = {0, 1};
  ASSERT_EQ(kvo_worker_submit(w.worker, 1, KVO_STORE, blocks, 2, rows, 2, -1, err, sizeof(err)),
            KVO_OK)
      << err;
  ASSERT_EQ(Wait(w.worker, 1).code, KVO_OK);
  ASSERT_EQ(kvo_scheduler_complete_store(scheduler, first.ptrs(), first.lens(), 2, 1, err,
                                         sizeof(err)),
            KVO_OK)
      << err;
  const Keys recent = {"k2"};
  ASSERT_EQ(kvo_scheduler_touch(scheduler, recent.ptrs(), recent.lens(), 1, err, sizeof(err)),
            KVO_OK);

  // Too small a buffer for evicted keys is refused before the index changes.
  const Keys next = {"k3"};
  std::vector<uint8_t> small(KVO_MAX_KEY_BYTES - 1);
  size_t lens[1];
  EXPECT_EQ(kvo_scheduler_prepare_store(scheduler, next.ptrs(), next.lens(), 1, mask, rows,
                                        small.data(), small.size(), lens, &num_evicted, err,
                                        sizeof(err)),
            KVO_INVALID_ARGUMENT);
  EXPECT_NE(std::string(err).find("KVO_MAX_KEY_BYTES"), std::string::npos) << err;
  int32_t states[2];
  ASSERT_EQ(kvo_scheduler_lookup(scheduler, first.ptrs(), first.lens(), 2, states, err,
                                 sizeof(err)),
            KVO_OK);
  EXPECT_EQ(states[0], KVO_KEY_HIT);  // nothing was evicted

  std::vector<uint8_t> evicted(KVO_MAX_KEY_BYTES);
  ASSERT_EQ(kvo_scheduler_prepare_store(scheduler, next.ptrs(), next.lens(), 1, mask, rows,
                                        evicted.data(), evicted.size(), lens, &num_evicted, err,
                                        sizeof(err)),
            KVO_OK)
      << err;
  ASSERT_EQ(num_evicted, 1u);
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(evicted.data()), lens[0]),
            "old-key-number-one");
  EXPECT_EQ(mask[0], 1);
}

TEST_F(KvoffloadCTest, PollKeepsWhatDoesNotFit) {
  const kvo_engine_spec spec = Spec("c-poll");
  kvo_scheduler* scheduler = OpenScheduler(spec);
  ASSERT_NE(scheduler, nullptr);
  HostWorker w;
  std::string error;
  ASSERT_EQ(w.Connect(daemon_->data_socket(), spec, 7, &error), KVO_OK) << error;
  char err[512];
  const Keys keys = {"p1", "p2", "p3", "p4"};
  uint8_t mask[4];
  uint64_t rows[4];
  size_t num_evicted;
  ASSERT_EQ(kvo_scheduler_prepare_store(scheduler, keys.ptrs(), keys.lens(), 4, mask, rows,
                                        nullptr, 0, nullptr, &num_evicted, err, sizeof(err)),
            KVO_OK)
      << err;
  for (uint64_t i = 0; i < 4; ++i) {
    const uint64_t block = i;
    ASSERT_EQ(kvo_worker_submit(w.worker, 100 + i, KVO_STORE, &block, 1, &rows[i], 1, -1, err,
                                sizeof(err)),
              KVO_OK)
        << err;
  }
  // Job 103 through wait (even if a poll has buffered it), the rest one per poll.
  EXPECT_EQ(Wait(w.worker, 103).code, KVO_OK);
  std::set<uint64_t> seen;
  kvo_finished out[1];
  size_t n = 7;
  ASSERT_EQ(kvo_worker_poll(w.worker, out, 0, &n, err, sizeof(err)), KVO_OK) << err;
  EXPECT_EQ(n, 0u);
  for (int attempt = 0; attempt < 500 && seen.size() < 3; ++attempt) {
    ASSERT_EQ(kvo_worker_poll(w.worker, out, 1, &n, err, sizeof(err)), KVO_OK) << err;
    ASSERT_LE(n, 1u);
    if (n == 1) {
      EXPECT_EQ(out[0].code, KVO_OK) << out[0].message;
      EXPECT_EQ(out[0].bytes, kWorkerBytesPerBlock);
      seen.insert(out[0].job_id);
    } else {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }
  EXPECT_EQ(seen, (std::set<uint64_t>{100, 101, 102}));
  ASSERT_EQ(kvo_worker_poll(w.worker, out, 1, &n, err, sizeof(err)), KVO_OK);
  EXPECT_EQ(n, 0u);
}

TEST_F(KvoffloadCTest, ErrorCodesAndMessages) {
  const kvo_engine_spec spec = Spec("c-errors");
  kvo_scheduler* scheduler = OpenScheduler(spec);
  ASSERT_NE(scheduler, nullptr);
  HostWorker w;
  std::string error;
  ASSERT_EQ(w.Connect(daemon_->data_socket(), spec, 9, &error), KVO_OK) << error;
  char err[512];

  // Bad direction: refused by the ABI itself.
  const uint64_t block = 1, row = 0;
  EXPECT_EQ(kvo_worker_submit(w.worker, 5, 7, &block, 1, &row, 1, -1, err, sizeof(err)),
            KVO_INVALID_ARGUMENT);
  EXPECT_NE(std::string(err).find("direction 7"), std::string::npos) << err;
  EXPECT_EQ(kvo_worker_submit(w.worker, 5, KVO_STORE, nullptr, 1, &row, 1, -1, err, sizeof(err)),
            KVO_INVALID_ARGUMENT);

  // A row that was never prepared: the daemon's verdict arrives as the job's status.
  ASSERT_EQ(kvo_worker_submit(w.worker, 6, KVO_STORE, &block, 1, &row, 1, -1, err, sizeof(err)),
            KVO_OK)
      << err;
  kvo_finished refused = Wait(w.worker, 6);
  EXPECT_NE(refused.code, KVO_OK);
  EXPECT_NE(std::string(refused.message), "");

  // No CUDA events on a host worker.
  EXPECT_EQ(kvo_worker_record_event(w.worker, 0, 0, err, sizeof(err)), KVO_FAILED_PRECONDITION);
  EXPECT_NE(std::string(err).find("host"), std::string::npos) << err;
  EXPECT_EQ(kvo_worker_wait_event(w.worker, 0, 0, err, sizeof(err)), KVO_FAILED_PRECONDITION);

  // Waiting on a job that was never submitted.
  kvo_finished done;
  EXPECT_EQ(kvo_worker_wait(w.worker, 999, 50, &done, err, sizeof(err)), KVO_DEADLINE_EXCEEDED);
  EXPECT_NE(std::string(err).find("999"), std::string::npos) << err;

  // Index errors keep the daemon's code and message.
  const Keys unknown = {"never-stored"};
  uint64_t rows[1];
  EXPECT_EQ(kvo_scheduler_prepare_load(scheduler, unknown.ptrs(), unknown.lens(), 1, rows, err,
                                       sizeof(err)),
            KVO_NOT_FOUND);
  EXPECT_STREQ(kvo_last_error_reason(), "key_not_in_index") << err;
  EXPECT_STREQ(kvo_last_error_metadata(), "key_index=0\noperation=PrepareLoad\n") << err;
  const Keys empty_key = {""};
  int32_t states[1];
  uint8_t mask[1];
  size_t num_evicted;
  EXPECT_EQ(kvo_scheduler_prepare_store(scheduler, empty_key.ptrs(), empty_key.lens(), 1, mask,
                                        rows, nullptr, 0, nullptr, &num_evicted, err, sizeof(err)),
            KVO_INVALID_ARGUMENT);

  // Bad specs are refused before anything is sent.
  kvo_engine_spec bad = spec;
  bad.executor = 7;
  kvo_scheduler* none = nullptr;
  EXPECT_EQ(kvo_scheduler_open(daemon_->data_socket().c_str(), &bad, &none, nullptr, err,
                               sizeof(err)),
            KVO_INVALID_ARGUMENT);
  EXPECT_TRUE(absl::StartsWith(err, "engine spec: executor is 7, want one of KVO_EXECUTOR_UNI (0)")) << err;
  EXPECT_EQ(none, nullptr);
  bad = spec;
  bad.engine_id = nullptr;
  EXPECT_EQ(kvo_scheduler_open(daemon_->data_socket().c_str(), &bad, &none, nullptr, err,
                               sizeof(err)),
            KVO_INVALID_ARGUMENT);
  // The daemon's refusal of a spec that disagrees with the engine's.
  bad = spec;
  bad.page_bytes = 2 * kLayerPage;
  EXPECT_EQ(kvo_scheduler_open(daemon_->data_socket().c_str(), &bad, &none, nullptr, err,
                               sizeof(err)),
            KVO_FAILED_PRECONDITION);
  EXPECT_STREQ(kvo_last_error_reason(), "spec_mismatch") << err;
  EXPECT_EQ(std::string(kvo_last_error_metadata()),
            absl::StrCat("engine=", spec.engine_id, "/0\n"));
  // A topology the daemon rejects (pipeline parallel).
  bad = Spec("c-pp");
  bad.world_size = 2;
  bad.pp = 2;
  EXPECT_EQ(kvo_scheduler_open(daemon_->data_socket().c_str(), &bad, &none, nullptr, err,
                               sizeof(err)),
            KVO_FAILED_PRECONDITION);
  EXPECT_STREQ(kvo_last_error_reason(), "spec_rule") << err;
  EXPECT_STREQ(kvo_last_error_metadata(), "rule=no_pipeline_parallel\n") << err;
  // A success clears the thread's last reason; an error without one leaves it "".
  uint64_t epoch = 0;
  ASSERT_EQ(kvo_scheduler_region_epoch(scheduler, &epoch, err, sizeof(err)), KVO_OK);
  EXPECT_STREQ(kvo_last_error_reason(), "");
  EXPECT_STREQ(kvo_last_error_metadata(), "");

  // NULL handles.
  EXPECT_EQ(kvo_scheduler_lookup(nullptr, unknown.ptrs(), unknown.lens(), 1, states, err,
                                 sizeof(err)),
            KVO_INVALID_ARGUMENT);
  struct kvo_worker_info info;
  EXPECT_EQ(kvo_worker_info(nullptr, &info, err, sizeof(err)), KVO_INVALID_ARGUMENT);
}

TEST_F(KvoffloadCTest, UnknownEngineIsNotFound) {
  const kvo_engine_spec spec = Spec("c-dropped");
  kvo_scheduler* scheduler = OpenScheduler(spec);
  ASSERT_NE(scheduler, nullptr);
  {
    grpc::ClientContext context;
    v1::DropEngineRequest request;
    request.set_engine_id("c-dropped");
    v1::Empty response;
    ASSERT_TRUE(daemon_->AdminStub()->DropEngine(&context, request, &response).ok());
  }
  const Keys keys = {"k"};
  int32_t states[1];
  char err[512];
  EXPECT_EQ(kvo_scheduler_lookup(scheduler, keys.ptrs(), keys.lens(), 1, states, err, sizeof(err)),
            KVO_NOT_FOUND);
  EXPECT_STREQ(kvo_last_error_reason(), "engine_not_found") << err;
  EXPECT_STREQ(kvo_last_error_metadata(), "engine=c-dropped/0\n") << err;
  EXPECT_NE(std::string(err).find("c-dropped/0"), std::string::npos) << err;  // names it
}

TEST_F(KvoffloadCTest, ReadinessOfAReadyEngineThenOfADroppedOne) {
  const kvo_engine_spec spec = Spec("c-ready");
  kvo_geometry geometry;
  kvo_scheduler* scheduler = OpenScheduler(spec, &geometry);
  ASSERT_NE(scheduler, nullptr);
  char err[512] = "sentinel";
  EXPECT_EQ(kvo_scheduler_wait_until_ready(scheduler, 10000, err, sizeof(err)), KVO_OK) << err;
  EXPECT_STREQ(err, "");
  kvo_readiness r;
  ASSERT_EQ(kvo_scheduler_readiness(scheduler, &r, err, sizeof(err)), KVO_OK) << err;
  uint64_t epoch = 0;
  ASSERT_EQ(kvo_scheduler_region_epoch(scheduler, &epoch, err, sizeof(err)), KVO_OK) << err;
  EXPECT_EQ(r.region_epoch, epoch);
  EXPECT_EQ(r.num_rows, geometry.num_rows);
  EXPECT_EQ(r.rows_not_ready, 0u);
  EXPECT_EQ(r.region_bytes, geometry.num_rows * geometry.row_bytes);
  EXPECT_EQ(r.region_ready_bytes, r.region_bytes);
  EXPECT_GE(r.first_ready_seconds, 0);
  EXPECT_GE(r.fully_ready_seconds, r.first_ready_seconds);

  EXPECT_EQ(kvo_scheduler_wait_until_ready(scheduler, -1, err, sizeof(err)), KVO_INVALID_ARGUMENT);
  EXPECT_STREQ(err, "timeout_ms is -1, want 0 or more");
  EXPECT_EQ(kvo_scheduler_readiness(scheduler, nullptr, err, sizeof(err)), KVO_INVALID_ARGUMENT);
  EXPECT_EQ(kvo_scheduler_readiness(nullptr, &r, err, sizeof(err)), KVO_INVALID_ARGUMENT);

  {
    grpc::ClientContext context;
    v1::DropEngineRequest request;
    request.set_engine_id("c-ready");
    v1::Empty response;
    ASSERT_TRUE(daemon_->AdminStub()->DropEngine(&context, request, &response).ok());
  }
  EXPECT_EQ(kvo_scheduler_readiness(scheduler, &r, err, sizeof(err)), KVO_NOT_FOUND);
  EXPECT_TRUE(absl::StartsWith(err, "engine c-ready/0 is not in the Stats of kvoffloadd at ")) << err;
  EXPECT_EQ(kvo_scheduler_wait_until_ready(scheduler, 30000, err, sizeof(err)), KVO_NOT_FOUND);
}

// A region that stays half pinned (a stand-in daemon: the real one cannot be held there).
TEST(KvoffloadCReadinessTest, WaitEndsDeadlineExceededSayingHowFarItGot) {
  auto fake = client::testing::ReadinessDaemon::Start("c-stuck", /*not_ready_answers=*/-1);
  ASSERT_TRUE(fake.ok()) << fake.status();
  const kvo_engine_spec spec = Spec("c-stuck");
  kvo_scheduler* scheduler = nullptr;
  char err[512];
  ASSERT_EQ(kvo_scheduler_open((*fake)->data_socket().c_str(), &spec, &scheduler, nullptr, err,
                               sizeof(err)),
            KVO_OK)
      << err;
  kvo_readiness r;
  ASSERT_EQ(kvo_scheduler_readiness(scheduler, &r, err, sizeof(err)), KVO_OK) << err;
  EXPECT_EQ(r.rows_not_ready, 96u);
  EXPECT_EQ(r.num_rows, 128u);
  EXPECT_EQ(r.region_ready_bytes, 262144u);
  EXPECT_EQ(r.region_bytes, 1048576u);
  EXPECT_EQ(r.fully_ready_seconds, -1);
  EXPECT_EQ(kvo_scheduler_wait_until_ready(scheduler, 100, err, sizeof(err)),
            KVO_DEADLINE_EXCEEDED);
  EXPECT_STREQ(err,
               "engine c-stuck/0 not ready after 100ms: 96 of 128 rows not ready yet, 262144 of "
               "1048576 region bytes registered");
  kvo_scheduler_close(scheduler);
}

TEST_F(KvoffloadCTest, ErrorBufferIsTruncatedAndOptional) {
  const kvo_engine_spec spec = Spec("c-errbuf");
  kvo_scheduler* scheduler = OpenScheduler(spec);
  ASSERT_NE(scheduler, nullptr);
  const Keys unknown = {"never-stored"};
  uint64_t rows[1];
  char full[512];
  ASSERT_EQ(kvo_scheduler_prepare_load(scheduler, unknown.ptrs(), unknown.lens(), 1, rows, full,
                                       sizeof(full)),
            KVO_NOT_FOUND);
  ASSERT_GT(std::strlen(full), 8u);

  char small[8];
  std::memset(small, 'x', sizeof(small));
  EXPECT_EQ(kvo_scheduler_prepare_load(scheduler, unknown.ptrs(), unknown.lens(), 1, rows, small,
                                       sizeof(small)),
            KVO_NOT_FOUND);
  EXPECT_EQ(small[7], '\0');
  EXPECT_EQ(std::string(small), std::string(full, 7));

  char untouched[4] = {'a', 'b', 'c', 'd'};
  EXPECT_EQ(kvo_scheduler_prepare_load(scheduler, unknown.ptrs(), unknown.lens(), 1, rows,
                                       untouched, 0),
            KVO_NOT_FOUND);
  EXPECT_EQ(std::string(untouched, 4), "abcd");
  EXPECT_EQ(kvo_scheduler_prepare_load(scheduler, unknown.ptrs(), unknown.lens(), 1, rows, nullptr,
                                       100),
            KVO_NOT_FOUND);
  char one[1] = {'z'};
  EXPECT_EQ(kvo_scheduler_prepare_load(scheduler, unknown.ptrs(), unknown.lens(), 1, rows, one, 1),
            KVO_NOT_FOUND);
  EXPECT_EQ(one[0], '\0');
}

TEST_F(KvoffloadCTest, ConnectCudaWithoutGpuIsUnavailable) {
  int count = 0;
  const bool has_gpu = cudaGetDeviceCount(&count) == cudaSuccess && count > 0;
  const kvo_engine_spec spec = Spec("c-cuda");
  std::vector<uint8_t> host_memory(kBlocks * kWorkerBytesPerBlock);
  const kvo_cuda_tensor tensor = {reinterpret_cast<uint64_t>(host_memory.data()), kBlocks,
                                  kWorkerBytesPerBlock, kWorkerBytesPerBlock};
  kvo_worker* worker = nullptr;
  char err[512];
  const int code = kvo_worker_connect_cuda(daemon_->data_socket().c_str(), &spec, 0, -1, &tensor,
                                           1, 4, &worker, err, sizeof(err));
  EXPECT_EQ(worker, nullptr);
  if (has_gpu) {
    // Host memory is not device memory.
    EXPECT_EQ(code, KVO_INVALID_ARGUMENT) << err;
  } else {
    EXPECT_EQ(code, KVO_UNAVAILABLE) << err;
    EXPECT_NE(std::string(err).find("CUDA"), std::string::npos) << err;
    EXPECT_NE(std::string(err).find("kvo_worker_connect_host"), std::string::npos) << err;
  }
}

TEST_F(KvoffloadCTest, SessionEndIsReported) {
  const kvo_engine_spec spec = Spec("c-session");
  HostWorker w;
  std::string error;
  ASSERT_EQ(w.Connect(daemon_->data_socket(), spec, 3, &error), KVO_OK) << error;
  char err[512];
  ASSERT_EQ(kvo_worker_session_status(w.worker, err, sizeof(err)), KVO_OK);
  daemon_->Stop();
  int code = KVO_OK;
  for (int i = 0; i < 500 && code == KVO_OK; ++i) {
    code = kvo_worker_session_status(w.worker, err, sizeof(err));
    if (code == KVO_OK) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_NE(code, KVO_OK);
  EXPECT_NE(std::string(err), "");
  const uint64_t block = 0, row = 0;
  EXPECT_NE(kvo_worker_submit(w.worker, 1, KVO_STORE, &block, 1, &row, 1, -1, err, sizeof(err)),
            KVO_OK);
  kvo_finished done;
  EXPECT_NE(kvo_worker_wait(w.worker, 1, 1000, &done, err, sizeof(err)), KVO_OK);
}

TEST_F(KvoffloadCTest, UnreachableDaemonIsUnavailable) {
  const kvo_engine_spec spec = Spec("c-nodaemon");
  const std::string socket = daemon_->runtime_dir() + "/missing.sock";
  kvo_host_tensor tensor = {"/kvo-missing", 4096, 0, 1, 4096, 4096};
  kvo_worker* worker = nullptr;
  char err[512];
  EXPECT_EQ(kvo_worker_connect_host(socket.c_str(), &spec, 0, &tensor, 1, &worker, err,
                                    sizeof(err)),
            KVO_UNAVAILABLE);
  EXPECT_NE(std::string(err).find(socket), std::string::npos) << err;
  EXPECT_EQ(worker, nullptr);
}

}  // namespace
}  // namespace kvoffload
