// Multi-process tests of the CUDA copy backend: worker processes (this binary re-executed, see
// gpu_worker.h) own the KV tensors and events; this process plays the daemon: it owns the region,
// the backend, and submits store and load jobs through the CopyBackend seam. Every check is on
// bytes: the region after a store, the worker's whole buffer after a load (loaded pages hold the
// stored data, every other byte is untouched).
#include <cuda_runtime_api.h>
#include <sys/mman.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "daemon/copy/cuda/cuda_copy_backend.h"
#include "daemon/copy/cuda/testing/local_worker.h"
#include "gtest/gtest.h"
#include "tests/gpu/gpu_worker.h"
#include "tests/gpu/test_pattern.h"

namespace kvoffload::testing {
namespace {

using daemon::AppendRun;
using daemon::CopyDirection;
using daemon::CopyJob;
using daemon::CopyRun;
using daemon::RunsOfLists;
using daemon::WorkerMemory;
using daemon::WorkerRegistration;
using daemon::cuda::CudaBackendOptions;
using daemon::cuda::CudaCopyBackend;

constexpr uint64_t kGenStored = 11;  // worker data at store time
constexpr uint64_t kGenPoison = 12;  // worker data overwritten before a load
constexpr uint64_t kGenLate = 13;    // written by a delayed worker kernel
constexpr uint64_t kGenRegion = 99;  // the region's initial bytes

#define ASSERT_OK(expr)                                       \
  do {                                                        \
    const absl::Status assert_ok_status_ = (expr);            \
    ASSERT_TRUE(assert_ok_status_.ok()) << assert_ok_status_; \
  } while (0)

// Plain anonymous memory standing in for the daemon's memfd region, filled with kGenRegion.
class HostRegion {
 public:
  explicit HostRegion(uint64_t bytes) : bytes_(bytes) {
    mapped_ = (bytes + (2 << 20) - 1) / (2 << 20) * (2 << 20);
    void* p = mmap(nullptr, mapped_, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
    if (p != MAP_FAILED) {
      base_ = static_cast<uint8_t*>(p);
      FillPatternBytes(base_, kGenRegion, 0, bytes_);
    }
  }
  ~HostRegion() {
    if (base_ != nullptr) munmap(base_, mapped_);
  }
  uint8_t* base() const { return base_; }
  uint64_t bytes() const { return bytes_; }

 private:
  uint64_t bytes_;
  uint64_t mapped_ = 0;
  uint8_t* base_ = nullptr;
};

struct JobResult {
  absl::Status status;
  uint64_t bytes = 0;
  absl::Duration elapsed;
};

JobResult RunJob(CudaCopyBackend* backend, CopyJob job, absl::Duration wait = absl::Seconds(120)) {
  JobResult result;
  absl::Notification finished;
  int calls = 0;
  const absl::Time start = absl::Now();
  backend->Submit(std::move(job), [&](absl::Status s, uint64_t bytes) {
    ++calls;
    result.status = std::move(s);
    result.bytes = bytes;
    result.elapsed = absl::Now() - start;
    finished.Notify();
  });
  if (!finished.WaitForNotificationWithTimeout(wait)) {
    result.status = absl::DeadlineExceededError("test: done was not called in time");
    ADD_FAILURE() << "done was not called within " << wait;
    // The callback still references locals: wait for it rather than return.
    finished.WaitForNotification();
  }
  EXPECT_EQ(calls, 1);
  return result;
}

uint64_t BytesPerBlock(const WorkerLayout& layout) {
  uint64_t b = 0;
  for (const TensorSpec& t : layout.tensors) b += t.page_bytes;
  return b;
}

uint64_t MinBlocks(const WorkerLayout& layout) {
  uint64_t n = UINT64_MAX;
  for (const TensorSpec& t : layout.tensors) n = std::min(n, t.num_blocks);
  return n;
}

uint64_t LayoutEnd(const std::vector<TensorSpec>& tensors) {
  uint64_t end = 0;
  for (const TensorSpec& t : tensors) {
    end = std::max(end, t.offset + (t.num_blocks - 1) * t.stride + t.page_bytes);
  }
  return end;
}

std::vector<uint64_t> Shuffled(uint64_t n, uint64_t take, std::mt19937_64* rng) {
  std::vector<uint64_t> v(n);
  std::iota(v.begin(), v.end(), 0);
  std::shuffle(v.begin(), v.end(), *rng);
  v.resize(take);
  return v;
}

// Geometry of one job: rows in the region, this worker's slot.
struct Geometry {
  uint32_t blocks_per_row = 1;
  uint32_t num_copies = 1;
  uint32_t slot = 0;
  uint64_t bytes_per_block = 0;
  uint64_t slot_bytes = 0;
  uint64_t row_bytes = 0;

  static Geometry For(const WorkerLayout& layout, uint32_t blocks_per_row, uint32_t num_copies,
                      uint32_t slot, uint64_t row_align) {
    Geometry g;
    g.blocks_per_row = blocks_per_row;
    g.num_copies = num_copies;
    g.slot = slot;
    g.bytes_per_block = BytesPerBlock(layout);
    g.slot_bytes = blocks_per_row * g.bytes_per_block;
    g.row_bytes = (num_copies * g.slot_bytes + row_align - 1) / row_align * row_align;
    return g;
  }
};

// A job whose rows each hold one block and nothing else (slot = row), GPU block blocks[i] ↔ row
// rows[i].
CopyJob WholeRowJob(CopyDirection direction, WorkerMemory* memory, const HostRegion& region,
                    uint64_t row_bytes, std::vector<uint64_t> blocks, std::vector<uint64_t> rows) {
  CopyJob job;
  job.direction = direction;
  job.memory = memory;
  job.region_base = region.base();
  job.row_bytes = row_bytes;
  job.slot_bytes = row_bytes;
  job.runs = RunsOfLists(blocks, rows, job.blocks_per_row);
  return job;
}

CopyJob MakeJob(CopyDirection direction, WorkerMemory* memory, const HostRegion& region,
                const Geometry& g, std::vector<uint64_t> blocks, std::vector<uint64_t> rows,
                int event_index = -1) {
  CopyJob job;
  job.direction = direction;
  job.memory = memory;
  job.region_base = region.base();
  job.row_bytes = g.row_bytes;
  job.slot_bytes = g.slot_bytes;
  job.slot = g.slot;
  job.blocks_per_row = g.blocks_per_row;
  job.runs = RunsOfLists(blocks, rows, job.blocks_per_row);
  job.event_index = event_index;
  return job;
}

// Writes into `expected` (a copy of the region) what a store of `blocks` → `rows` puts there.
void ApplyStore(const WorkerLayout& layout, const Geometry& g, uint64_t generation,
                const std::vector<uint64_t>& blocks, const std::vector<uint64_t>& rows,
                std::vector<uint8_t>* expected) {
  for (size_t i = 0; i < blocks.size(); ++i) {
    const uint64_t row = rows[i / g.blocks_per_row];
    const uint64_t j = i % g.blocks_per_row;
    uint64_t dst = row * g.row_bytes + g.slot * g.slot_bytes + j * g.bytes_per_block;
    for (const TensorSpec& t : layout.tensors) {
      FillPatternBytes(expected->data() + dst, generation, t.offset + blocks[i] * t.stride,
                       t.page_bytes);
      dst += t.page_bytes;
    }
  }
}

::testing::AssertionResult RegionEquals(const HostRegion& region,
                                        const std::vector<uint8_t>& expected) {
  if (std::memcmp(region.base(), expected.data(), region.bytes()) == 0) {
    return ::testing::AssertionSuccess();
  }
  uint64_t first = 0;
  uint64_t count = 0;
  for (uint64_t i = 0; i < region.bytes(); ++i) {
    if (region.base()[i] != expected[i]) {
      if (count++ == 0) first = i;
    }
  }
  return ::testing::AssertionFailure()
         << count << " region bytes differ; first at offset " << first << " (got "
         << int{region.base()[first]} << ", expected " << int{expected[first]} << ")";
}

std::vector<uint8_t> RegionPattern(uint64_t bytes) {
  std::vector<uint8_t> v(bytes);
  FillPatternBytes(v.data(), kGenRegion, 0, bytes);
  return v;
}

double Gbps(uint64_t bytes, absl::Duration d) {
  return static_cast<double>(bytes) / absl::ToDoubleSeconds(d) / 1e9;
}

// vLLM's per-layer caches: 4 layers × {K, V}, each tensor `blocks` pages of `page` bytes,
// sub-allocated from one allocation at non-zero offsets with gaps between them.
WorkerLayout PerLayerKv(uint64_t page, uint64_t blocks) {
  WorkerLayout layout;
  uint64_t offset = 4096;
  for (int t = 0; t < 8; ++t) {
    layout.tensors.push_back({offset, blocks, page, page});
    offset += blocks * page + 512;
  }
  layout.buffer_bytes = offset + 4096;
  return layout;
}

class CudaBackendIpcTest : public ::testing::Test {
 protected:
  void SetUp() override {
    int count = 0;
    const cudaError_t err = cudaGetDeviceCount(&count);
    if (err != cudaSuccess || count == 0) {
      GTEST_SKIP() << "no GPU (" << cudaGetErrorName(err) << ", " << count << " devices)";
    }
  }

