#include "daemon/engine/engine_resources.h"

#include <map>
#include <memory>

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

}  // namespace
}  // namespace kvoffload::daemon
