// The descriptor-buffer bound (copy path v3) without a GPU: the allocator is a fake that counts
// live bytes, so the test sees exactly what a device would hold.
#include "daemon/copy/cuda/buffer_pool.h"

#include <cstdlib>
#include <random>
#include <vector>

#include "gtest/gtest.h"

namespace kvoffload::daemon::cuda {
namespace {

constexpr size_t kMiB = size_t{1} << 20;

struct FakeMemory {
  uint64_t live = 0;
  uint64_t peak = 0;
  int allocations = 0;
  bool fail = false;

  BufferPool::Allocator allocator() {
    return {[this](size_t capacity) -> absl::StatusOr<BufferPool::Buffer> {
              if (fail) return absl::InternalError("cudaMalloc failed (fake)");
              ++allocations;
              live += capacity;
              peak = std::max(peak, live);
              BufferPool::Buffer b;
              b.host = static_cast<uint8_t*>(std::malloc(1));
              b.device = b.host;
              return b;
            },
            [this](const BufferPool::Buffer& b) {
              live -= b.capacity;
              std::free(b.host);
            }};
  }
};

TEST(BufferPoolTest, CapacitiesArePowersOfTwoFrom64KiB) {
  EXPECT_EQ(BufferPool::CapacityFor(0), 64u << 10);
  EXPECT_EQ(BufferPool::CapacityFor(16), 64u << 10);
  EXPECT_EQ(BufferPool::CapacityFor((64u << 10) + 1), 128u << 10);
  // A 960,000-block job's pair table (16 bytes a block): 15.4 MB → 16 MiB.
  EXPECT_EQ(BufferPool::CapacityFor(960000 * 16), 16 * kMiB);
}

TEST(BufferPoolTest, ReusesAReleasedBufferOfTheSameCapacity) {
  FakeMemory mem;
  BufferPool pool(64 * kMiB, mem.allocator());
  absl::StatusOr<BufferPool::Buffer> a = pool.Acquire(3 * kMiB);
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->capacity, 4 * kMiB);
  pool.Release(*a);
  absl::StatusOr<BufferPool::Buffer> b = pool.Acquire(4 * kMiB);
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b->host, a->host);
  EXPECT_EQ(mem.allocations, 1);
  EXPECT_EQ(pool.in_use_bytes(), 4 * kMiB);
  pool.Release(*b);
}

TEST(BufferPoolTest, RefusesWhatBuffersInUseLeaveNoRoomFor) {
  FakeMemory mem;
  BufferPool pool(32 * kMiB, mem.allocator());
  absl::StatusOr<BufferPool::Buffer> a = pool.Acquire(16 * kMiB);
  absl::StatusOr<BufferPool::Buffer> b = pool.Acquire(16 * kMiB);
  ASSERT_TRUE(a.ok() && b.ok());
  absl::StatusOr<BufferPool::Buffer> c = pool.Acquire(1);
  EXPECT_EQ(c.status().code(), absl::StatusCode::kResourceExhausted) << c.status();
  EXPECT_EQ(mem.allocations, 2);  // nothing allocated for the refused one
  EXPECT_EQ(mem.live, 32 * kMiB);
  // Larger than the whole limit: refused even when the pool is empty.
  pool.Release(*a);
  pool.Release(*b);
  EXPECT_EQ(pool.Acquire(33 * kMiB).status().code(), absl::StatusCode::kResourceExhausted);
}

