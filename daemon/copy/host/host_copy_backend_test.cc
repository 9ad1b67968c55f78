#include "daemon/copy/host/host_copy_backend.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <fstream>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/blocking_counter.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "gtest/gtest.h"

namespace kvoffload::daemon {
namespace {

constexpr uint8_t kPoison = 0xA5;

void FillRandom(uint8_t* data, uint64_t bytes, std::mt19937_64& rng) {
  uint64_t i = 0;
  for (; i + 8 <= bytes; i += 8) {
    const uint64_t v = rng() | 0x0101010101010101ull;  // no zero byte anywhere
    std::memcpy(data + i, &v, 8);
  }
  for (; i < bytes; ++i) data[i] = static_cast<uint8_t>(rng() | 1);
}

// A test worker's "device memory": a memfd sealed against shrinking (what the backend requires),
// filled with random bytes, mapped here too so the test can inspect it. Its handle is
// "memfd:<fd>" of this process (the backend opens it through /proc/<getpid()>/fd).
// Unmapped and closed on destruction.
class ShmObject {
 public:
  static std::unique_ptr<ShmObject> Create(uint64_t bytes, std::mt19937_64& rng,
                                           unsigned int seals = F_SEAL_SHRINK) {
    static std::atomic<int> counter{0};
    std::string label = absl::StrCat("kvoffload_test_", getpid(), "_", counter++);
    const int fd = memfd_create(label.c_str(), MFD_CLOEXEC | MFD_ALLOW_SEALING);
    if (fd < 0) return nullptr;
    if (ftruncate(fd, static_cast<off_t>(bytes)) != 0 ||
        (seals != 0 && fcntl(fd, F_ADD_SEALS, seals) != 0)) {
      close(fd);
      return nullptr;
    }
    void* data = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (data == MAP_FAILED) {
      close(fd);
      return nullptr;
    }
    auto object = std::unique_ptr<ShmObject>(
        new ShmObject(std::move(label), fd, static_cast<uint8_t*>(data), bytes));
    FillRandom(object->data(), bytes, rng);
    return object;
  }
  ~ShmObject() {
    munmap(data_, bytes_);
    close(fd_);
  }
  ShmObject(const ShmObject&) = delete;
  ShmObject& operator=(const ShmObject&) = delete;

  const std::string& name() const { return name_; }    // the handle: "memfd:<fd>"
  const std::string& label() const { return label_; }  // in /proc/self/maps
  uint8_t* data() const { return data_; }
  uint64_t bytes() const { return bytes_; }
  std::vector<uint8_t> Snapshot() const { return std::vector<uint8_t>(data_, data_ + bytes_); }

 private:
  ShmObject(std::string label, int fd, uint8_t* data, uint64_t bytes)
      : label_(std::move(label)),
        name_(absl::StrCat("memfd:", fd)),
        fd_(fd),
        data_(data),
        bytes_(bytes) {}
  std::string label_;
  std::string name_;
  int fd_;
  uint8_t* data_;
  uint64_t bytes_;
};

struct Result {
  absl::Status status;
  uint64_t bytes = 0;
  std::thread::id thread;
};

Result RunJob(CopyBackend& backend, CopyJob job) {
  Result result;
  absl::Notification done;
  backend.Submit(std::move(job), [&](absl::Status status, uint64_t bytes) {
    result.status = std::move(status);
    result.bytes = bytes;
    result.thread = std::this_thread::get_id();
    done.Notify();
  });
  done.WaitForNotification();
  return result;
}

int CountMappingsOf(const std::string& label) {
  std::ifstream maps("/proc/self/maps");
  std::string line;
  int count = 0;
  while (std::getline(maps, line)) {
    if (line.find(label) != std::string::npos) ++count;
  }
  return count;
}

// One worker with per-layer K and V tensors: all K tensors in one allocation, all V tensors in a
// second one, at non-zero offsets, with strides larger than the pages and different page sizes
// for K and V, so every term of the address formulas matters.
struct Worker {
  static constexpr uint64_t kKPage = 256;
  static constexpr uint64_t kVPage = 192;
  static constexpr uint64_t kKStride = kKPage + 64;
  static constexpr uint64_t kVStride = kVPage + 128;
  static constexpr uint64_t kBase = 4096 + 64;  // first tensor's offset in its allocation

  Worker(uint64_t num_blocks, std::mt19937_64& rng, int num_events = 3, int layers = 3)
      : num_blocks(num_blocks), layers(layers) {
    const uint64_t k_bytes = kBase + layers * num_blocks * kKStride + 100;
    const uint64_t v_bytes = kBase + layers * num_blocks * kVStride + 100;
    k_alloc = ShmObject::Create(k_bytes, rng);
    v_alloc = ShmObject::Create(v_bytes, rng);
    for (int layer = 0; layer < layers; ++layer) {
      registration.tensors.push_back(TensorRegistration{k_alloc->name(), k_bytes,
                                                        kBase + layer * num_blocks * kKStride,
                                                        num_blocks, kKStride, kKPage});
      registration.tensors.push_back(TensorRegistration{v_alloc->name(), v_bytes,
                                                        kBase + layer * num_blocks * kVStride,
                                                        num_blocks, kVStride, kVPage});
    }
    registration.device = 0;
    registration.event_handles.assign(num_events, std::string(64, 'e'));
    registration.caller_pid = getpid();  // this process
    registration.caller_uid = geteuid();
  }

