#include "daemon/engine/engine_resources.h"

#include <map>
#include <memory>
#include <set>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "daemon/index/testing/row_lists.h"
#include "gtest/gtest.h"

namespace kvoffload::daemon {
namespace {

// Records what is registered; can refuse registration.
class RecordingBackend final : public CopyBackend {
 public:
  std::string name() const override { return "recording"; }
  absl::Status RegisterRegion(uint8_t* base, uint64_t bytes, uint64_t row_bytes) override {
    if (!refuse.ok()) return refuse;
    registered[base] = bytes;
    last_row_bytes = row_bytes;
    return absl::OkStatus();
  }
  void UnregisterRegion(uint8_t* base) override { registered.erase(base); }
  absl::StatusOr<std::unique_ptr<WorkerMemory>> OpenWorker(const WorkerRegistration&) override {
    return absl::UnimplementedError("not in this test");
  }
  void Submit(CopyJob, CopyDone done) override { done(absl::UnimplementedError("no copies"), 0); }
  std::map<int32_t, uint64_t> GpuMemoryBytes() const override { return {}; }
  // Serve while pinning: the seam that holds chunks back (a slow pin), never a sleep.
  absl::Status DeclareRegion(uint8_t* base, uint64_t bytes, uint64_t row_bytes,
                             uint64_t chunk_bytes) override {
    declared_chunk_bytes = chunk_bytes;
    return RegisterRegion(base, bytes, row_bytes);
  }
  absl::Status PinRegionChunk(uint8_t*, size_t chunk) override {
    if (chunk >= hold_from) release.WaitForNotification();
    absl::MutexLock lock(&mu);
    pinned.insert(chunk);
    return absl::OkStatus();
  }
  std::set<size_t> Pinned() {
    absl::MutexLock lock(&mu);
    return pinned;
  }