  struct RoundTrip {
    RoundTrip() { options.forced_path = daemon::cuda::ForcedPath::kKernel; }
    WorkerLayout layout;
    uint64_t num_pairs = 0;
    uint32_t blocks_per_row = 1;
    uint32_t num_copies = 1;
    uint32_t slot = 0;
    uint64_t row_align = 4096;
    CudaBackendOptions options;
    uint64_t seed = 1;
    bool sequential_rows = false;  // rows in order: adjacent slots form long host runs
    // > 0: blocks come in runs of this many consecutive GPU blocks (random runs, in random order)
    // into consecutive rows, as vLLM's prefixes do (the copy engines' 2D copies); 0: random.
    uint64_t run_blocks = 0;
    // > 0: the region is declared in chunks of this many rows and pinned chunk by chunk, so
    // copies (2D ones too) are split where a registration ends.
    uint64_t chunk_rows = 0;
  };

  // `take` blocks of [0, n) in runs of `run` consecutive ones, the runs in random order.
  static std::vector<uint64_t> InRuns(uint64_t n, uint64_t take, uint64_t run,
                                      std::mt19937_64* rng) {
    std::vector<uint64_t> starts = Shuffled(n / run, (take + run - 1) / run, rng);
    std::vector<uint64_t> v;
    for (uint64_t s : starts) {
      for (uint64_t k = 0; k < run && v.size() < take; ++k) v.push_back(s * run + k);
    }
    return v;
  }

  // The same round trip with every job staged through small staging buffers (many chunks, every
  // buffer, runs split across chunks): gather/scatter on the device, copy engines over the link.
  static RoundTrip Staged(RoundTrip p, uint64_t chunk_bytes) {
    p.options.forced_path = daemon::cuda::ForcedPath::kStaged;
    p.options.staging_chunk_bytes = chunk_bytes;
    return p;
  }
  static RoundTrip StagedStore(RoundTrip p, uint64_t chunk_bytes) { return Staged(p, chunk_bytes); }

  // vLLM's per-layer K/V tensors, worker in slot 1 of 2 (the rows' pitch is the row, not the
  // block), runs of 7 consecutive GPU blocks into consecutive rows, a region pinned in chunks of
  // 3 rows, by the copy engines.
  static RoundTrip PerLayerPrefixes() {
    RoundTrip p;
    p.layout = PerLayerKv(8192, 128);
    p.num_pairs = 70;
    p.num_copies = 2;
    p.slot = 1;
    p.run_blocks = 7;
    p.chunk_rows = 3;
    p.options.forced_path = daemon::cuda::ForcedPath::kCopyEngine;
    return p;
  }