  uint64_t BytesPerBlock() const { return layers * (kKPage + kVPage); }

  // The GPU page of tensor t for block b, and its offset inside the worker's block bytes.
  uint8_t* Page(size_t t, uint64_t b) const {
    const TensorRegistration& reg = registration.tensors[t];
    ShmObject* alloc = t % 2 == 0 ? k_alloc.get() : v_alloc.get();
    return alloc->data() + reg.offset + b * reg.block_stride_bytes;
  }
  static uint64_t PrefixBytes(size_t t) {
    uint64_t sum = 0;
    for (size_t i = 0; i < t; ++i) sum += i % 2 == 0 ? kKPage : kVPage;
    return sum;
  }
  static uint64_t PageBytes(size_t t) { return t % 2 == 0 ? kKPage : kVPage; }

  void Poison() const {
    std::memset(k_alloc->data(), kPoison, k_alloc->bytes());
    std::memset(v_alloc->data(), kPoison, v_alloc->bytes());
  }

  uint64_t num_blocks;
  int layers;
  std::unique_ptr<ShmObject> k_alloc;
  std::unique_ptr<ShmObject> v_alloc;
  WorkerRegistration registration;
};

// A two-copy region (two local workers per row), as the geometry computes it.
struct TestRegion {
  TestRegion(uint64_t num_rows, uint32_t blocks_per_row, uint64_t bytes_per_block,
             std::mt19937_64& rng)
      : num_rows(num_rows), blocks_per_row(blocks_per_row), bytes_per_block(bytes_per_block) {
    slot_bytes = blocks_per_row * bytes_per_block;
    row_bytes = (2 * slot_bytes + 4095) / 4096 * 4096;
    bytes.resize(num_rows * row_bytes);
    FillRandom(bytes.data(), bytes.size(), rng);
  }
  CopyJob Job(CopyDirection direction, WorkerMemory* memory, uint32_t slot,
              std::vector<uint64_t> rows, std::vector<uint64_t> gpu_blocks) {
    CopyJob job;
    job.direction = direction;
    job.memory = memory;
    job.region_base = bytes.data();
    job.row_bytes = row_bytes;
    job.slot_bytes = slot_bytes;
    job.slot = slot;
    job.blocks_per_row = blocks_per_row;
    job.runs = RunsOfLists(gpu_blocks, rows, blocks_per_row);
    return job;
  }
  // Where tensor t of GPU block j of row r lands: the documented formula.
  uint64_t Offset(uint64_t row, uint32_t slot, uint32_t j, size_t t) const {
    return row * row_bytes + slot * slot_bytes + j * bytes_per_block + Worker::PrefixBytes(t);
  }

