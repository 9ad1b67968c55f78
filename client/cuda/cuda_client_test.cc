#include "client/cuda/cuda_client.h"

#include <cuda_runtime_api.h>

#include "gtest/gtest.h"

namespace kvoffload::client::cuda {
namespace {

bool HaveGpu() {
  int count = 0;
  return cudaGetDeviceCount(&count) == cudaSuccess && count > 0;
}

TEST(CudaClientTest, FailsCleanlyWithoutGpu) {
  if (HaveGpu()) GTEST_SKIP() << "a GPU is present";
  EXPECT_FALSE(DeviceUuid(0).ok());
  EXPECT_FALSE(ResolveAllocation(0x1000).ok());
  EXPECT_FALSE(EventPool::Create(2).ok());
}

TEST(CudaClientTest, ResolvesSubAllocationToItsBase) {
  if (!HaveGpu()) GTEST_SKIP() << "no GPU";
  void* p = nullptr;
  ASSERT_EQ(cudaMalloc(&p, 8 << 20), cudaSuccess);
  const uint64_t base = reinterpret_cast<uint64_t>(p);
  absl::StatusOr<AllocationRef> ref = ResolveAllocation(base + 12345);
  ASSERT_TRUE(ref.ok()) << ref.status();
  EXPECT_EQ(ref->base, base);
  EXPECT_EQ(ref->offset, 12345u);
  EXPECT_GE(ref->allocation_bytes, uint64_t{8} << 20);
  EXPECT_EQ(ref->ipc_handle.size(), sizeof(cudaIpcMemHandle_t));
  absl::StatusOr<AllocationRef> at_base = ResolveAllocation(base);
  ASSERT_TRUE(at_base.ok());
  EXPECT_EQ(at_base->ipc_handle, ref->ipc_handle);
  cudaFree(p);

  int host = 0;
  EXPECT_EQ(ResolveAllocation(reinterpret_cast<uint64_t>(&host)).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(CudaClientTest, DeviceUuidIsSixteenBytes) {
  if (!HaveGpu()) GTEST_SKIP() << "no GPU";
  absl::StatusOr<std::string> uuid = DeviceUuid(0);
  ASSERT_TRUE(uuid.ok()) << uuid.status();
  EXPECT_EQ(uuid->size(), 16u);
  EXPECT_FALSE(DeviceUuid(1 << 20).ok());
}

TEST(CudaClientTest, EventPoolRecordsAndWaits) {
  if (!HaveGpu()) GTEST_SKIP() << "no GPU";
  absl::StatusOr<std::unique_ptr<EventPool>> pool = EventPool::Create(3);
  ASSERT_TRUE(pool.ok()) << pool.status();
  EXPECT_EQ((*pool)->size(), 3u);
  ASSERT_EQ((*pool)->ipc_handles().size(), 3u);
  EXPECT_EQ((*pool)->ipc_handles()[0].size(), sizeof(cudaIpcEventHandle_t));
  cudaStream_t stream = nullptr;
  ASSERT_EQ(cudaStreamCreate(&stream), cudaSuccess);
  EXPECT_TRUE((*pool)->Record(1, stream).ok());
  EXPECT_TRUE((*pool)->Wait(1, stream).ok());
  EXPECT_TRUE((*pool)->Synchronize(1).ok());
  absl::StatusOr<bool> done = (*pool)->Query(1);
  ASSERT_TRUE(done.ok());
  EXPECT_TRUE(*done);
  EXPECT_EQ((*pool)->Record(3, stream).code(), absl::StatusCode::kInvalidArgument);
  cudaStreamDestroy(stream);
}

}  // namespace
}  // namespace kvoffload::client::cuda