  // Store num_pairs random blocks into random rows; check the region byte for byte; poison the
  // worker; load the rows into a different random set of blocks; the worker checks its whole
  // buffer.
  void RunRoundTrip(const RoundTrip& p) {
    absl::StatusOr<std::unique_ptr<WorkerProcess>> worker = WorkerProcess::Spawn();
    ASSERT_TRUE(worker.ok()) << worker.status();
    absl::StatusOr<WorkerRegistration> reg = (*worker)->Setup(p.layout, kGenStored, 2);
    ASSERT_TRUE(reg.ok()) << reg.status();
    absl::StatusOr<std::unique_ptr<CudaCopyBackend>> backend = CudaCopyBackend::Create(p.options);
    ASSERT_TRUE(backend.ok()) << backend.status();

    const Geometry g = Geometry::For(p.layout, p.blocks_per_row, p.num_copies, p.slot, p.row_align);
    ASSERT_EQ(p.num_pairs % p.blocks_per_row, 0u);
    const uint64_t rows_used = p.num_pairs / p.blocks_per_row;
    const uint64_t num_rows = rows_used + 3;
    HostRegion region(num_rows * g.row_bytes);
    ASSERT_NE(region.base(), nullptr);
    if (p.chunk_rows == 0) {
      ASSERT_OK((*backend)->RegisterRegion(region.base(), region.bytes(), g.row_bytes));
    } else {
      ASSERT_OK((*backend)->DeclareRegion(region.base(), region.bytes(), g.row_bytes,
                                          p.chunk_rows * g.row_bytes));
    }
    absl::StatusOr<std::unique_ptr<WorkerMemory>> memory = (*backend)->OpenWorker(*reg);
    ASSERT_TRUE(memory.ok()) << memory.status();
    if (p.chunk_rows != 0) {  // a context exists once the worker is open
      for (uint64_t c = 0; c * p.chunk_rows < num_rows; ++c) {
        ASSERT_OK((*backend)->PinRegionChunk(region.base(), c));
      }
    }
    EXPECT_EQ((*memory)->bytes_per_block(), g.bytes_per_block);
    EXPECT_EQ((*memory)->num_blocks(), MinBlocks(p.layout));
    EXPECT_EQ((*memory)->num_events(), 2u);

    std::mt19937_64 rng(p.seed);
    const uint64_t num_blocks = MinBlocks(p.layout);
    std::vector<uint64_t> blocks = p.run_blocks == 0
                                       ? Shuffled(num_blocks, p.num_pairs, &rng)
                                       : InRuns(num_blocks, p.num_pairs, p.run_blocks, &rng);
    std::vector<uint64_t> rows = Shuffled(num_rows, rows_used, &rng);
    if (p.sequential_rows || p.run_blocks != 0) std::sort(rows.begin(), rows.end());

    JobResult stored = RunJob(
        backend->get(), MakeJob(CopyDirection::kStore, memory->get(), region, g, blocks, rows));
    ASSERT_OK(stored.status);
    EXPECT_EQ(stored.bytes, p.num_pairs * g.bytes_per_block);
    std::printf(
        "  store: %lu pages (%lu blocks × %zu tensors), %.1f MB in %s (%.1f GB/s incl. "
        "submission and completion)\n",
        static_cast<unsigned long>(p.num_pairs * p.layout.tensors.size()),
        static_cast<unsigned long>(p.num_pairs), p.layout.tensors.size(), stored.bytes / 1e6,
        absl::FormatDuration(stored.elapsed).c_str(), Gbps(stored.bytes, stored.elapsed));

    std::vector<uint8_t> expected = RegionPattern(region.bytes());
    ApplyStore(p.layout, g, kGenStored, blocks, rows, &expected);
    EXPECT_TRUE(RegionEquals(region, expected));

    ASSERT_OK((*worker)->Fill(kGenPoison));
    std::vector<uint64_t> load_blocks = p.run_blocks == 0
                                            ? Shuffled(num_blocks, p.num_pairs, &rng)
                                            : InRuns(num_blocks, p.num_pairs, p.run_blocks, &rng);
    JobResult loaded = RunJob(
        backend->get(), MakeJob(CopyDirection::kLoad, memory->get(), region, g, load_blocks, rows));
    ASSERT_OK(loaded.status);
    EXPECT_EQ(loaded.bytes, p.num_pairs * g.bytes_per_block);
    std::printf("  load: %.1f MB in %s (%.1f GB/s)\n", loaded.bytes / 1e6,
                absl::FormatDuration(loaded.elapsed).c_str(), Gbps(loaded.bytes, loaded.elapsed));

    std::vector<WorkerProcess::Expect> expect;
    for (size_t i = 0; i < blocks.size(); ++i) {
      expect.push_back({load_blocks[i], blocks[i], kGenStored});
    }
    std::string detail;
    absl::StatusOr<uint64_t> mismatches = (*worker)->CountMismatches(kGenPoison, expect, &detail);
    ASSERT_TRUE(mismatches.ok()) << mismatches.status();
    EXPECT_EQ(*mismatches, 0u) << detail;
    // The region is read-only for loads.
    EXPECT_TRUE(RegionEquals(region, expected));

    const std::map<int32_t, uint64_t> gpu_memory = (*backend)->GpuMemoryBytes();
    if (!gpu_memory.empty()) {
      std::printf("  daemon GPU memory on device %d: %.1f MiB\n", gpu_memory.begin()->first,
                  gpu_memory.begin()->second / 1048576.0);
    }
    memory->reset();
    (*backend)->UnregisterRegion(region.base());
  }
};

// vLLM's usual layout: one K and one V tensor per layer, all sub-allocated from one allocation at
// non-zero offsets. Worker in slot 1 of 2.
TEST_F(CudaBackendIpcTest, PerLayerSeparateKvTensors) {
  RoundTrip p;
  p.layout = PerLayerKv(8192, 96);
  p.num_pairs = 40;
  p.num_copies = 2;
  p.slot = 1;
  RunRoundTrip(p);
}

// K/V stacked per layer: [2, blocks, page] (K and V share the allocation at two offsets) for
// layers 0-1, and [blocks, 2, page] (one tensor, K and V adjacent per block) for layers 2-3.
TEST_F(CudaBackendIpcTest, KvStackedTensors) {
  RoundTrip p;
  const uint64_t page = 4096;
  const uint64_t blocks = 64;
  uint64_t offset = 1 << 20;
  for (int layer = 0; layer < 2; ++layer) {
    p.layout.tensors.push_back({offset, blocks, page, page});
    p.layout.tensors.push_back({offset + blocks * page, blocks, page, page});
    offset += 2 * blocks * page;
  }
  for (int layer = 2; layer < 4; ++layer) {
    p.layout.tensors.push_back({offset, blocks, 2 * page, 2 * page});
    offset += 2 * blocks * page;
  }
  p.layout.buffer_bytes = offset;
  p.num_pairs = 30;
  RunRoundTrip(p);
}

// Block-first cross-layer layout: one tensor whose page is every layer's K and V of a block.
TEST_F(CudaBackendIpcTest, BlockFirstCrossLayerTensor) {
  RoundTrip p;
  const uint64_t page = 4 * 2 * 4096;
  p.layout.tensors.push_back({65536, 64, page, page});
  p.layout.buffer_bytes = 65536 + 64 * page;
  p.num_pairs = 48;
  RunRoundTrip(p);
}

// Two GPU blocks per row, three copies per row, worker in slot 2.
TEST_F(CudaBackendIpcTest, BlocksPerRowTwo) {
  RoundTrip p;
  p.layout.tensors.push_back({8192, 80, 4096, 4096});
  p.layout.tensors.push_back({8192 + 80 * 4096, 80, 12288, 12288});
  p.layout.buffer_bytes = LayoutEnd(p.layout.tensors) + 8192;
  p.num_pairs = 40;
  p.blocks_per_row = 2;
  p.num_copies = 3;
  p.slot = 2;
  RunRoundTrip(p);
}

// Odd sizes and offsets: the kernel must fall back to byte accesses.
TEST_F(CudaBackendIpcTest, UnalignedPagesUseNarrowAccesses) {
  RoundTrip p;
  p.layout.tensors.push_back({1001, 40, 4100, 4100});
  p.layout.tensors.push_back({1001 + 40 * 4100 + 3, 40, 104, 100});
  p.layout.buffer_bytes = (LayoutEnd(p.layout.tensors) + 4096) / 8 * 8;
  p.num_pairs = 24;
  p.row_align = 1;
  RunRoundTrip(p);
}

// 4-byte aligned but not 8: 4-byte accesses.
TEST_F(CudaBackendIpcTest, FourByteAlignedPages) {
  RoundTrip p;
  p.layout.tensors.push_back({4, 40, 4100, 4100});
  p.layout.buffer_bytes = LayoutEnd(p.layout.tensors) + 4092;
  p.num_pairs = 24;
  RunRoundTrip(p);
}

// vLLM #49276: one job of a million pages (250,000 blocks × 4 tensors) must work.
TEST_F(CudaBackendIpcTest, MillionPageJob) {
  RoundTrip p;
  const uint64_t blocks = 250000;
  uint64_t offset = 256;
  for (int t = 0; t < 4; ++t) {
    p.layout.tensors.push_back({offset, blocks, 256, 256});
    offset += blocks * 256;
  }
  p.layout.buffer_bytes = offset + 256;
  p.num_pairs = blocks;
  p.row_align = 1;
  RunRoundTrip(p);
}

// The same million pages through the copy engines: bounded cudaMemcpyBatchAsync batches.
TEST_F(CudaBackendIpcTest, MillionPageJobOnCopyEngines) {
  RoundTrip p;
  const uint64_t blocks = 250000;
  uint64_t offset = 256;
  for (int t = 0; t < 4; ++t) {
    p.layout.tensors.push_back({offset, blocks, 256, 256});
    offset += blocks * 256;
  }
  p.layout.buffer_bytes = offset + 256;
  p.num_pairs = blocks;
  p.row_align = 1;
  p.options.forced_path = daemon::cuda::ForcedPath::kCopyEngine;
  RunRoundTrip(p);
}

// Small and large pages in the same job, the path chosen by the daemon (copy engines without MPS;
// under it, staged: the smallest page is below the copy-engine threshold).
TEST_F(CudaBackendIpcTest, MixedPageSizesAutoPath) {
  RoundTrip p;
  const uint64_t blocks = 16;
  p.layout.tensors.push_back({4096, blocks, 4096, 4096});
  p.layout.tensors.push_back({4096 + blocks * 4096, blocks, 512 << 10, 512 << 10});
  p.layout.tensors.push_back({LayoutEnd(p.layout.tensors) + 4096, blocks, 4096, 4096});
  p.layout.buffer_bytes = LayoutEnd(p.layout.tensors) + 4096;
  p.num_pairs = 12;
  p.options.forced_path = daemon::cuda::ForcedPath::kAuto;
  RunRoundTrip(p);
}

// Prefixes: runs of consecutive GPU blocks into consecutive rows go by the copy engines as 2D
// copies (one per tensor and registration chunk; rows crossing nothing, the last rows of a run
// alone as plain copies). vLLM's per-layer K/V tensors, worker in slot 1 of 2 (the rows' pitch is
// the row, not the block), a region pinned in chunks of 3 rows.
TEST_F(CudaBackendIpcTest, ConsecutiveBlocksGoAs2dCopies) {
  RoundTrip p = PerLayerPrefixes();
  RunRoundTrip(p);
  p.options.strided_min_rows = 0;  // the same job page by page
  RunRoundTrip(p);
}

// A job split over four issuing threads, each on a stream of its own, joined before the job's
// completion (every share a few copies: 2D stretches, single pages, rows split where a
// registration chunk ends): the bytes are those one thread moves. Then random blocks, a copy per
// page, split the same way.
TEST_F(CudaBackendIpcTest, CopiesIssuedByFourThreadsOnFourStreams) {
  RoundTrip p = PerLayerPrefixes();
  p.options.issue_threads = 4;
  p.options.parallel_issue_min_copies = 1;
  RunRoundTrip(p);
  p.run_blocks = 0;
  RunRoundTrip(p);
  p.options.issue_threads = 1;  // the same job from one thread, for the same bytes
  RunRoundTrip(p);
}

// Two blocks a row (a row's blocks one block apart, across rows too), K and V of a block adjacent
// on the GPU in one allocation and a third tensor elsewhere, in runs of 16 across chunks of 5 rows
// (rows picked with gaps, which cut the stretches).
TEST_F(CudaBackendIpcTest, ConsecutiveBlocksTwoPerRowAs2dCopies) {
  RoundTrip p;
  const uint64_t blocks = 96;
  p.layout.tensors.push_back({8192, blocks, 8192, 4096});  // [blocks, 2, 4096]: K
  p.layout.tensors.push_back({8192 + 4096, blocks, 8192, 4096});  // and V
  p.layout.tensors.push_back({8192 + blocks * 8192, blocks, 16384, 16384});
  p.layout.buffer_bytes = LayoutEnd(p.layout.tensors) + 8192;
  p.num_pairs = 64;
  p.blocks_per_row = 2;
  p.run_blocks = 16;
  p.chunk_rows = 5;
  p.options.forced_path = daemon::cuda::ForcedPath::kCopyEngine;
  RunRoundTrip(p);
}

// Staged loads (copy engines into device staging, then a device-side scatter).
TEST_F(CudaBackendIpcTest, StagedLoadPerLayerTensors) {
  RoundTrip p;
  uint64_t offset = 4096;
  for (int t = 0; t < 8; ++t) {
    p.layout.tensors.push_back({offset, 96, 8192, 8192});
    offset += 96 * 8192 + 512;
  }
  p.layout.buffer_bytes = offset + 4096;
  p.num_pairs = 40;
  p.num_copies = 2;
  p.slot = 1;
  RunRoundTrip(Staged(p, 256 << 10));  // 4 blocks per chunk: 10 chunks
}

TEST_F(CudaBackendIpcTest, StagedLoadMergesAdjacentRows) {
  RoundTrip p;
  const uint64_t page = 4 * 2 * 4096;
  p.layout.tensors.push_back({65536, 64, page, page});
  p.layout.buffer_bytes = 65536 + 64 * page;
  p.num_pairs = 48;
  p.sequential_rows = true;
  p.row_align = 1;                     // row = slot = block: consecutive rows are contiguous
  RunRoundTrip(Staged(p, 160 << 10));  // 5 blocks per chunk: runs split across chunks
}

TEST_F(CudaBackendIpcTest, StagedLoadBlocksPerRowTwoUnaligned) {
  RoundTrip p;
  p.layout.tensors.push_back({1001, 80, 4100, 4100});
  p.layout.tensors.push_back({1001 + 80 * 4100 + 3, 80, 104, 100});
  p.layout.buffer_bytes = (LayoutEnd(p.layout.tensors) + 4096) / 8 * 8;
  p.num_pairs = 40;
  p.blocks_per_row = 2;
  p.num_copies = 3;
  p.slot = 2;
  p.row_align = 1;
  RunRoundTrip(Staged(p, 64 << 10));
}

TEST_F(CudaBackendIpcTest, StagedLoadMixedPageSizes) {
  RoundTrip p;
  const uint64_t blocks = 16;
  p.layout.tensors.push_back({4096, blocks, 4096, 4096});
  p.layout.tensors.push_back({4096 + blocks * 4096, blocks, 512 << 10, 512 << 10});
  p.layout.tensors.push_back({LayoutEnd(p.layout.tensors) + 4096, blocks, 4096, 4096});
  p.layout.buffer_bytes = LayoutEnd(p.layout.tensors) + 4096;
  p.num_pairs = 12;
  RunRoundTrip(Staged(p, 1 << 20));
}

TEST_F(CudaBackendIpcTest, StagedLoadMillionPages) {
  RoundTrip p;
  const uint64_t blocks = 250000;
  uint64_t offset = 256;
  for (int t = 0; t < 4; ++t) {
    p.layout.tensors.push_back({offset, blocks, 256, 256});
    offset += blocks * 256;
  }
  p.layout.buffer_bytes = offset + 256;
  p.num_pairs = blocks;
  p.row_align = 1;
  p.sequential_rows = true;
  RunRoundTrip(Staged(p, 4 << 20));
}

// Staged stores (device-local gather into staging, then copy engines D2H): the same layouts.
// The region is filled with its own pattern first: every byte outside the stored pages must
// keep it.
TEST_F(CudaBackendIpcTest, StagedStorePerLayerTensors) {
  RoundTrip p;
  uint64_t offset = 4096;
  for (int t = 0; t < 8; ++t) {
    p.layout.tensors.push_back({offset, 96, 8192, 8192});
    offset += 96 * 8192 + 512;
  }
  p.layout.buffer_bytes = offset + 4096;
  p.num_pairs = 40;
  p.num_copies = 2;
  p.slot = 1;
  RunRoundTrip(StagedStore(p, 256 << 10));  // 4 blocks per chunk: 10 chunks
}

TEST_F(CudaBackendIpcTest, StagedStoreMergesAdjacentRows) {
  RoundTrip p;
  const uint64_t page = 4 * 2 * 4096;
  p.layout.tensors.push_back({65536, 64, page, page});
  p.layout.buffer_bytes = 65536 + 64 * page;
  p.num_pairs = 48;
  p.sequential_rows = true;
  p.row_align = 1;                          // row = slot = block: consecutive rows are contiguous
  RunRoundTrip(StagedStore(p, 160 << 10));  // 5 blocks per chunk: runs split across chunks
}

TEST_F(CudaBackendIpcTest, StagedStoreBlocksPerRowTwoUnaligned) {
  RoundTrip p;
  p.layout.tensors.push_back({1001, 80, 4100, 4100});
  p.layout.tensors.push_back({1001 + 80 * 4100 + 3, 80, 104, 100});
  p.layout.buffer_bytes = (LayoutEnd(p.layout.tensors) + 4096) / 8 * 8;
  p.num_pairs = 40;
  p.blocks_per_row = 2;
  p.num_copies = 3;
  p.slot = 2;
  p.row_align = 1;
  RunRoundTrip(StagedStore(p, 64 << 10));
}

TEST_F(CudaBackendIpcTest, StagedStoreMixedPageSizes) {
  RoundTrip p;
  const uint64_t blocks = 16;
  p.layout.tensors.push_back({4096, blocks, 4096, 4096});
  p.layout.tensors.push_back({4096 + blocks * 4096, blocks, 512 << 10, 512 << 10});
  p.layout.tensors.push_back({LayoutEnd(p.layout.tensors) + 4096, blocks, 4096, 4096});
  p.layout.buffer_bytes = LayoutEnd(p.layout.tensors) + 4096;
  p.num_pairs = 12;
  RunRoundTrip(StagedStore(p, 1 << 20));
}

TEST_F(CudaBackendIpcTest, StagedStoreMillionPages) {
  RoundTrip p;
  const uint64_t blocks = 250000;
  uint64_t offset = 256;
  for (int t = 0; t < 4; ++t) {
    p.layout.tensors.push_back({offset, blocks, 256, 256});
    offset += blocks * 256;
  }
  p.layout.buffer_bytes = offset + 256;
  p.num_pairs = blocks;
  p.row_align = 1;
  p.sequential_rows = true;
  RunRoundTrip(StagedStore(p, 4 << 20));
}

// Fixture pieces for the event tests: one worker, one backend, one region.
class CudaBackendEventTest : public CudaBackendIpcTest {
 protected:
  void SetUp() override {
    CudaBackendIpcTest::SetUp();
    if (IsSkipped()) return;
    layout_.tensors.push_back({65536, 64, 65536, 65536});
    layout_.tensors.push_back({65536 + 64 * 65536, 64, 4096, 4096});
    layout_.buffer_bytes = LayoutEnd(layout_.tensors) + 4096;
    absl::StatusOr<std::unique_ptr<WorkerProcess>> worker = WorkerProcess::Spawn();
    ASSERT_TRUE(worker.ok()) << worker.status();
    worker_ = std::move(*worker);
    absl::StatusOr<WorkerRegistration> reg = worker_->Setup(layout_, kGenStored, 4);
    ASSERT_TRUE(reg.ok()) << reg.status();
    absl::StatusOr<std::unique_ptr<CudaCopyBackend>> backend =
        CudaCopyBackend::Create(BackendOptions());
    ASSERT_TRUE(backend.ok()) << backend.status();
    backend_ = std::move(*backend);
    geometry_ = Geometry::For(layout_, 1, 1, 0, 4096);
    region_ = std::make_unique<HostRegion>(32 * geometry_.row_bytes);
    ASSERT_OK(backend_->RegisterRegion(region_->base(), region_->bytes(), geometry_.row_bytes));
    absl::StatusOr<std::unique_ptr<WorkerMemory>> memory = backend_->OpenWorker(*reg);
    ASSERT_TRUE(memory.ok()) << memory.status();
    memory_ = std::move(*memory);
  }