TEST(BufferPoolTest, FreesCachedBuffersToMakeRoom) {
  FakeMemory mem;
  BufferPool pool(32 * kMiB, mem.allocator());
  std::vector<BufferPool::Buffer> small;
  for (int i = 0; i < 8; ++i) {
    absl::StatusOr<BufferPool::Buffer> b = pool.Acquire(4 * kMiB);
    ASSERT_TRUE(b.ok());
    small.push_back(*b);
  }
  for (const BufferPool::Buffer& b : small) pool.Release(b);
  EXPECT_EQ(mem.live, 32 * kMiB);
  // A 16 MiB job: four cached 4 MiB buffers go, the limit holds.
  absl::StatusOr<BufferPool::Buffer> big = pool.Acquire(16 * kMiB);
  ASSERT_TRUE(big.ok()) << big.status();
  EXPECT_EQ(mem.live, 32 * kMiB);
  EXPECT_EQ(pool.bytes(), 32 * kMiB);
  pool.Release(*big);
}

TEST(BufferPoolTest, AnAllocatorErrorIsReturnedAndReservesNothing) {
  FakeMemory mem;
  BufferPool pool(8 * kMiB, mem.allocator());
  mem.fail = true;
  absl::StatusOr<BufferPool::Buffer> b = pool.Acquire(kMiB);
  EXPECT_EQ(b.status().code(), absl::StatusCode::kInternal);
  EXPECT_EQ(pool.bytes(), 0u);
  mem.fail = false;
  absl::StatusOr<BufferPool::Buffer> all = pool.Acquire(8 * kMiB);
  ASSERT_TRUE(all.ok()) << all.status();  // the failed call left no reservation behind
  pool.Release(*all);
}

TEST(BufferPoolTest, AnIdlePoolReturnsToZero) {
  FakeMemory mem;
  {
    BufferPool pool(64 * kMiB, mem.allocator());
    absl::StatusOr<BufferPool::Buffer> b = pool.Acquire(8 * kMiB);
    ASSERT_TRUE(b.ok());
    pool.Release(*b);
    pool.TrimIfUnused();  // used since the last sweep: kept for the next job
    EXPECT_EQ(mem.live, 8 * kMiB);
    pool.TrimIfUnused();  // a sweep with no job in between: freed
    EXPECT_EQ(mem.live, 0u);
    EXPECT_EQ(pool.bytes(), 0u);
    absl::StatusOr<BufferPool::Buffer> c = pool.Acquire(kMiB);
    ASSERT_TRUE(c.ok());
    pool.Release(*c);
  }
  EXPECT_EQ(mem.live, 0u);  // the destructor frees the cache
}

// Any mix of job sizes up to 2^20 blocks, any number in flight: what the pool holds never
// exceeds its limit, and every refusal is RESOURCE_EXHAUSTED with nothing allocated.
TEST(BufferPoolTest, NoMixOfJobsGrowsPastTheLimit) {
  FakeMemory mem;
  const uint64_t limit = 64 * kMiB;
  BufferPool pool(limit, mem.allocator());
  std::mt19937_64 rng(17);
  std::vector<BufferPool::Buffer> out;
  int refused = 0;
  for (int step = 0; step < 20000; ++step) {
    if (!out.empty() && rng() % 2 == 0) {
      const size_t i = rng() % out.size();
      pool.Release(out[i]);
      out[i] = out.back();
      out.pop_back();
      continue;
    }
    const uint64_t blocks = 1 + rng() % (uint64_t{1} << 20);
    const uint64_t live_before = mem.live;
    absl::StatusOr<BufferPool::Buffer> b = pool.Acquire(blocks * 16);
    if (b.ok()) {
      out.push_back(*b);
    } else {
      ASSERT_EQ(b.status().code(), absl::StatusCode::kResourceExhausted) << b.status();
      EXPECT_LE(mem.live, live_before);
      ++refused;
    }
    ASSERT_LE(mem.live, limit);
    ASSERT_EQ(mem.live, pool.bytes());
  }
  EXPECT_GT(refused, 0);
  EXPECT_LE(mem.peak, limit);
  for (const BufferPool::Buffer& b : out) pool.Release(b);
  pool.TrimIfUnused();
  pool.TrimIfUnused();
  EXPECT_EQ(mem.live, 0u);
}

}  // namespace
}  // namespace kvoffload::daemon::cuda