  size_t hold_from = SIZE_MAX;
  absl::Notification release;
  uint64_t declared_chunk_bytes = 0;
  absl::Mutex mu;
  std::set<size_t> pinned ABSL_GUARDED_BY(mu);
  absl::Status refuse;
  std::map<uint8_t*, uint64_t> registered;
  uint64_t last_row_bytes = 0;
};

common::EngineSpec Spec(uint64_t budget_bytes) {
  common::EngineSpec spec;
  spec.num_layers = 2;
  spec.page_bytes = 4096;
  spec.budget_bytes = budget_bytes;
  return spec;
}

TEST(EngineResourcesTest, CostIsRegionPlusIndexMetadata) {
  auto geometry = common::ComputeGeometry(Spec(1 << 20));
  ASSERT_TRUE(geometry.ok()) << geometry.status();
  auto cost = CostOfEngine(*geometry);
  ASSERT_TRUE(cost.ok()) << cost.status();
  EXPECT_EQ(cost->region_bytes, geometry->capacity_bytes);
  EXPECT_EQ(cost->index_bytes, SlotIndex::MetadataBytesFor(geometry->num_rows));
  EXPECT_EQ(cost->total_bytes, cost->region_bytes + cost->index_bytes);
}

TEST(EngineResourcesTest, AcquiresReservationRegionAndIndexAndRegistersTheRegion) {
  const common::EngineSpec spec = Spec(1 << 20);
  auto geometry = common::ComputeGeometry(spec);
  ASSERT_TRUE(geometry.ok());
  MemoryBudget budget(64 << 20);
  RecordingBackend backend;
  auto resources = AcquireEngineResources(spec, *geometry, &budget, &backend, RegionOptions());
  ASSERT_TRUE(resources.ok()) << resources.status();
  EXPECT_EQ(resources->region->size(), geometry->capacity_bytes);
  EXPECT_EQ(resources->index->num_rows(), geometry->num_rows);
  EXPECT_EQ(budget.reserved(), CostOfEngine(*geometry)->total_bytes);
  EXPECT_EQ(resources->reservation.bytes(), budget.reserved());
  ASSERT_EQ(backend.registered.count(resources->region->data()), 1u);
  EXPECT_EQ(backend.last_row_bytes, geometry->row_bytes);
  backend.UnregisterRegion(resources->region->data());
  resources->reservation.Release();
  EXPECT_EQ(budget.reserved(), 0u);
}

TEST(EngineResourcesTest, OverTheCapIsRefusedWithNothingAllocated) {
  const common::EngineSpec spec = Spec(1 << 20);
  auto geometry = common::ComputeGeometry(spec);
  ASSERT_TRUE(geometry.ok());
  MemoryBudget budget(1 << 19);
  RecordingBackend backend;
  auto resources = AcquireEngineResources(spec, *geometry, &budget, &backend, RegionOptions());
  EXPECT_EQ(resources.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(budget.reserved(), 0u);
  EXPECT_TRUE(backend.registered.empty());
}

TEST(EngineResourcesTest, ARefusedRegistrationGivesTheReservationBack) {
  const common::EngineSpec spec = Spec(1 << 20);
  auto geometry = common::ComputeGeometry(spec);
  ASSERT_TRUE(geometry.ok());
  MemoryBudget budget(64 << 20);
  RecordingBackend backend;
  backend.refuse = absl::UnavailableError("device lost");
  auto resources = AcquireEngineResources(spec, *geometry, &budget, &backend, RegionOptions());
  EXPECT_EQ(resources.status(), absl::UnavailableError("device lost"));
  EXPECT_EQ(budget.reserved(), 0u);
  EXPECT_TRUE(backend.registered.empty());
}

TEST(EngineResourcesTest, ServeWhilePinningReturnsBeforeFullyPinnedAndNeverHandsOutAnUnreadyRow) {
  const common::EngineSpec spec = Spec(1 << 20);
  auto geometry = common::ComputeGeometry(spec);
  ASSERT_TRUE(geometry.ok());
  ASSERT_GE(geometry->num_rows, 8u);
  MemoryBudget budget(64 << 20);
  RecordingBackend backend;
  backend.hold_from = 1;  // chunk 0 pins; every later chunk waits for `release`
  RegionOptions options;
  options.ready_chunk_bytes = 4 * geometry->row_bytes;
  options.populate_threads = 2;
  auto resources = AcquireEngineResources(spec, *geometry, &budget, &backend, options);
  ASSERT_TRUE(resources.ok()) << resources.status();
  ASSERT_NE(resources->preparer, nullptr);
  EXPECT_EQ(backend.declared_chunk_bytes, 4 * geometry->row_bytes);
  SlotIndex& index = *resources->index;
  // OpenEngine returned with exactly one chunk of four rows usable, the rest still held.
  RegionReadiness readiness = ReadinessOf(*resources->region, resources->preparer.get());
  EXPECT_EQ(readiness.total_bytes, geometry->capacity_bytes);
  EXPECT_EQ(readiness.ready_bytes, 4 * geometry->row_bytes);
  EXPECT_EQ(readiness.fully_ready_seconds, -1);
  EXPECT_EQ(index.ready_rows(), 4u);
  EXPECT_EQ(index.counts().rows_not_ready, geometry->num_rows - 4);
  EXPECT_EQ(backend.Pinned(), std::set<size_t>{0});
  // However many keys are asked for, no row of a held chunk is handed out: five do not fit,
  // four get rows 0..3.
  std::vector<std::string> keys;
  for (uint64_t i = 0; i < geometry->num_rows; ++i) keys.push_back("key" + std::to_string(i));
  EXPECT_EQ(index.PrepareStore({"a", "b", "c", "d", "e"}).status().code(),
            absl::StatusCode::kResourceExhausted);
  auto first = index.PrepareStore({"a", "b", "c", "d"});
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_EQ(first->rows, (std::vector<uint64_t>{0, 1, 2, 3}));
  EXPECT_EQ(index.PrepareStore({"e"}).status().code(), absl::StatusCode::kResourceExhausted);
  backend.release.Notify();
  ASSERT_TRUE(resources->preparer->WaitAll().ok());
  readiness = ReadinessOf(*resources->region, resources->preparer.get());
  EXPECT_EQ(readiness.ready_bytes, geometry->capacity_bytes);
  EXPECT_GE(readiness.fully_ready_seconds, 0);
  EXPECT_EQ(index.ready_rows(), geometry->num_rows);
  EXPECT_EQ(backend.Pinned().size(), (geometry->num_rows + 3) / 4);
  keys.resize(geometry->num_rows - 4);
  auto store = index.PrepareStore(keys);
  ASSERT_TRUE(store.ok()) << store.status();
  EXPECT_EQ(store->rows.size(), geometry->num_rows - 4);
  resources->preparer.reset();
  backend.UnregisterRegion(resources->region->data());
}

class AcceptingStore final : public FdStore {
 public:
  bool enabled() const override { return true; }
  absl::Status Store(absl::string_view, int) override { return absl::OkStatus(); }
  absl::Status Remove(absl::string_view) override { return absl::OkStatus(); }
  std::string Describe() const override { return "a test store"; }
};

TEST(EngineResourcesTest, DurableEngineCountsRowsWhoseKeysTheStateCannotHold) {
  const common::EngineSpec spec = Spec(1 << 20);
  auto geometry = common::ComputeGeometry(spec);
  ASSERT_TRUE(geometry.ok());
  MemoryBudget budget(64 << 20);
  RecordingBackend backend;
  AcceptingStore store;
  Durability durability(&store, /*key_capacity=*/8);
  StateIdentity identity;
  identity.spec = spec;
  identity.region_epoch = 0x1234;
  RegionOptions options;
  options.ready_chunk_bytes = 2 * geometry->row_bytes;  // durable and served while pinning
  auto resources =
      AcquireDurableEngineResources(identity, *geometry, &budget, &backend, options, &durability);
  ASSERT_TRUE(resources.ok()) << resources.status();
  ASSERT_TRUE(resources->rows_not_durable);
  ASSERT_TRUE(resources->preparer->WaitAll().ok());
  SlotIndex& index = *resources->index;
  auto store_keys = [&](const std::vector<std::string>& keys) {
    auto s = index.PrepareStore(keys);
    ASSERT_TRUE(s.ok()) << s.status();
    ASSERT_TRUE(BeginCopy(index, CopyDirection::kStore, s->rows).ok());
    ASSERT_TRUE(EndStoreCopy(index, s->rows, true).ok());
    ASSERT_TRUE(index.CompleteStore(s->keys, true).ok());
  };
  store_keys({"short", "a-key-of-twenty-byte"});
  EXPECT_EQ(resources->rows_not_durable(), 1u);
  store_keys({"another-long-key-x"});
  EXPECT_EQ(resources->rows_not_durable(), 2u);
  resources->preparer.reset();
  backend.UnregisterRegion(resources->region->data());
}

TEST(EngineResourcesTest, NotDurableEngineHasNoCounter) {
  const common::EngineSpec spec = Spec(1 << 20);
  auto geometry = common::ComputeGeometry(spec);
  ASSERT_TRUE(geometry.ok());
  MemoryBudget budget(64 << 20);
  RecordingBackend backend;
  auto resources = AcquireEngineResources(spec, *geometry, &budget, &backend, RegionOptions());
  ASSERT_TRUE(resources.ok());
  EXPECT_FALSE(resources->rows_not_durable);
  EXPECT_EQ(resources->preparer, nullptr);
  backend.UnregisterRegion(resources->region->data());
}

}  // namespace
}  // namespace kvoffload::daemon