  virtual CudaBackendOptions BackendOptions() const {
    CudaBackendOptions o;
    o.forced_path = daemon::cuda::ForcedPath::kKernel;
    return o;
  }

  // A load whose event fires only after 3 s, with a 300 ms timeout: it fails at the timeout and
  // never writes the worker's blocks later; the worker's stream works again afterwards.
  void CheckLoadTimeout() {
    std::vector<uint64_t> blocks = {1, 2, 3};
    std::vector<uint64_t> rows = {4, 5, 6};
    ASSERT_OK(RunJob(backend_.get(), MakeJob(CopyDirection::kStore, memory_.get(), *region_,
                                             geometry_, blocks, rows))
                  .status);
    ASSERT_OK(worker_->SpinFillRecord(absl::Seconds(3), kGenLate, 0));
    std::vector<uint64_t> load_blocks = {10, 11, 12};
    CopyJob job = MakeJob(CopyDirection::kLoad, memory_.get(), *region_, geometry_, load_blocks,
                          rows, /*event_index=*/0);
    job.timeout = absl::Milliseconds(300);
    JobResult r = RunJob(backend_.get(), std::move(job));
    EXPECT_EQ(r.status.code(), absl::StatusCode::kDeadlineExceeded) << r.status;
    EXPECT_LT(r.elapsed, absl::Seconds(2));
    ASSERT_OK(worker_->Sync());
    absl::SleepFor(absl::Milliseconds(300));
    std::string detail;
    absl::StatusOr<uint64_t> mismatches = worker_->CountMismatches(kGenLate, {}, &detail);
    ASSERT_TRUE(mismatches.ok()) << mismatches.status();
    EXPECT_EQ(*mismatches, 0u) << "a cancelled load wrote the worker's blocks: " << detail;
    ASSERT_OK(RunJob(backend_.get(), MakeJob(CopyDirection::kLoad, memory_.get(), *region_,
                                             geometry_, load_blocks, rows, 0))
                  .status);
    std::vector<WorkerProcess::Expect> expect;
    for (size_t i = 0; i < blocks.size(); ++i) {
      expect.push_back({load_blocks[i], blocks[i], kGenStored});
    }
    mismatches = worker_->CountMismatches(kGenLate, expect, &detail);
    ASSERT_TRUE(mismatches.ok()) << mismatches.status();
    EXPECT_EQ(*mismatches, 0u) << detail;
  }

  // The worker writes new KV with a delayed kernel and records its event; the store names the
  // event and must copy the new bytes, not the old ones.
  void CheckStoreWaits() {
    std::vector<uint64_t> blocks = {3, 17, 42, 5, 63, 0};
    std::vector<uint64_t> rows = {9, 2, 30, 4, 11, 0};
    ASSERT_OK(worker_->SpinFillRecord(absl::Milliseconds(300), kGenLate, 1));
    JobResult r = RunJob(backend_.get(), MakeJob(CopyDirection::kStore, memory_.get(), *region_,
                                                 geometry_, blocks, rows, /*event_index=*/1));
    ASSERT_OK(r.status);
    EXPECT_GE(r.elapsed, absl::Milliseconds(200)) << "the store did not wait for the event";
    std::vector<uint8_t> expected = RegionPattern(region_->bytes());
    ApplyStore(layout_, geometry_, kGenLate, blocks, rows, &expected);
    EXPECT_TRUE(RegionEquals(*region_, expected));
  }