  uint64_t num_rows;
  uint32_t blocks_per_row;
  uint64_t bytes_per_block;
  uint64_t slot_bytes;
  uint64_t row_bytes;
  std::vector<uint8_t> bytes;
};

class HostCopyBackendTest : public ::testing::Test {
 protected:
  std::mt19937_64 rng_{20261129};
  std::unique_ptr<CopyBackend> backend_ = CreateHostCopyBackend(4);
};

TEST_F(HostCopyBackendTest, IsTheHostBackend) {
  EXPECT_EQ(backend_->name(), "host");
  EXPECT_TRUE(backend_->GpuMemoryBytes().empty());
}

// Store, poison the "GPU", load; byte-exact, at the documented offsets, touching nothing else.
class RoundTripTest : public HostCopyBackendTest,
                      public ::testing::WithParamInterface<std::tuple<uint32_t, uint32_t>> {};

TEST_P(RoundTripTest, StoreThenLoadIsByteExact) {
  const auto [blocks_per_row, slot] = GetParam();
  Worker worker(/*num_blocks=*/16, rng_);
  TestRegion region(/*num_rows=*/8, blocks_per_row, worker.BytesPerBlock(), rng_);
  ASSERT_TRUE(
      backend_->RegisterRegion(region.bytes.data(), region.bytes.size(), region.row_bytes).ok());
  auto memory = backend_->OpenWorker(worker.registration);
  ASSERT_TRUE(memory.ok()) << memory.status();
  EXPECT_EQ((*memory)->num_blocks(), 16u);
  EXPECT_EQ((*memory)->bytes_per_block(), worker.BytesPerBlock());
  EXPECT_EQ((*memory)->num_events(), 3u);

  const std::vector<uint64_t> rows = {5, 1, 6};
  std::vector<uint64_t> all_blocks(16);
  std::iota(all_blocks.begin(), all_blocks.end(), 0);
  std::shuffle(all_blocks.begin(), all_blocks.end(), rng_);
  const std::vector<uint64_t> gpu_blocks(all_blocks.begin(),
                                         all_blocks.begin() + rows.size() * blocks_per_row);

  const std::vector<uint8_t> region_before = region.bytes;
  const std::vector<uint8_t> k_before = worker.k_alloc->Snapshot();
  const std::vector<uint8_t> v_before = worker.v_alloc->Snapshot();

  // Store: expected region = before, with each page copied to its documented offset.
  Result stored =
      RunJob(*backend_, region.Job(CopyDirection::kStore, memory->get(), slot, rows, gpu_blocks));
  ASSERT_TRUE(stored.status.ok()) << stored.status;
  EXPECT_EQ(stored.bytes, gpu_blocks.size() * worker.BytesPerBlock());
  EXPECT_NE(stored.thread, std::this_thread::get_id());
  std::vector<uint8_t> expected = region_before;
  for (size_t i = 0; i < rows.size(); ++i) {
    for (uint32_t j = 0; j < blocks_per_row; ++j) {
      const uint64_t block = gpu_blocks[i * blocks_per_row + j];
      for (size_t t = 0; t < worker.registration.tensors.size(); ++t) {
        std::memcpy(expected.data() + region.Offset(rows[i], slot, j, t), worker.Page(t, block),
                    Worker::PageBytes(t));
      }
    }
  }
  ASSERT_TRUE(expected == region.bytes)
      << "region bytes differ from the documented layout (or a neighbour was touched)";
  EXPECT_EQ(worker.k_alloc->Snapshot(), k_before);  // a store does not write the GPU
  EXPECT_EQ(worker.v_alloc->Snapshot(), v_before);

  // Load into poisoned GPU memory: exactly the loaded pages come back, nothing else is written.
  worker.Poison();
  Result loaded =
      RunJob(*backend_, region.Job(CopyDirection::kLoad, memory->get(), slot, rows, gpu_blocks));
  ASSERT_TRUE(loaded.status.ok()) << loaded.status;
  EXPECT_EQ(loaded.bytes, stored.bytes);
  std::vector<uint8_t> k_expected(k_before.size(), kPoison);
  std::vector<uint8_t> v_expected(v_before.size(), kPoison);
  for (uint64_t block : gpu_blocks) {
    for (size_t t = 0; t < worker.registration.tensors.size(); ++t) {
      const TensorRegistration& reg = worker.registration.tensors[t];
      const uint64_t at = reg.offset + block * reg.block_stride_bytes;
      std::vector<uint8_t>& want = t % 2 == 0 ? k_expected : v_expected;
      const std::vector<uint8_t>& was = t % 2 == 0 ? k_before : v_before;
      std::memcpy(want.data() + at, was.data() + at, reg.page_bytes);
    }
  }
  EXPECT_TRUE(worker.k_alloc->Snapshot() == k_expected);
  EXPECT_TRUE(worker.v_alloc->Snapshot() == v_expected);
  EXPECT_TRUE(region.bytes == expected);  // a load does not write the region

  auto stats = static_cast<HostCopyBackend&>(*backend_).stats();
  EXPECT_EQ(stats.jobs_ok, 2u);
  EXPECT_EQ(stats.bytes_stored, stored.bytes);
  EXPECT_EQ(stats.bytes_loaded, loaded.bytes);
  backend_->UnregisterRegion(region.bytes.data());
}

INSTANTIATE_TEST_SUITE_P(BlocksPerRowAndSlot, RoundTripTest,
                         ::testing::Combine(::testing::Values(1u, 2u), ::testing::Values(0u, 1u)));

// Runs, byte-exact, for the worker layouts whose segments the planner merges differently: one
// block-first tensor (blocks contiguous on the GPU), cross-layer tensors (a block's pages back to
// back), and the per-layer K/V worker above (nothing merges). Jobs mix a long run across rows, a
// range starting and ending mid-row, and scattered single blocks; big enough (≥ 2 MiB) that the
// backend splits them into chunks that cut runs.
class RunsRoundTripTest : public HostCopyBackendTest,
                          public ::testing::WithParamInterface<std::tuple<int, uint32_t>> {};

TEST_P(RunsRoundTripTest, StoreThenLoadRunsIsByteExact) {
  const auto [layout, slots] = GetParam();
  constexpr uint64_t kBlocks = 1024;
  constexpr uint32_t kBlocksPerRow = 4;
  std::unique_ptr<ShmObject> alloc;
  std::unique_ptr<Worker> kv;  // layout 2
  WorkerRegistration registration;
  uint64_t bpb = 0;
  if (layout == 2) {
    kv = std::make_unique<Worker>(kBlocks, rng_);
    registration = kv->registration;
    bpb = kv->BytesPerBlock();
  } else {
    const uint64_t page = layout == 0 ? 4096 : 1024;
    const int tensors = layout == 0 ? 1 : 4;
    bpb = page * tensors;
    alloc = ShmObject::Create(64 + kBlocks * bpb, rng_);
    for (int t = 0; t < tensors; ++t) {
      registration.tensors.push_back(
          TensorRegistration{alloc->name(), 64 + kBlocks * bpb, 64 + t * page, kBlocks, bpb, page});
    }
    registration.device = 0;
    registration.caller_pid = getpid();
    registration.caller_uid = geteuid();
  }
  auto memory = backend_->OpenWorker(registration);
  ASSERT_TRUE(memory.ok()) << memory.status();
  // Region: 300 rows of `slots` slots; the worker uses slot slots - 1.
  const uint64_t slot_bytes = kBlocksPerRow * bpb;
  const uint64_t row_bytes = (slots * slot_bytes + 4095) / 4096 * 4096;
  std::vector<uint8_t> region(300 * row_bytes);
  FillRandom(region.data(), region.size(), rng_);
  ASSERT_TRUE(backend_->RegisterRegion(region.data(), region.size(), row_bytes).ok());
  CopyJob job;
  job.memory = memory->get();
  job.region_base = region.data();
  job.row_bytes = row_bytes;
  job.slot_bytes = slot_bytes;
  job.slot = slots - 1;
  job.blocks_per_row = kBlocksPerRow;
  job.runs = {CopyRun{10, 4 * 7 + 2, 700}, CopyRun{800, 4 * 250 + 1, 6}};
  for (uint64_t i = 0; i < 20; ++i) job.runs.push_back(CopyRun{900 + 5 * i, 4 * 260 + 3 * i, 1});

  // Where GPU block b's page of tensor t is, and where region block r's lands.
  auto gpu_page = [&](size_t t, uint64_t b) -> uint8_t* {
    if (kv != nullptr) return kv->Page(t, b);
    const TensorRegistration& reg = registration.tensors[t];
    return alloc->data() + reg.offset + b * reg.block_stride_bytes;
  };
  auto host_page = [&](size_t t, uint64_t r) -> uint8_t* {
    uint64_t prefix = 0;
    for (size_t i = 0; i < t; ++i) prefix += registration.tensors[i].page_bytes;
    return region.data() + (r / kBlocksPerRow) * row_bytes + job.slot * slot_bytes +
           (r % kBlocksPerRow) * bpb + prefix;
  };
  auto for_each_page = [&](auto&& f) {
    for (const CopyRun& run : job.runs) {
      for (uint64_t k = 0; k < run.num_blocks; ++k) {
        for (size_t t = 0; t < registration.tensors.size(); ++t) {
          f(gpu_page(t, run.gpu_block + k), host_page(t, run.region_block + k),
            registration.tensors[t].page_bytes);
        }
      }
    }
  };
  std::vector<uint8_t> expected = region;
  for_each_page([&](uint8_t* gpu, uint8_t* host, uint64_t n) {
    std::memcpy(expected.data() + (host - region.data()), gpu, n);
  });
  job.direction = CopyDirection::kStore;
  Result stored = RunJob(*backend_, job);
  ASSERT_TRUE(stored.status.ok()) << stored.status;
  EXPECT_EQ(stored.bytes, CountBlocks(job.runs) * bpb);
  ASSERT_TRUE(region == expected) << "layout " << layout << ": region differs";

  // Load into poisoned GPU memory: each page back, byte for byte.
  if (kv != nullptr) {
    kv->Poison();
  } else {
    std::memset(alloc->data(), kPoison, alloc->bytes());
  }
  job.direction = CopyDirection::kLoad;
  Result loaded = RunJob(*backend_, job);
  ASSERT_TRUE(loaded.status.ok()) << loaded.status;
  EXPECT_EQ(loaded.bytes, stored.bytes);
  uint64_t wrong = 0;
  for_each_page([&](uint8_t* gpu, uint8_t* host, uint64_t n) {
    if (std::memcmp(gpu, host, n) != 0) ++wrong;
  });
  EXPECT_EQ(wrong, 0u) << "layout " << layout;
  EXPECT_TRUE(region == expected);  // a load does not write the region
  backend_->UnregisterRegion(region.data());
}

INSTANTIATE_TEST_SUITE_P(LayoutAndSlots, RunsRoundTripTest,
                         ::testing::Combine(::testing::Values(0, 1, 2), ::testing::Values(1u, 2u)));

// Two workers share rows (slots 0 and 1 of a two-copy row); each gets its own bytes back.
TEST_F(HostCopyBackendTest, TwoWorkersShareRowsWithoutInterfering) {
  Worker a(16, rng_);
  Worker b(16, rng_);
  TestRegion region(4, /*blocks_per_row=*/2, a.BytesPerBlock(), rng_);
  ASSERT_TRUE(
      backend_->RegisterRegion(region.bytes.data(), region.bytes.size(), region.row_bytes).ok());
  auto memory_a = backend_->OpenWorker(a.registration);
  auto memory_b = backend_->OpenWorker(b.registration);
  ASSERT_TRUE(memory_a.ok() && memory_b.ok());
  const std::vector<uint64_t> rows = {3, 0};
  const std::vector<uint64_t> blocks = {4, 9, 15, 0};
  const auto a_before = std::make_pair(a.k_alloc->Snapshot(), a.v_alloc->Snapshot());
  const auto b_before = std::make_pair(b.k_alloc->Snapshot(), b.v_alloc->Snapshot());

  ASSERT_TRUE(RunJob(*backend_, region.Job(CopyDirection::kStore, memory_a->get(), 0, rows, blocks))
                  .status.ok());
  ASSERT_TRUE(RunJob(*backend_, region.Job(CopyDirection::kStore, memory_b->get(), 1, rows, blocks))
                  .status.ok());
  a.Poison();
  b.Poison();
  ASSERT_TRUE(RunJob(*backend_, region.Job(CopyDirection::kLoad, memory_a->get(), 0, rows, blocks))
                  .status.ok());
  ASSERT_TRUE(RunJob(*backend_, region.Job(CopyDirection::kLoad, memory_b->get(), 1, rows, blocks))
                  .status.ok());
  for (uint64_t block : blocks) {
    for (size_t t = 0; t < a.registration.tensors.size(); ++t) {
      const TensorRegistration& reg = a.registration.tensors[t];
      const uint64_t at = reg.offset + block * reg.block_stride_bytes;
      const auto& a_was = t % 2 == 0 ? a_before.first : a_before.second;
      const auto& b_was = t % 2 == 0 ? b_before.first : b_before.second;
      EXPECT_EQ(std::memcmp(a.Page(t, block), a_was.data() + at, reg.page_bytes), 0);
      EXPECT_EQ(std::memcmp(b.Page(t, block), b_was.data() + at, reg.page_bytes), 0);
    }
  }
}

TEST_F(HostCopyBackendTest, OpensEachAllocationOnceAndUnmapsOnDestruction) {
  Worker worker(8, rng_);
  const std::string& k = worker.k_alloc->label();
  EXPECT_EQ(CountMappingsOf(k), 1);  // the test's own mapping
  {
    auto memory = backend_->OpenWorker(worker.registration);  // 3 tensors name this handle
    ASSERT_TRUE(memory.ok()) << memory.status();
    EXPECT_EQ(CountMappingsOf(k), 2);
  }
  EXPECT_EQ(CountMappingsOf(k), 1);
}

TEST_F(HostCopyBackendTest, BadRegistrationsAreInvalidArguments) {
  Worker worker(8, rng_);
  auto expect_invalid = [&](WorkerRegistration registration, const char* what) {
    auto memory = backend_->OpenWorker(registration);
    EXPECT_EQ(memory.status().code(), absl::StatusCode::kInvalidArgument)
        << what << ": " << memory.status();
  };
  {
    WorkerRegistration r = worker.registration;
    r.tensors.clear();
    expect_invalid(r, "no tensors");
  }
  {
    WorkerRegistration r = worker.registration;
    r.tensors[3].allocation_handle = "memfd:1000000";
    expect_invalid(r, "no such descriptor");
  }
  {
    WorkerRegistration r = worker.registration;
    r.tensors[3].allocation_handle = "/kvoffload_test_named_shm";
    expect_invalid(r, "a named shm object");
  }
  {
    WorkerRegistration r = worker.registration;
    for (TensorRegistration& t : r.tensors) {
      if (t.allocation_handle == worker.k_alloc->name())
        t.allocation_bytes += 1;  // object is smaller
    }
    expect_invalid(r, "object smaller than allocation_bytes");
  }
  {
    WorkerRegistration r = worker.registration;
    r.tensors[5].num_blocks += 1;  // the last V tensor now runs past the end
    r.tensors[5].offset += 100;
    auto memory = backend_->OpenWorker(r);
    EXPECT_EQ(memory.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(memory.status().message().find("tensor 5"), std::string::npos) << memory.status();
  }
  {
    WorkerRegistration r = worker.registration;
    r.tensors[0].block_stride_bytes = r.tensors[0].page_bytes - 1;
    expect_invalid(r, "stride below page");
  }
  {
    WorkerRegistration r = worker.registration;
    r.tensors[0].block_stride_bytes = 0;
    expect_invalid(r, "stride 0");
  }
  {
    WorkerRegistration r = worker.registration;
    r.tensors[1].page_bytes = 0;
    expect_invalid(r, "page 0");
  }
  {
    WorkerRegistration r = worker.registration;
    r.tensors[2].allocation_bytes -= 1;  // same handle, different sizes
    expect_invalid(r, "inconsistent allocation sizes");
  }
  {
    WorkerRegistration r = worker.registration;
    r.tensors[0].offset = UINT64_MAX - 10;  // overflow
    expect_invalid(r, "offset overflow");
  }
}

// README "Security model": only sealed memfds the registering uid owns are opened.
TEST_F(HostCopyBackendTest, RefusesMemoryThatCouldHurtTheDaemonOrIsNotTheCallers) {
  Worker worker(8, rng_);
  {
    WorkerRegistration r = worker.registration;
    r.caller_uid = geteuid() + 1;  // not the owner of the memfds
    auto memory = backend_->OpenWorker(r);
    EXPECT_EQ(memory.status().code(), absl::StatusCode::kPermissionDenied) << memory.status();
  }
  {
    WorkerRegistration r = worker.registration;
    r.caller_pid = 0;  // no calling process: there is no "the daemon itself" shortcut
    auto memory = backend_->OpenWorker(r);
    EXPECT_EQ(memory.status().code(), absl::StatusCode::kInvalidArgument) << memory.status();
    EXPECT_NE(memory.status().message().find("names no calling process"), std::string::npos)
        << memory.status();
  }
  {
    auto unsealed = ShmObject::Create(worker.k_alloc->bytes(), rng_, /*seals=*/0);
    ASSERT_NE(unsealed, nullptr);
    WorkerRegistration r = worker.registration;
    for (TensorRegistration& t : r.tensors) {
      if (t.allocation_handle == worker.k_alloc->name()) t.allocation_handle = unsealed->name();
    }
    auto memory = backend_->OpenWorker(r);
    EXPECT_EQ(memory.status().code(), absl::StatusCode::kFailedPrecondition) << memory.status();
    EXPECT_EQ(CountMappingsOf(unsealed->label()), 1);  // only the test's own
  }
  {
    // A regular file the caller holds open is not a memfd: no seals.
    char path[] = "/tmp/kvo-host-test-XXXXXX";
    const int fd = mkstemp(path);
    ASSERT_GE(fd, 0);
    unlink(path);
    ASSERT_EQ(ftruncate(fd, static_cast<off_t>(worker.k_alloc->bytes())), 0);
    WorkerRegistration r = worker.registration;
    for (TensorRegistration& t : r.tensors) {
      if (t.allocation_handle == worker.k_alloc->name()) {
        t.allocation_handle = absl::StrCat("memfd:", fd);
      }
    }
    auto memory = backend_->OpenWorker(r);
    EXPECT_EQ(memory.status().code(), absl::StatusCode::kFailedPrecondition) << memory.status();
    close(fd);
  }
}

TEST_F(HostCopyBackendTest, TensorsMayHoldDifferentBlockCounts) {
  Worker worker(8, rng_);
  WorkerRegistration r = worker.registration;
  r.tensors[1].num_blocks = 5;
  auto memory = backend_->OpenWorker(r);
  ASSERT_TRUE(memory.ok()) << memory.status();
  EXPECT_EQ((*memory)->num_blocks(), 5u);
}

TEST_F(HostCopyBackendTest, BrokenJobsFailWithInvalidArgumentOnABackendThread) {
  Worker worker(16, rng_);
  TestRegion region(4, 2, worker.BytesPerBlock(), rng_);
  ASSERT_TRUE(
      backend_->RegisterRegion(region.bytes.data(), region.bytes.size(), region.row_bytes).ok());
  auto memory = backend_->OpenWorker(worker.registration);
  ASSERT_TRUE(memory.ok());
  const std::vector<uint8_t> region_before = region.bytes;
  auto expect_invalid = [&](CopyJob job, const char* what) {
    Result result = RunJob(*backend_, std::move(job));
    EXPECT_EQ(result.status.code(), absl::StatusCode::kInvalidArgument)
        << what << ": " << result.status;
    EXPECT_EQ(result.bytes, 0u) << what;
    EXPECT_NE(result.thread, std::this_thread::get_id()) << what;
  };
  auto job = [&] {
    return region.Job(CopyDirection::kStore, memory->get(), 1, {1, 2}, {0, 1, 2, 3});
  };
  {
    CopyJob j = job();
    j.runs.back().num_blocks = 0;
    expect_invalid(std::move(j), "an empty run");
  }
  {
    CopyJob j = job();
    j.runs = {CopyRun{14, 2, 4}};
    expect_invalid(std::move(j), "block id past num_blocks");
  }
  {
    CopyJob j = job();
    j.slot_bytes -= 1;
    expect_invalid(std::move(j), "blocks do not fit the slot");
  }
  {
    CopyJob j = job();
    j.slot = 3;  // 3 × 2688 + 2688 > 8192 (slot 2 would still fit the row's padding)
    expect_invalid(std::move(j), "slot past the row");
  }
  {
    CopyJob j = job();
    j.runs = {CopyRun{0, 6, 4}};  // rows 3 and 4 of 4
    expect_invalid(std::move(j), "row past the registered region");
  }
  {
    CopyJob j = job();
    std::vector<uint8_t> unregistered(region.bytes.size());
    j.region_base = unregistered.data();
    expect_invalid(std::move(j), "unregistered region");
  }
  {
    CopyJob j = job();
    j.event_index = 3;
    expect_invalid(std::move(j), "event index out of range");
  }
  {
    CopyJob j = job();
    j.memory = nullptr;
    expect_invalid(std::move(j), "no memory");
  }
  {
    struct ForeignMemory : WorkerMemory {
      uint64_t num_blocks() const override { return 16; }
      uint64_t bytes_per_block() const override { return 3 * (Worker::kKPage + Worker::kVPage); }
      size_t num_events() const override { return 0; }
    } foreign;
    CopyJob j = job();
    j.memory = &foreign;
    expect_invalid(std::move(j), "memory of another backend");
  }
  EXPECT_TRUE(region.bytes == region_before);
  EXPECT_EQ(static_cast<HostCopyBackend&>(*backend_).stats().jobs_failed, 9u);
}

TEST_F(HostCopyBackendTest, EmptyJobSucceedsWithZeroBytes) {
  Worker worker(4, rng_);
  TestRegion region(2, 1, worker.BytesPerBlock(), rng_);
  ASSERT_TRUE(
      backend_->RegisterRegion(region.bytes.data(), region.bytes.size(), region.row_bytes).ok());
  auto memory = backend_->OpenWorker(worker.registration);
  ASSERT_TRUE(memory.ok());
  Result result = RunJob(*backend_, region.Job(CopyDirection::kLoad, memory->get(), 0, {}, {}));
  EXPECT_TRUE(result.status.ok()) << result.status;
  EXPECT_EQ(result.bytes, 0u);
}

TEST_F(HostCopyBackendTest, RegionRegistrationRejectsOverlapsAndBadRanges) {
  std::vector<uint8_t> memory(1 << 16);
  EXPECT_TRUE(backend_->RegisterRegion(memory.data() + 4096, 8192, 4096).ok());
  EXPECT_EQ(backend_->RegisterRegion(memory.data(), 4097, 4096).code(),
            absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(backend_->RegisterRegion(memory.data() + 8192, 4096, 4096).code(),
            absl::StatusCode::kAlreadyExists);
  EXPECT_TRUE(backend_->RegisterRegion(memory.data(), 4096, 4096).ok());  // adjacent is fine
  EXPECT_TRUE(backend_->RegisterRegion(memory.data() + 12288, 4096, 4096).ok());
  EXPECT_EQ(backend_->RegisterRegion(nullptr, 4096, 4096).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(backend_->RegisterRegion(memory.data() + 20000, 0, 4096).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(backend_->RegisterRegion(memory.data() + 20000, 4096, 0).code(),
            absl::StatusCode::kInvalidArgument);
  backend_->UnregisterRegion(memory.data() + 4096);
  EXPECT_TRUE(backend_->RegisterRegion(memory.data() + 4096, 4096, 4096).ok());
}

// vLLM 49276: one job of ~52K descriptors hung a peer. 100k blocks in one job, store and load,
// every page checked.
TEST_F(HostCopyBackendTest, JobOfHundredThousandBlocksCompletes) {
  constexpr uint64_t kBlocks = 100000;
  constexpr uint32_t kBlocksPerRow = 100;
  Worker worker(/*num_blocks=*/kBlocks, rng_, /*num_events=*/0, /*layers=*/1);
  TestRegion region(kBlocks / kBlocksPerRow, kBlocksPerRow, worker.BytesPerBlock(), rng_);
  ASSERT_TRUE(
      backend_->RegisterRegion(region.bytes.data(), region.bytes.size(), region.row_bytes).ok());
  auto memory = backend_->OpenWorker(worker.registration);
  ASSERT_TRUE(memory.ok());
  std::vector<uint64_t> rows(kBlocks / kBlocksPerRow);
  std::iota(rows.begin(), rows.end(), 0);
  std::shuffle(rows.begin(), rows.end(), rng_);
  std::vector<uint64_t> blocks(kBlocks);  // each GPU block once: a load writes each page once
  std::iota(blocks.begin(), blocks.end(), 0);
  std::shuffle(blocks.begin(), blocks.end(), rng_);

  Result stored =
      RunJob(*backend_, region.Job(CopyDirection::kStore, memory->get(), 1, rows, blocks));
  ASSERT_TRUE(stored.status.ok()) << stored.status;
  EXPECT_EQ(stored.bytes, kBlocks * worker.BytesPerBlock());
  for (uint64_t i = 0; i < kBlocks; ++i) {
    const uint64_t row = rows[i / kBlocksPerRow];
    const uint32_t j = i % kBlocksPerRow;
    for (size_t t = 0; t < worker.registration.tensors.size(); ++t) {
      ASSERT_EQ(std::memcmp(region.bytes.data() + region.Offset(row, 1, j, t),
                            worker.Page(t, blocks[i]), Worker::PageBytes(t)),
                0)
          << "descriptor " << i << " tensor " << t;
    }
  }
  const auto k_before = worker.k_alloc->Snapshot();
  const auto v_before = worker.v_alloc->Snapshot();
  worker.Poison();
  Result loaded =
      RunJob(*backend_, region.Job(CopyDirection::kLoad, memory->get(), 1, rows, blocks));
  ASSERT_TRUE(loaded.status.ok()) << loaded.status;
  EXPECT_EQ(loaded.bytes, stored.bytes);
  for (size_t t = 0; t < worker.registration.tensors.size(); ++t) {
    const auto& was = t % 2 == 0 ? k_before : v_before;
    const TensorRegistration& reg = worker.registration.tensors[t];
    for (uint64_t b = 0; b < kBlocks; ++b) {
      ASSERT_EQ(std::memcmp(worker.Page(t, b), was.data() + reg.offset + b * reg.block_stride_bytes,
                            reg.page_bytes),
                0)
          << "tensor " << t << " block " << b;
    }
  }
}

TEST_F(HostCopyBackendTest, ManyConcurrentJobsFromManyThreads) {
  constexpr int kSubmitters = 8;
  constexpr int kJobsEach = 32;
  constexpr uint64_t kRows = kSubmitters * kJobsEach;
  Worker worker(/*num_blocks=*/kRows, rng_);
  TestRegion region(kRows, 1, worker.BytesPerBlock(), rng_);
  ASSERT_TRUE(
      backend_->RegisterRegion(region.bytes.data(), region.bytes.size(), region.row_bytes).ok());
  auto memory = backend_->OpenWorker(worker.registration);
  ASSERT_TRUE(memory.ok());
  std::vector<uint64_t> block_of_row(kRows);
  std::iota(block_of_row.begin(), block_of_row.end(), 0);
  std::shuffle(block_of_row.begin(), block_of_row.end(), rng_);

  auto run_all = [&](CopyDirection direction) {
    absl::BlockingCounter remaining(kSubmitters * kJobsEach);
    absl::Mutex mu;
    std::vector<absl::Status> failures;
    std::atomic<uint64_t> bytes{0};
    std::vector<std::thread> submitters;
    for (int s = 0; s < kSubmitters; ++s) {
      submitters.emplace_back([&, s] {
        for (int k = 0; k < kJobsEach; ++k) {
          const uint64_t row = s * kJobsEach + k;
          backend_->Submit(region.Job(direction, memory->get(), 0, {row}, {block_of_row[row]}),
                           [&](absl::Status status, uint64_t n) {
                             if (!status.ok()) {
                               absl::MutexLock lock(&mu);
                               failures.push_back(status);
                             }
                             bytes += n;
                             remaining.DecrementCount();
                           });
        }
      });
    }
    for (std::thread& t : submitters) t.join();
    remaining.Wait();
    EXPECT_TRUE(failures.empty()) << failures.front();
    EXPECT_EQ(bytes.load(), kRows * worker.BytesPerBlock());
  };

  run_all(CopyDirection::kStore);
  for (uint64_t row = 0; row < kRows; ++row) {
    for (size_t t = 0; t < worker.registration.tensors.size(); ++t) {
      ASSERT_EQ(std::memcmp(region.bytes.data() + region.Offset(row, 0, 0, t),
                            worker.Page(t, block_of_row[row]), Worker::PageBytes(t)),
                0);
    }
  }
  const auto k_before = worker.k_alloc->Snapshot();
  const auto v_before = worker.v_alloc->Snapshot();
  worker.Poison();
  run_all(CopyDirection::kLoad);
  for (size_t t = 0; t < worker.registration.tensors.size(); ++t) {
    const auto& was = t % 2 == 0 ? k_before : v_before;
    const TensorRegistration& reg = worker.registration.tensors[t];
    for (uint64_t b = 0; b < kRows; ++b) {
      ASSERT_EQ(std::memcmp(worker.Page(t, b), was.data() + reg.offset + b * reg.block_stride_bytes,
                            reg.page_bytes),
                0);
    }
  }
}

// Large jobs are split across threads; every chunk is copied exactly once.
TEST_F(HostCopyBackendTest, LargeJobIsSplitIntoChunks) {
  // 1024 blocks × 1344 bytes ≈ 1.3 MiB per job: above kMinChunkBytes, so 2 chunks on 4 threads.
  Worker worker(1024, rng_);
  TestRegion region(1024, 1, worker.BytesPerBlock(), rng_);
  ASSERT_TRUE(
      backend_->RegisterRegion(region.bytes.data(), region.bytes.size(), region.row_bytes).ok());
  auto memory = backend_->OpenWorker(worker.registration);
  ASSERT_TRUE(memory.ok());
  std::vector<uint64_t> rows(1024);
  std::iota(rows.begin(), rows.end(), 0);
  std::vector<uint64_t> blocks = rows;
  std::shuffle(blocks.begin(), blocks.end(), rng_);
  Result stored =
      RunJob(*backend_, region.Job(CopyDirection::kStore, memory->get(), 1, rows, blocks));
  ASSERT_TRUE(stored.status.ok());
  for (uint64_t i = 0; i < rows.size(); ++i) {
    for (size_t t = 0; t < worker.registration.tensors.size(); ++t) {
      ASSERT_EQ(std::memcmp(region.bytes.data() + region.Offset(rows[i], 1, 0, t),
                            worker.Page(t, blocks[i]), Worker::PageBytes(t)),
                0);
    }
  }
}

// Destruction fails what has not run with ABORTED and still calls every `done` exactly once.
TEST(HostCopyBackendShutdownTest, DestructorFinishesOrAbortsEveryJob) {
  constexpr int kJobs = 64;
  constexpr uint64_t kRowsPerJob = 256;
  std::mt19937_64 rng(7);
  Worker worker(/*num_blocks=*/kRowsPerJob, rng);
  TestRegion region(kJobs * kRowsPerJob, 1, worker.BytesPerBlock(), rng);
  std::atomic<int> calls{0};
  std::atomic<int> ok{0};
  std::atomic<int> aborted{0};
  std::atomic<int> other{0};
  {
    auto backend = CreateHostCopyBackend(2);
    ASSERT_TRUE(
        backend->RegisterRegion(region.bytes.data(), region.bytes.size(), region.row_bytes).ok());
    auto memory = backend->OpenWorker(worker.registration);
    ASSERT_TRUE(memory.ok());
    std::vector<uint64_t> blocks(kRowsPerJob);
    std::iota(blocks.begin(), blocks.end(), 0);
    for (int i = 0; i < kJobs; ++i) {
      std::vector<uint64_t> rows(kRowsPerJob);
      std::iota(rows.begin(), rows.end(), i * kRowsPerJob);  // disjoint rows per job
      backend->Submit(region.Job(CopyDirection::kStore, memory->get(), 0, rows, blocks),
                      [&](absl::Status status, uint64_t bytes) {
                        ++calls;
                        if (status.ok()) {
                          ++ok;
                          if (bytes != kRowsPerJob * worker.BytesPerBlock()) ++other;
                        } else if (status.code() == absl::StatusCode::kAborted && bytes == 0) {
                          ++aborted;
                        } else {
                          ++other;
                        }
                      });
    }
    backend.reset();  // before `memory` (declared later, so destroyed first) is unmapped
  }
  EXPECT_EQ(calls.load(), kJobs);
  EXPECT_EQ(ok.load() + aborted.load(), kJobs);
  EXPECT_EQ(other.load(), 0);
}

}  // namespace
}  // namespace kvoffload::daemon