  // A store stuck behind an event that does not fire in time fails at its timeout, and its copy
  // never runs later (the region stays untouched after the event finally fires). The worker's
  // stores work again afterwards.
  void CheckStoreTimeout() {
    std::vector<uint64_t> blocks = {7, 8, 9};
    std::vector<uint64_t> rows = {1, 2, 3};
    ASSERT_OK(worker_->SpinFillRecord(absl::Seconds(3), kGenLate, 0));
    CopyJob job = MakeJob(CopyDirection::kStore, memory_.get(), *region_, geometry_, blocks, rows,
                          /*event_index=*/0);
    job.timeout = absl::Milliseconds(300);
    JobResult r = RunJob(backend_.get(), std::move(job));
    EXPECT_EQ(r.status.code(), absl::StatusCode::kDeadlineExceeded) << r.status;
    EXPECT_LT(r.elapsed, absl::Seconds(2)) << "the timeout was not applied while waiting";
    EXPECT_EQ(r.bytes, 0u);
    ASSERT_OK(worker_->Sync());  // the event fires now
    absl::SleepFor(absl::Milliseconds(300));
    EXPECT_TRUE(RegionEquals(*region_, RegionPattern(region_->bytes())))
        << "a cancelled copy wrote into the region";
    // The stream is usable again.
    JobResult again = RunJob(backend_.get(), MakeJob(CopyDirection::kStore, memory_.get(), *region_,
                                                     geometry_, blocks, rows, 0));
    ASSERT_OK(again.status);
    std::vector<uint8_t> expected = RegionPattern(region_->bytes());
    ApplyStore(layout_, geometry_, kGenLate, blocks, rows, &expected);
    EXPECT_TRUE(RegionEquals(*region_, expected));
  }

  void TearDown() override {
    memory_.reset();
    if (backend_ != nullptr && region_ != nullptr) backend_->UnregisterRegion(region_->base());
    backend_.reset();
    region_.reset();
    worker_.reset();
  }

  WorkerLayout layout_;
  Geometry geometry_;
  std::unique_ptr<WorkerProcess> worker_;
  std::unique_ptr<CudaCopyBackend> backend_;
  std::unique_ptr<HostRegion> region_;
  std::unique_ptr<WorkerMemory> memory_;
};

// The worker writes new KV with a delayed kernel and records its event; the store names the
// event and must copy the new bytes, not the old ones.
TEST_F(CudaBackendEventTest, StoreWaitsForWorkerEvent) { CheckStoreWaits(); }

// vLLM #50696: the engine zeroes newly allocated blocks on its stream, then the load must land
// after that. The load waits on the event and records it again when done.
TEST_F(CudaBackendEventTest, LoadWaitsForEventAndRecordsIt) {
  std::vector<uint64_t> blocks = {1, 2, 3, 4};
  std::vector<uint64_t> rows = {20, 21, 7, 8};
  ASSERT_OK(RunJob(backend_.get(),
                   MakeJob(CopyDirection::kStore, memory_.get(), *region_, geometry_, blocks, rows))
                .status);
  ASSERT_OK(worker_->SpinFillRecord(absl::Milliseconds(300), kGenLate, 2));  // "zeroing"
  std::vector<uint64_t> load_blocks = {40, 50, 60, 10};
  JobResult r = RunJob(backend_.get(), MakeJob(CopyDirection::kLoad, memory_.get(), *region_,
                                               geometry_, load_blocks, rows, /*event_index=*/2));
  ASSERT_OK(r.status);
  EXPECT_GE(r.elapsed, absl::Milliseconds(200)) << "the load did not wait for the event";
  ASSERT_OK(worker_->WaitEvent(2));  // the worker's stream waits for the daemon's record
  std::vector<WorkerProcess::Expect> expect;
  for (size_t i = 0; i < blocks.size(); ++i)
    expect.push_back({load_blocks[i], blocks[i], kGenStored});
  std::string detail;
  absl::StatusOr<uint64_t> mismatches = worker_->CountMismatches(kGenLate, expect, &detail);
  ASSERT_TRUE(mismatches.ok()) << mismatches.status();
  EXPECT_EQ(*mismatches, 0u) << detail;
}

// LMCache #4516 / PegaFlow #403: a store stuck behind an event that does not fire in time fails
// at its timeout, and its copy never runs later (the region stays untouched after the event
// finally fires). The worker's stream works again afterwards.
TEST_F(CudaBackendEventTest, TimeoutCancelsCopyThatNeverStarted) { CheckStoreTimeout(); }

TEST_F(CudaBackendEventTest, LoadTimeoutCancelsCopyThatNeverStarted) { CheckLoadTimeout(); }

// The same event semantics on the staged load path.
class CudaBackendStagedEventTest : public CudaBackendEventTest {
 protected:
  CudaBackendOptions BackendOptions() const override {
    CudaBackendOptions o;
    o.forced_path = daemon::cuda::ForcedPath::kStaged;
    o.staging_chunk_bytes = 256 << 10;
    return o;
  }
};

TEST_F(CudaBackendStagedEventTest, StoreWaitsForWorkerEvent) { CheckStoreWaits(); }

// Was DISABLED (a cancelled staged store blocked its stream, then cudaHostUnregister): the event
// is now watched from the host, so nothing is ever queued behind it.
TEST_F(CudaBackendStagedEventTest, StoreTimeoutCancelsCopyThatNeverStarted) { CheckStoreTimeout(); }

// A store whose worker event does not fire in time never blocks the worker's next store: the
// first fails at its deadline having written nothing, the second (no event) completes at once.
TEST_F(CudaBackendStagedEventTest, StoreBehindAStuckEventDoesNotBlockTheNext) {
  ASSERT_OK(worker_->SpinFillRecord(absl::Seconds(2), kGenLate, 0));
  CopyJob first = MakeJob(CopyDirection::kStore, memory_.get(), *region_, geometry_, {7, 8, 9},
                          {1, 2, 3}, /*event_index=*/0);
  first.timeout = absl::Milliseconds(300);
  CopyJob second =
      MakeJob(CopyDirection::kStore, memory_.get(), *region_, geometry_, {10, 11}, {5, 6});
  second.timeout = absl::Seconds(5);
  absl::Notification first_done, second_done;
  absl::Status first_status, second_status;
  backend_->Submit(std::move(first), [&](absl::Status s, uint64_t) {
    first_status = s;
    first_done.Notify();
  });
  backend_->Submit(std::move(second), [&](absl::Status s, uint64_t) {
    second_status = s;
    second_done.Notify();
  });
  ASSERT_TRUE(second_done.WaitForNotificationWithTimeout(absl::Seconds(1)))
      << "a store was blocked behind another store's worker event";
  EXPECT_TRUE(second_status.ok()) << second_status;
  ASSERT_TRUE(first_done.WaitForNotificationWithTimeout(absl::Seconds(10)));
  EXPECT_EQ(first_status.code(), absl::StatusCode::kDeadlineExceeded) << first_status;
  ASSERT_OK(worker_->Sync());  // the event has fired by now
  absl::SleepFor(absl::Milliseconds(300));
  std::vector<uint8_t> second_only = RegionPattern(region_->bytes());
  ApplyStore(layout_, geometry_, kGenStored, {10, 11}, {5, 6}, &second_only);
  EXPECT_TRUE(RegionEquals(*region_, second_only))
      << "the timed-out store wrote into the region, or the second store did not";
  std::vector<uint64_t> blocks = {7, 8, 9};
  std::vector<uint64_t> rows = {1, 2, 3};
  ASSERT_OK(RunJob(backend_.get(), MakeJob(CopyDirection::kStore, memory_.get(), *region_,
                                           geometry_, blocks, rows, 0))
                .status);
  std::vector<uint8_t> expected = second_only;
  ApplyStore(layout_, geometry_, kGenLate, blocks, rows, &expected);
  EXPECT_TRUE(RegionEquals(*region_, expected));
}

TEST_F(CudaBackendStagedEventTest, LoadWaitsForEventAndRecordsIt) {
  std::vector<uint64_t> blocks = {1, 2, 3, 4, 5, 6, 7};
  std::vector<uint64_t> rows = {20, 21, 7, 8, 9, 30, 31};
  ASSERT_OK(RunJob(backend_.get(),
                   MakeJob(CopyDirection::kStore, memory_.get(), *region_, geometry_, blocks, rows))
                .status);
  ASSERT_OK(worker_->SpinFillRecord(absl::Milliseconds(300), kGenLate, 2));
  std::vector<uint64_t> load_blocks = {40, 50, 60, 10, 11, 12, 13};
  JobResult r = RunJob(backend_.get(), MakeJob(CopyDirection::kLoad, memory_.get(), *region_,
                                               geometry_, load_blocks, rows, /*event_index=*/2));
  ASSERT_OK(r.status);
  EXPECT_GE(r.elapsed, absl::Milliseconds(200)) << "the load did not wait for the event";
  ASSERT_OK(worker_->WaitEvent(2));
  std::vector<WorkerProcess::Expect> expect;
  for (size_t i = 0; i < blocks.size(); ++i)
    expect.push_back({load_blocks[i], blocks[i], kGenStored});
  std::string detail;
  absl::StatusOr<uint64_t> mismatches = worker_->CountMismatches(kGenLate, expect, &detail);
  ASSERT_TRUE(mismatches.ok()) << mismatches.status();
  EXPECT_EQ(*mismatches, 0u) << detail;
}

TEST_F(CudaBackendStagedEventTest, LoadTimeoutCancelsCopyThatNeverStarted) { CheckLoadTimeout(); }

TEST_F(CudaBackendEventTest, RejectsInvalidJobsThroughDone) {
  CopyJob job = MakeJob(CopyDirection::kStore, memory_.get(), *region_, geometry_, {64}, {0});
  EXPECT_EQ(RunJob(backend_.get(), job).status.code(), absl::StatusCode::kInvalidArgument);
  job = MakeJob(CopyDirection::kStore, memory_.get(), *region_, geometry_, {1}, {32});
  EXPECT_EQ(RunJob(backend_.get(), job).status.code(), absl::StatusCode::kInvalidArgument);
  job = MakeJob(CopyDirection::kStore, memory_.get(), *region_, geometry_, {1}, {0}, 4);
  EXPECT_EQ(RunJob(backend_.get(), job).status.code(), absl::StatusCode::kInvalidArgument);
  // blocks ≠ rows × blocks_per_row cannot reach a backend: jobs arrive as runs, and that rule is
  // ValidatePart's at the edge (daemon/engine/job_part_test.cc, "want 2").
  job = MakeJob(CopyDirection::kStore, memory_.get(), *region_, geometry_, {}, {});
  JobResult empty = RunJob(backend_.get(), job);
  EXPECT_TRUE(empty.status.ok()) << empty.status;
  EXPECT_EQ(empty.bytes, 0u);
}

TEST_F(CudaBackendIpcTest, RejectsRegistrationsThatDoNotFitTheirAllocation) {
  WorkerLayout layout;
  layout.tensors.push_back({4096, 16, 4096, 4096});
  layout.buffer_bytes = 4096 + 16 * 4096;
  absl::StatusOr<std::unique_ptr<WorkerProcess>> worker = WorkerProcess::Spawn();
  ASSERT_TRUE(worker.ok()) << worker.status();
  absl::StatusOr<WorkerRegistration> reg = (*worker)->Setup(layout, kGenStored, 1);
  ASSERT_TRUE(reg.ok()) << reg.status();
  absl::StatusOr<std::unique_ptr<CudaCopyBackend>> backend = CudaCopyBackend::Create({});
  ASSERT_TRUE(backend.ok()) << backend.status();

  WorkerRegistration bad = *reg;
  bad.tensors[0].num_blocks = 1 << 20;  // beyond the claimed allocation size
  EXPECT_EQ((*backend)->OpenWorker(bad).status().code(), absl::StatusCode::kInvalidArgument);

  bad = *reg;
  bad.tensors[0].allocation_bytes += uint64_t{1} << 30;  // claims more than the real allocation
  bad.tensors[0].num_blocks = (bad.tensors[0].allocation_bytes - 4096) / 4096;
  absl::Status s = (*backend)->OpenWorker(bad).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;

  // The good registration still opens (nothing was left half-open).
  absl::StatusOr<std::unique_ptr<WorkerMemory>> memory = (*backend)->OpenWorker(*reg);
  ASSERT_TRUE(memory.ok()) << memory.status();
}

// Two workers (two processes) of one engine fill the two slots of the same rows concurrently.
TEST_F(CudaBackendIpcTest, TwoWorkersShareRows) {
  WorkerLayout layout;
  layout.tensors.push_back({8192, 64, 16384, 16384});
  layout.buffer_bytes = 8192 + 64 * 16384;
  absl::StatusOr<std::unique_ptr<CudaCopyBackend>> backend = CudaCopyBackend::Create({});
  ASSERT_TRUE(backend.ok()) << backend.status();
  std::unique_ptr<WorkerProcess> workers[2];
  std::unique_ptr<WorkerMemory> memories[2];
  for (int w = 0; w < 2; ++w) {
    absl::StatusOr<std::unique_ptr<WorkerProcess>> worker = WorkerProcess::Spawn();
    ASSERT_TRUE(worker.ok()) << worker.status();
    workers[w] = std::move(*worker);
    absl::StatusOr<WorkerRegistration> reg = workers[w]->Setup(layout, kGenStored + 100 * w, 1);
    ASSERT_TRUE(reg.ok()) << reg.status();
    absl::StatusOr<std::unique_ptr<WorkerMemory>> memory = (*backend)->OpenWorker(*reg);
    ASSERT_TRUE(memory.ok()) << memory.status();
    memories[w] = std::move(*memory);
  }
  Geometry g[2] = {Geometry::For(layout, 1, 2, 0, 4096), Geometry::For(layout, 1, 2, 1, 4096)};
  HostRegion region(40 * g[0].row_bytes);
  ASSERT_OK((*backend)->RegisterRegion(region.base(), region.bytes(), g[0].row_bytes));
  std::vector<uint64_t> blocks = {0, 9, 33, 12, 63, 40, 2, 7};
  std::vector<uint64_t> rows = {39, 0, 5, 6, 20, 21, 22, 1};
  JobResult results[2];
  std::thread threads[2];
  for (int w = 0; w < 2; ++w) {
    threads[w] = std::thread([&, w] {
      results[w] = RunJob(backend->get(), MakeJob(CopyDirection::kStore, memories[w].get(), region,
                                                  g[w], blocks, rows));
    });
  }
  for (auto& t : threads) t.join();
  std::vector<uint8_t> expected = RegionPattern(region.bytes());
  for (int w = 0; w < 2; ++w) {
    ASSERT_OK(results[w].status);
    ApplyStore(layout, g[w], kGenStored + 100 * w, blocks, rows, &expected);
  }
  EXPECT_TRUE(RegionEquals(region, expected));
  for (int w = 0; w < 2; ++w) {
    ASSERT_OK(workers[w]->Fill(kGenPoison));
    ASSERT_OK(RunJob(backend->get(),
                     MakeJob(CopyDirection::kLoad, memories[w].get(), region, g[w], blocks, rows))
                  .status);
    std::vector<WorkerProcess::Expect> expect;
    for (uint64_t b : blocks) expect.push_back({b, b, kGenStored + 100 * w});
    std::string detail;
    absl::StatusOr<uint64_t> mismatches = workers[w]->CountMismatches(kGenPoison, expect, &detail);
    ASSERT_TRUE(mismatches.ok()) << mismatches.status();
    EXPECT_EQ(*mismatches, 0u) << "worker " << w << ": " << detail;
  }
  for (auto& m : memories) m.reset();
  (*backend)->UnregisterRegion(region.base());
}

// A worker's staging is freed once no staged job used it for staging_idle_release, and the next
// staged job allocates it again and moves the right bytes.
TEST_F(CudaBackendIpcTest, StagingIsReleasedWhenIdle) {
  CudaBackendOptions o;
  o.forced_path = daemon::cuda::ForcedPath::kStaged;
  o.staging_chunk_bytes = 4 << 20;
  o.staging_idle_release = absl::Milliseconds(300);
  absl::StatusOr<std::unique_ptr<CudaCopyBackend>> backend = CudaCopyBackend::Create(o);
  ASSERT_TRUE(backend.ok()) << backend.status();
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  const uint64_t page = 4096, n = 256;
  void* gpu = nullptr;
  ASSERT_EQ(cudaMalloc(&gpu, n * page), cudaSuccess);
  ASSERT_EQ(cudaMemset(gpu, 0x5a, n * page), cudaSuccess);
  CudaCopyBackend::LocalTensor t{reinterpret_cast<uint64_t>(gpu), n, page, page};
  absl::StatusOr<std::unique_ptr<WorkerMemory>> memory = OpenLocalWorker(**backend, 0, {t}, {});
  ASSERT_TRUE(memory.ok()) << memory.status();
  HostRegion region(n * page);
  ASSERT_OK((*backend)->RegisterRegion(region.base(), region.bytes(), page));
  auto store = [&] {
    CopyJob job;
    job.direction = CopyDirection::kStore;
    job.memory = memory->get();
    job.region_base = region.base();
    job.row_bytes = page;
    job.slot_bytes = page;
    for (uint64_t i = 0; i < n; ++i) {
      job.runs.push_back(CopyRun{i, n - 1 - i, 1});
    }
    return RunJob(backend->get(), std::move(job));
  };
  auto all = [&](uint8_t v) {
    for (uint64_t i = 0; i < n * page; ++i) {
      if (region.base()[i] != v) return false;
    }
    return true;
  };
  const uint64_t before = (*backend)->GpuMemoryBytes()[0];
  ASSERT_OK(store().status);
  EXPECT_TRUE(all(0x5a));
  const uint64_t staged = (*backend)->GpuMemoryBytes()[0];
  EXPECT_GE(staged, before + 2 * (4 << 20)) << "no staging allocated";
  const absl::Time deadline = absl::Now() + absl::Seconds(5);
  while ((*backend)->GpuMemoryBytes()[0] > staged - 2 * (4 << 20) && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(50));
  }
  EXPECT_LE((*backend)->GpuMemoryBytes()[0], staged - 2 * (4 << 20)) << "staging kept while idle";
  ASSERT_EQ(cudaMemset(gpu, 0x3c, n * page), cudaSuccess);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  ASSERT_OK(store().status);
  EXPECT_TRUE(all(0x3c)) << "the store after the release moved the wrong bytes";
  memory->reset();
  (*backend)->UnregisterRegion(region.base());
  backend->reset();
  cudaFree(gpu);
}

// The device's staging limit is shared by its workers: with room for one lane's staging, the
// first worker stages and the second worker's staged jobs go by copy engines, with the right
// bytes and no more staging allocated; once the first worker's staging is released, the second
// stages.
TEST_F(CudaBackendIpcTest, StagingIsBoundedPerDevice) {
  CudaBackendOptions o;
  o.forced_path = daemon::cuda::ForcedPath::kStaged;
  o.staging_chunk_bytes = 4 << 20;
  o.staging_bytes_per_device = 2 * (4 << 20);  // one lane: 2 buffers of 4 MiB
  o.staging_idle_release = absl::Milliseconds(300);
  absl::StatusOr<std::unique_ptr<CudaCopyBackend>> backend = CudaCopyBackend::Create(o);
  ASSERT_TRUE(backend.ok()) << backend.status();
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  const uint64_t page = 4096, n = 256;
  void* gpu[2] = {};
  std::unique_ptr<WorkerMemory> memory[2];
  for (int w = 0; w < 2; ++w) {
    ASSERT_EQ(cudaMalloc(&gpu[w], n * page), cudaSuccess);
    ASSERT_EQ(cudaMemset(gpu[w], 0x11 * (w + 1), n * page), cudaSuccess);
    CudaCopyBackend::LocalTensor t{reinterpret_cast<uint64_t>(gpu[w]), n, page, page};
    absl::StatusOr<std::unique_ptr<WorkerMemory>> m = OpenLocalWorker(**backend, 0, {t}, {});
    ASSERT_TRUE(m.ok()) << m.status();
    memory[w] = *std::move(m);
  }
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  HostRegion region(2 * n * page);
  ASSERT_OK((*backend)->RegisterRegion(region.base(), region.bytes(), page));
  auto store = [&](int w) {
    CopyJob job;
    job.direction = CopyDirection::kStore;
    job.memory = memory[w].get();
    job.region_base = region.base();
    job.row_bytes = page;
    job.slot_bytes = page;
    for (uint64_t i = 0; i < n; ++i) {
      job.runs.push_back(CopyRun{i, w * n + (n - 1 - i), 1});
    }
    return RunJob(backend->get(), std::move(job));
  };
  auto holds = [&](int w, uint8_t v) {
    for (uint64_t i = w * n * page; i < (w + 1) * n * page; ++i) {
      if (region.base()[i] != v) return false;
    }
    return true;
  };
  const uint64_t before = (*backend)->GpuMemoryBytes()[0];
  ASSERT_OK(store(0).status);
  const uint64_t one_lane = (*backend)->GpuMemoryBytes()[0];
  EXPECT_GE(one_lane, before + 2 * (4 << 20)) << "the first worker did not stage";
  ASSERT_OK(store(1).status);
  EXPECT_TRUE(holds(0, 0x11));
  EXPECT_TRUE(holds(1, 0x22)) << "the copy-engine fallback moved the wrong bytes";
  EXPECT_LT((*backend)->GpuMemoryBytes()[0], one_lane + (4 << 20))
      << "the second worker allocated staging beyond the device's limit";
  // Once worker 0's staging is released for idleness, worker 1 stages.
  const absl::Time deadline = absl::Now() + absl::Seconds(5);
  while ((*backend)->GpuMemoryBytes()[0] > one_lane - 2 * (4 << 20) && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(50));
  }
  ASSERT_EQ(cudaMemset(gpu[1], 0x33, n * page), cudaSuccess);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  ASSERT_OK(store(1).status);
  EXPECT_TRUE(holds(1, 0x33));
  EXPECT_GE((*backend)->GpuMemoryBytes()[0], before + 2 * (4 << 20)) << "worker 1 did not stage";
  for (auto& m : memory) m.reset();
  (*backend)->UnregisterRegion(region.base());
  backend->reset();
  for (void* p : gpu) cudaFree(p);
}

// Registering a region creates no CUDA context (whole GPU node: a GPU no worker uses holds
// none of the daemon's memory): the region is pinned when the first worker opens, in that
// worker's context; a region registered after that is pinned at once. Both move bytes.
TEST_F(CudaBackendIpcTest, RegionsArePinnedInTheContextOfAWorkersDevice) {
  absl::StatusOr<std::unique_ptr<CudaCopyBackend>> backend = CudaCopyBackend::Create({});
  ASSERT_TRUE(backend.ok()) << backend.status();
  const uint64_t page = 4096, n = 64;
  HostRegion early(n * page), late(n * page);
  ASSERT_OK((*backend)->RegisterRegion(early.base(), early.bytes(), page));
  EXPECT_TRUE((*backend)->GpuMemoryBytes().empty()) << "a region created a CUDA context";
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  void* gpu = nullptr;
  ASSERT_EQ(cudaMalloc(&gpu, n * page), cudaSuccess);
  ASSERT_EQ(cudaMemset(gpu, 0x6b, n * page), cudaSuccess);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  CudaCopyBackend::LocalTensor t{reinterpret_cast<uint64_t>(gpu), n, page, page};
  absl::StatusOr<std::unique_ptr<WorkerMemory>> memory = OpenLocalWorker(**backend, 0, {t}, {});
  ASSERT_TRUE(memory.ok()) << memory.status();
  EXPECT_EQ((*backend)->GpuMemoryBytes().size(), 1u);
  ASSERT_OK((*backend)->RegisterRegion(late.base(), late.bytes(), page));
  for (HostRegion* region : {&early, &late}) {
    CopyJob job;
    job.direction = CopyDirection::kStore;
    job.memory = memory->get();
    job.region_base = region->base();
    job.row_bytes = page;
    job.slot_bytes = page;
    for (uint64_t i = 0; i < n; ++i) {
      AppendRun(&job.runs, CopyRun{i, i, 1});
    }
    ASSERT_OK(RunJob(backend->get(), std::move(job)).status);
    for (uint64_t i = 0; i < n * page; ++i) {
      ASSERT_EQ(region->base()[i], 0x6b) << "byte " << i;
    }
  }
  memory->reset();
  (*backend)->UnregisterRegion(early.base());
  (*backend)->UnregisterRegion(late.base());
  backend->reset();
  cudaFree(gpu);
}

// Copy path v3: on a device without SM paths (no MPS: the default rule) every job goes by copy
// engines and the daemon's GPU memory stays at its context after any mix of jobs — per-layer
// 4 KiB pages in random rows (what the staged and kernel paths took before, with a pooled
// descriptor table and staging each), several jobs in flight, and one job of 2^20 blocks. The
// region is checked byte for byte after the stores, the GPU after loads into other blocks.
TEST_F(CudaBackendIpcTest, WithoutSmPathsGpuMemoryStaysAtTheContext) {
  int mps = 0;
  ASSERT_EQ(cudaDeviceGetAttribute(&mps, cudaDevAttrMpsEnabled, 0), cudaSuccess);
  if (mps != 0) GTEST_SKIP() << "MPS is on here: the SM paths are enabled by design";
  absl::StatusOr<std::unique_ptr<CudaCopyBackend>> backend = CudaCopyBackend::Create({});
  ASSERT_TRUE(backend.ok()) << backend.status();
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  std::mt19937_64 rng(1717);
  auto random_bytes = [&](uint64_t n) {
    std::vector<uint8_t> v(n);
    for (uint64_t i = 0; i < n; i += 8) {
      const uint64_t r = rng();
      std::memcpy(v.data() + i, &r, std::min<uint64_t>(8, n - i));
    }
    return v;
  };
  // Worker A: 8 per-layer tensors of 4 KiB pages, 1024 blocks each, in one allocation.
  const uint64_t page = 4096, layers = 8, blocks = 1024, bpb = layers * page;
  void* a_gpu = nullptr;
  ASSERT_EQ(cudaMalloc(&a_gpu, layers * blocks * page), cudaSuccess);
  const std::vector<uint8_t> a_data = random_bytes(layers * blocks * page);
  ASSERT_EQ(cudaMemcpy(a_gpu, a_data.data(), a_data.size(), cudaMemcpyHostToDevice), cudaSuccess);
  std::vector<CudaCopyBackend::LocalTensor> a_tensors;
  for (uint64_t l = 0; l < layers; ++l) {
    a_tensors.push_back(
        {reinterpret_cast<uint64_t>(a_gpu) + l * blocks * page, blocks, page, page});
  }
  // Worker B: one tensor of 2^20 blocks of 256 bytes.
  const uint64_t b_blocks = uint64_t{1} << 20, b_page = 256;
  void* b_gpu = nullptr;
  ASSERT_EQ(cudaMalloc(&b_gpu, b_blocks * b_page), cudaSuccess);
  const std::vector<uint8_t> b_data = random_bytes(b_blocks * b_page);
  ASSERT_EQ(cudaMemcpy(b_gpu, b_data.data(), b_data.size(), cudaMemcpyHostToDevice), cudaSuccess);
  absl::StatusOr<std::unique_ptr<WorkerMemory>> a = OpenLocalWorker(**backend, 0, a_tensors, {});
  ASSERT_TRUE(a.ok()) << a.status();
  absl::StatusOr<std::unique_ptr<WorkerMemory>> b = OpenLocalWorker(
      **backend, 0, {{reinterpret_cast<uint64_t>(b_gpu), b_blocks, b_page, b_page}}, {});
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_FALSE((*backend)->SmPathsEnabled(0));
  HostRegion a_region(blocks * bpb), b_region(b_blocks * b_page);
  ASSERT_OK((*backend)->RegisterRegion(a_region.base(), a_region.bytes(), bpb));
  ASSERT_OK((*backend)->RegisterRegion(b_region.base(), b_region.bytes(), b_page));
  const uint64_t before = (*backend)->GpuMemoryBytes()[0];

  // Four store jobs in flight at once, random blocks into random rows (4 KiB host runs).
  const std::vector<uint64_t> rows = Shuffled(blocks, blocks, &rng);
  auto a_job = [&](CopyDirection d, uint64_t part, const std::vector<uint64_t>& gpu_of_row) {
    const uint64_t begin = part * blocks / 4, end = (part + 1) * blocks / 4;
    return WholeRowJob(d, a->get(), a_region, bpb,
                       {gpu_of_row.begin() + begin, gpu_of_row.begin() + end},
                       {rows.begin() + begin, rows.begin() + end});
  };
  const std::vector<uint64_t> stored_from = Shuffled(blocks, blocks, &rng);
  std::vector<std::thread> threads;
  std::vector<JobResult> results(4);
  for (uint64_t part = 0; part < 4; ++part) {
    threads.emplace_back([&, part] {
      results[part] = RunJob(backend->get(), a_job(CopyDirection::kStore, part, stored_from));
    });
  }
  // Meanwhile: 2^20 blocks in one job, consecutive blocks into rows in reverse halves.
  std::vector<uint64_t> big_blocks(b_blocks), big_rows(b_blocks);
  for (uint64_t i = 0; i < b_blocks; ++i) {
    big_blocks[i] = i;
    big_rows[i] = (i + b_blocks / 2) % b_blocks;
  }
  const JobResult big_result =
      RunJob(backend->get(), WholeRowJob(CopyDirection::kStore, b->get(), b_region, b_page,
                                         std::move(big_blocks), std::move(big_rows)));
  for (std::thread& t : threads) t.join();
  for (const JobResult& r : results) {
    ASSERT_OK(r.status);
    EXPECT_EQ(r.bytes, blocks / 4 * bpb);
  }
  ASSERT_OK(big_result.status);
  EXPECT_EQ(big_result.bytes, b_blocks * b_page);
  for (uint64_t i = 0; i < blocks; ++i) {
    for (uint64_t l = 0; l < layers; ++l) {
      ASSERT_EQ(std::memcmp(a_region.base() + rows[i] * bpb + l * page,
                            a_data.data() + (l * blocks + stored_from[i]) * page, page),
                0)
          << "row " << rows[i] << " layer " << l;
    }
  }
  const uint64_t half = b_blocks / 2 * b_page;
  ASSERT_EQ(std::memcmp(b_region.base() + half, b_data.data(), half), 0);
  ASSERT_EQ(std::memcmp(b_region.base(), b_data.data() + half, half), 0);

  // Loads of the same rows into other blocks, four in flight; then the whole worker is compared.
  ASSERT_EQ(cudaMemset(a_gpu, 0, layers * blocks * page), cudaSuccess);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  const std::vector<uint64_t> loaded_into = Shuffled(blocks, blocks, &rng);
  threads.clear();
  for (uint64_t part = 0; part < 4; ++part) {
    threads.emplace_back([&, part] {
      results[part] = RunJob(backend->get(), a_job(CopyDirection::kLoad, part, loaded_into));
    });
  }
  for (std::thread& t : threads) t.join();
  for (const JobResult& r : results) ASSERT_OK(r.status);
  std::vector<uint8_t> back(a_data.size());
  ASSERT_EQ(cudaMemcpy(back.data(), a_gpu, back.size(), cudaMemcpyDeviceToHost), cudaSuccess);
  for (uint64_t i = 0; i < blocks; ++i) {
    for (uint64_t l = 0; l < layers; ++l) {
      ASSERT_EQ(std::memcmp(back.data() + (l * blocks + loaded_into[i]) * page,
                            a_data.data() + (l * blocks + stored_from[i]) * page, page),
                0)
          << "block " << loaded_into[i] << " layer " << l;
    }
  }
  EXPECT_EQ((*backend)->GpuMemoryBytes()[0], before)
      << "the daemon's GPU memory grew with jobs on the copy-engine path";
  a->reset();
  b->reset();
  (*backend)->UnregisterRegion(a_region.base());
  (*backend)->UnregisterRegion(b_region.base());
  backend->reset();
  cudaFree(a_gpu);
  cudaFree(b_gpu);
}

// The SM paths are enabled exactly by the rule: MPS (cudaDevAttrMpsEnabled), the operator's
// word (kAlways) or a forced SM path; never by kNever or without MPS. KVO_EXPECT_MPS=1 / 0 (set
// by run_on_device.sh, which runs this test once under an MPS server) asserts what the driver
// reports. Each backend moves a scattered 4 KiB store byte for byte, whichever path it takes.
TEST_F(CudaBackendIpcTest, SmPathsOnlyWithMpsOrTheOperatorsWord) {
  using daemon::cuda::ForcedPath;
  using daemon::cuda::SmCopies;
  int mps = 0;
  ASSERT_EQ(cudaDeviceGetAttribute(&mps, cudaDevAttrMpsEnabled, 0), cudaSuccess);
  if (const char* expect = std::getenv("KVO_EXPECT_MPS")) {
    EXPECT_EQ(mps != 0, std::string(expect) == "1")
        << "cudaDevAttrMpsEnabled is " << mps << " with KVO_EXPECT_MPS=" << expect;
  }
  struct Case {
    SmCopies rule;
    ForcedPath forced;
    bool sm_paths;
  };
  const Case cases[] = {{SmCopies::kIfMps, ForcedPath::kAuto, mps != 0},
                        {SmCopies::kAlways, ForcedPath::kAuto, true},
                        {SmCopies::kNever, ForcedPath::kAuto, false},
                        {SmCopies::kIfMps, ForcedPath::kKernel, true},
                        {SmCopies::kNever, ForcedPath::kCopyEngine, false}};
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  const uint64_t page = 4096, n = 256;
  void* gpu = nullptr;
  ASSERT_EQ(cudaMalloc(&gpu, n * page), cudaSuccess);
  std::vector<uint8_t> data(n * page);
  std::mt19937_64 rng(99);
  for (uint8_t& byte : data) byte = static_cast<uint8_t>(rng());
  ASSERT_EQ(cudaMemcpy(gpu, data.data(), data.size(), cudaMemcpyHostToDevice), cudaSuccess);
  for (const Case& c : cases) {
    CudaBackendOptions o;
    o.sm_copies = c.rule;
    o.forced_path = c.forced;
    absl::StatusOr<std::unique_ptr<CudaCopyBackend>> backend = CudaCopyBackend::Create(o);
    ASSERT_TRUE(backend.ok()) << backend.status();
    CudaCopyBackend::LocalTensor t{reinterpret_cast<uint64_t>(gpu), n, page, page};
    absl::StatusOr<std::unique_ptr<WorkerMemory>> memory = OpenLocalWorker(**backend, 0, {t}, {});
    ASSERT_TRUE(memory.ok()) << memory.status();
    EXPECT_EQ((*backend)->SmPathsEnabled(0), c.sm_paths)
        << "rule " << static_cast<int>(c.rule) << ", forced " << static_cast<int>(c.forced);
    HostRegion region(n * page);
    ASSERT_OK((*backend)->RegisterRegion(region.base(), region.bytes(), page));
    const std::vector<uint64_t> rows = Shuffled(n, n, &rng);
    std::vector<uint64_t> ids(n);
    std::iota(ids.begin(), ids.end(), 0);
    ASSERT_OK(RunJob(backend->get(),
                     WholeRowJob(CopyDirection::kStore, memory->get(), region, page, ids, rows))
                  .status);
    for (uint64_t i = 0; i < n; ++i) {
      ASSERT_EQ(std::memcmp(region.base() + rows[i] * page, data.data() + i * page, page), 0)
          << "block " << i;
    }
    memory->reset();
    (*backend)->UnregisterRegion(region.base());
  }
  cudaFree(gpu);
}

// Last on purpose: garbage event handles go straight to the driver.
TEST(CudaBackendHostileInputTest, GarbageEventHandleIsInvalidArgument) {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) GTEST_SKIP() << "no GPU";
  WorkerLayout layout;
  layout.tensors.push_back({4096, 16, 4096, 4096});
  layout.buffer_bytes = 4096 + 16 * 4096;
  absl::StatusOr<std::unique_ptr<WorkerProcess>> worker = WorkerProcess::Spawn();
  ASSERT_TRUE(worker.ok()) << worker.status();
  absl::StatusOr<WorkerRegistration> reg = (*worker)->Setup(layout, kGenStored, 1);
  ASSERT_TRUE(reg.ok()) << reg.status();
  absl::StatusOr<std::unique_ptr<CudaCopyBackend>> backend = CudaCopyBackend::Create({});
  ASSERT_TRUE(backend.ok()) << backend.status();
  WorkerRegistration bad = *reg;
  bad.event_handles[0] = std::string(bad.event_handles[0].size(), '\x5a');
  absl::Status s = (*backend)->OpenWorker(bad).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  absl::StatusOr<std::unique_ptr<WorkerMemory>> memory = (*backend)->OpenWorker(*reg);
  ASSERT_TRUE(memory.ok()) << memory.status();
}

}  // namespace
}  // namespace kvoffload::testing

int main(int argc, char** argv) {
  if (int rc = kvoffload::testing::MaybeRunWorker(argc, argv); rc >= 0) return rc;
  ::testing::InitGoogleTest(&argc, argv);
  const int rc = RUN_ALL_TESTS();
  const ::testing::UnitTest& u = *::testing::UnitTest::GetInstance();
  std::printf("gpu tests: %d passed, %d failed, %d skipped\n", u.successful_test_count(),
              u.failed_test_count(), u.skipped_test_count());
  return rc;
}
