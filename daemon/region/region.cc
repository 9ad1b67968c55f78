#include "daemon/region/region.h"

#include <errno.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <limits>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/errno_status.h"
#include "common/logging.h"
#include "common/thread_name.h"

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23  // Linux 5.14; older headers lack it
#endif

namespace kvoffload::daemon {
namespace {

spdlog::logger* Log() {
  static spdlog::logger* const log = common::Logger("region");
  return log;
}

// THP size on x86-64 and the usual aarch64 configuration; only used to align population chunks.
constexpr uint64_t kPopulateAlignment = 2ull << 20;
constexpr int kMaxPopulateThreads = 256;
constexpr size_t kMaxMemfdName = 249;  // memfd_create: 249 bytes + "memfd:" prefix

using common::ErrnoStatus;

// Owns an fd and a mapping until released into a Region; cleans up on every failure path.
struct Mapping {
  Mapping() = default;
  Mapping(Mapping&& o) noexcept
      : fd(std::exchange(o.fd, -1)),
        data(std::exchange(o.data, nullptr)),
        bytes(std::exchange(o.bytes, 0)),
        page_bytes(o.page_bytes),
        hugetlb(o.hugetlb) {}
  Mapping& operator=(Mapping&& o) noexcept {
    if (this != &o) {
      Close();
      fd = std::exchange(o.fd, -1);
      data = std::exchange(o.data, nullptr);
      bytes = std::exchange(o.bytes, 0);
      page_bytes = o.page_bytes;
      hugetlb = o.hugetlb;
    }
    return *this;
  }
  Mapping(const Mapping&) = delete;
  Mapping& operator=(const Mapping&) = delete;
  ~Mapping() { Close(); }

  void Close() {
    if (data != nullptr) munmap(data, bytes);
    if (fd >= 0) close(fd);
    data = nullptr;
    fd = -1;
  }

  int fd = -1;
  uint8_t* data = nullptr;
  uint64_t bytes = 0;
  uint64_t page_bytes = 0;  // fault granularity: base page or huge page
  bool hugetlb = false;
};

absl::StatusOr<Mapping> MapRegion(const std::string& memfd_name, const std::string& what,
                                  uint64_t bytes, bool hugetlb, bool transparent_huge_pages) {
  Mapping m;
  m.hugetlb = hugetlb;
  m.fd = memfd_create(memfd_name.c_str(), MFD_CLOEXEC | (hugetlb ? MFD_HUGETLB : 0u));
  if (m.fd < 0) return ErrnoStatus(errno, absl::StrCat(what, ": memfd_create"));

  m.page_bytes = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  if (hugetlb) {
    struct stat st;
    if (fstat(m.fd, &st) != 0) return ErrnoStatus(errno, absl::StrCat(what, ": fstat"));
    m.page_bytes = static_cast<uint64_t>(st.st_blksize);  // hugetlbfs reports its page size here
    if (m.page_bytes == 0 || bytes % m.page_bytes != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, ": size is not a multiple of the huge page size ", m.page_bytes,
                       ", which hugetlbfs cannot hold exactly"));
    }
  }
  if (ftruncate(m.fd, static_cast<off_t>(bytes)) != 0) {
    return ErrnoStatus(errno, absl::StrCat(what, ": ftruncate"));
  }
  // MAP_SHARED: the memfd is the memory (another process or cudaHostRegister sees the same
  // pages). For hugetlb, the kernel reserves the huge pages here, so a short pool fails now.
  void* data = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, m.fd, 0);
  if (data == MAP_FAILED) return ErrnoStatus(errno, absl::StrCat(what, ": mmap"));
  m.data = static_cast<uint8_t*>(data);
  m.bytes = bytes;

  if (!hugetlb && transparent_huge_pages && madvise(m.data, bytes, MADV_HUGEPAGE) != 0) {
    // Not an error: THP may be compiled out; the region still has exactly `bytes` bytes.
    Log()->debug("{}: madvise(MADV_HUGEPAGE) failed: {}", what, strerror(errno));
  }
  return m;
}

// Prefers NUMA node `node` for the pages of the mapping (MPOL_PREFERRED: the kernel falls back to
// other nodes rather than fail a fault). False, with a note, when the kernel refuses.
bool BindToNode(const Mapping& m, int node, const std::string& what) {
  constexpr int kMpolPreferred = 1;  // <linux/mempolicy.h>; no libnuma needed
  constexpr int kMaxNodes = 1024;
  if (node < 0 || node >= kMaxNodes) return false;
  std::vector<unsigned long> mask(kMaxNodes / (8 * sizeof(unsigned long)), 0);
  mask[node / (8 * sizeof(unsigned long))] |= 1ul << (node % (8 * sizeof(unsigned long)));
  if (syscall(SYS_mbind, m.data, m.bytes, kMpolPreferred, mask.data(), kMaxNodes + 1, 0) != 0) {
    Log()->warn("{}: cannot prefer NUMA node {} ({}); pages go where they are first touched",
                what, node, strerror(errno));
    return false;
  }
  return true;
}

// Faults [begin, begin + bytes) in, writable. `populate_write_unsupported` is shared by the threads
// of one Create so that the first EINVAL switches all of them to touching.
absl::Status PopulateChunk(uint8_t* begin, uint64_t bytes, uint64_t page_bytes,
                           std::atomic<bool>* populate_write_unsupported) {
  if (bytes == 0) return absl::OkStatus();
  if (!populate_write_unsupported->load(std::memory_order_relaxed)) {
    if (madvise(begin, bytes, MADV_POPULATE_WRITE) == 0) return absl::OkStatus();
    const int err = errno;
    if (err != EINVAL) {
      return ErrnoStatus(err, absl::StrCat("madvise(MADV_POPULATE_WRITE) of ", bytes, " bytes"));
    }
    populate_write_unsupported->store(true, std::memory_order_relaxed);  // kernel < 5.14
  }
  volatile uint8_t* p = begin;
  for (uint64_t offset = 0; offset < bytes; offset += page_bytes) p[offset] = 0;
  return absl::OkStatus();
}

// Populates the whole mapping with up to `requested_threads` threads, each on its own contiguous
// chunk. Sets *threads_used.
absl::Status Populate(const Mapping& m, int requested_threads, int* threads_used) {
  int threads = requested_threads > 0
                    ? requested_threads
                    : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  threads = std::min(threads, kMaxPopulateThreads);
  const uint64_t alignment = std::max(m.page_bytes, kPopulateAlignment);
  const uint64_t max_chunks = (m.bytes + alignment - 1) / alignment;
  threads = static_cast<int>(std::min<uint64_t>(threads, max_chunks));
  uint64_t chunk = (m.bytes + threads - 1) / threads;
  chunk = (chunk + alignment - 1) / alignment * alignment;
  const int num_chunks = static_cast<int>((m.bytes + chunk - 1) / chunk);
  *threads_used = num_chunks;

  std::atomic<bool> populate_write_unsupported{false};
  std::vector<absl::Status> statuses(num_chunks);
  auto run = [&](int i) {
    const uint64_t begin = static_cast<uint64_t>(i) * chunk;
    const uint64_t end = std::min(m.bytes, begin + chunk);
    statuses[i] =
        PopulateChunk(m.data + begin, end - begin, m.page_bytes, &populate_write_unsupported);
  };
  std::vector<std::thread> workers;
  workers.reserve(num_chunks - 1);
  for (int i = 1; i < num_chunks; ++i) {
    workers.emplace_back([&run, i] {
      common::SetThreadName("kvo-populate");
      run(i);
    });
  }
  run(0);
  for (std::thread& t : workers) t.join();

  if (populate_write_unsupported.load()) {
    Log()->info("MADV_POPULATE_WRITE is not supported by this kernel; touched every page instead");
  }
  for (absl::Status& s : statuses) {
    if (!s.ok()) return s;
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<Region>> Region::Create(const std::string& name, uint64_t bytes,
                                                       const RegionOptions& options) {
  const std::string what = absl::StrCat("region '", name, "' of ", bytes, " bytes");
  if (bytes == 0) {
    return absl::InvalidArgumentError(absl::StrCat("region '", name, "': size must be > 0"));
  }
  if (bytes > static_cast<uint64_t>(std::numeric_limits<off_t>::max()) ||
      bytes > std::numeric_limits<size_t>::max()) {
    return absl::ResourceExhaustedError(
        absl::StrCat(what, ": larger than a file or an address space can hold"));
  }
  // Refuse what the node can never hold before touching anything: populating it would end in the
  // OOM killer, not in a status.
  const long page_size = sysconf(_SC_PAGESIZE);
  const long phys_pages = sysconf(_SC_PHYS_PAGES);
  if (page_size > 0 && phys_pages > 0) {
    const uint64_t physical = static_cast<uint64_t>(page_size) * static_cast<uint64_t>(phys_pages);
    if (bytes > physical) {
      return absl::ResourceExhaustedError(
          absl::StrCat(what, ": exceeds the node's physical memory of ", physical, " bytes"));
    }
  }

  std::string memfd_name = absl::StrCat("kvoffload:", name);
  if (memfd_name.size() > kMaxMemfdName) memfd_name.resize(kMaxMemfdName);

  Mapping mapping;
  bool mapped = false;
  if (options.huge_pages) {
    absl::StatusOr<Mapping> huge = MapRegion(memfd_name, what, bytes, /*hugetlb=*/true, false);
    if (huge.ok()) {
      mapping = std::move(huge).value();
      mapped = true;
    } else {
      Log()->warn("{}: explicit huge pages unavailable ({}); falling back to regular pages", what,
                  std::string(huge.status().message()));
    }
  }
  if (!mapped) {
    absl::StatusOr<Mapping> regular =
        MapRegion(memfd_name, what, bytes, /*hugetlb=*/false, options.transparent_huge_pages);
    if (!regular.ok()) return regular.status();
    mapping = std::move(regular).value();
  }

  const bool numa_bound =
      options.numa_node >= 0 && BindToNode(mapping, options.numa_node, what);
  if (!options.populate) {
    Log()->info("{} mapped ({} pages{}); populated later, chunk by chunk", what,
                mapping.hugetlb ? "hugetlb" : "regular",
                numa_bound ? absl::StrCat(", NUMA node ", options.numa_node) : "");
    const bool hugetlb = mapping.hugetlb;
    const uint64_t page_bytes = mapping.page_bytes;
    uint8_t* data = std::exchange(mapping.data, nullptr);
    const int fd = std::exchange(mapping.fd, -1);
    return std::unique_ptr<Region>(
        new Region(name, data, bytes, fd, hugetlb, 0, 0, page_bytes, numa_bound));
  }
  const absl::Time start = absl::Now();
  int threads_used = 0;
  absl::Status populated = Populate(mapping, options.populate_threads, &threads_used);
  if (!populated.ok()) {
    return absl::Status(populated.code(),
                        absl::StrCat(what, ": populating: ", populated.message()));
  }
  const double seconds = absl::ToDoubleSeconds(absl::Now() - start);
  Log()->info("{} ready: {} pages, populated by {} threads in {:.3f} s ({:.2f} GB/s)", what,
              mapping.hugetlb ? "hugetlb" : "regular", threads_used, seconds,
              seconds > 0 ? static_cast<double>(bytes) / seconds / 1e9 : 0.0);

  const bool hugetlb = mapping.hugetlb;
  const uint64_t page_bytes = mapping.page_bytes;
  uint8_t* data = std::exchange(mapping.data, nullptr);
  const int fd = std::exchange(mapping.fd, -1);
  return std::unique_ptr<Region>(new Region(name, data, bytes, fd, hugetlb, seconds, threads_used,
                                            page_bytes, numa_bound));
}

absl::StatusOr<std::unique_ptr<Region>> Region::Adopt(int fd, const std::string& name,
                                                      uint64_t bytes,
                                                      const RegionOptions& options) {
  Mapping m;  // owns fd from here on, whatever happens
  m.fd = fd;
  const std::string what = absl::StrCat("adopted region '", name, "' of ", bytes, " bytes");
  if (fd < 0) return absl::InvalidArgumentError(absl::StrCat(what, ": no descriptor"));
  if (bytes == 0) return absl::InvalidArgumentError(absl::StrCat(what, ": size must be > 0"));
  struct stat st;
  if (fstat(fd, &st) != 0) return ErrnoStatus(errno, absl::StrCat(what, ": fstat"));
  if (!S_ISREG(st.st_mode) || static_cast<uint64_t>(st.st_size) != bytes) {
    return absl::FailedPreconditionError(absl::StrCat(
        what, ": the descriptor holds ", S_ISREG(st.st_mode) ? "" : "a non-regular file of ",
        st.st_size, " bytes"));
  }
  if (bytes > std::numeric_limits<size_t>::max()) {
    return absl::ResourceExhaustedError(absl::StrCat(what, ": larger than an address space"));
  }
  // hugetlbfs reports its huge page size as the block size; regular shmem a base page.
  m.hugetlb = static_cast<uint64_t>(st.st_blksize) > static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  void* data = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (data == MAP_FAILED) return ErrnoStatus(errno, absl::StrCat(what, ": mmap"));
  m.data = static_cast<uint8_t*>(data);
  m.bytes = bytes;
  if (!m.hugetlb && options.transparent_huge_pages && madvise(m.data, bytes, MADV_HUGEPAGE) != 0) {
    Log()->debug("{}: madvise(MADV_HUGEPAGE) failed: {}", what, strerror(errno));
  }
  Log()->info("{} mapped ({} pages), not populated again", what,
              m.hugetlb ? "hugetlb" : "regular");
  const bool hugetlb = m.hugetlb;
  const uint64_t page_bytes =
      hugetlb ? static_cast<uint64_t>(st.st_blksize) : static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  uint8_t* mapped = std::exchange(m.data, nullptr);
  const int owned_fd = std::exchange(m.fd, -1);
  return std::unique_ptr<Region>(
      new Region(name, mapped, bytes, owned_fd, hugetlb, 0, 0, page_bytes, false));
}

Region::Region(std::string name, uint8_t* data, uint64_t size, int fd, bool hugetlb,
               double populate_seconds, int populate_threads, uint64_t page_bytes,
               bool numa_bound)
    : name_(std::move(name)),
      data_(data),
      size_(size),
      fd_(fd),
      hugetlb_(hugetlb),
      populate_seconds_(populate_seconds),
      populate_threads_(populate_threads),
      page_bytes_(page_bytes),
      numa_bound_(numa_bound) {}

absl::Status Region::PopulateRange(uint64_t offset, uint64_t bytes) const {
  if (offset > size_ || bytes > size_ - offset) {
    return absl::OutOfRangeError(absl::StrCat("region '", name_, "': populating ", bytes,
                                              " bytes at ", offset, " of ", size_));
  }
  // Whole pages only: madvise needs an aligned start; the range is widened to its pages.
  const uint64_t begin = offset / page_bytes_ * page_bytes_;
  const uint64_t end =
      std::min(size_, (offset + bytes + page_bytes_ - 1) / page_bytes_ * page_bytes_);
  std::atomic<bool> populate_write_unsupported{false};
  absl::Status s =
      PopulateChunk(data_ + begin, end - begin, page_bytes_, &populate_write_unsupported);
  if (!s.ok()) {
    return absl::Status(s.code(), absl::StrCat("region '", name_, "': populating: ", s.message()));
  }
  return absl::OkStatus();
}

Region::~Region() { Reset(); }

Region::Region(Region&& other) noexcept
    : name_(std::move(other.name_)),
      data_(std::exchange(other.data_, nullptr)),
      size_(std::exchange(other.size_, 0)),
      fd_(std::exchange(other.fd_, -1)),
      hugetlb_(other.hugetlb_),
      populate_seconds_(other.populate_seconds_),
      populate_threads_(other.populate_threads_),
      page_bytes_(other.page_bytes_),
      numa_bound_(other.numa_bound_) {}

Region& Region::operator=(Region&& other) noexcept {
  if (this != &other) {
    Reset();
    name_ = std::move(other.name_);
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
    fd_ = std::exchange(other.fd_, -1);
    hugetlb_ = other.hugetlb_;
    populate_seconds_ = other.populate_seconds_;
    populate_threads_ = other.populate_threads_;
    page_bytes_ = other.page_bytes_;
    numa_bound_ = other.numa_bound_;
  }
  return *this;
}

void Region::Reset() {
  if (data_ != nullptr) munmap(data_, size_);
  if (fd_ >= 0) close(fd_);
  data_ = nullptr;
  size_ = 0;
  fd_ = -1;
}

}  // namespace kvoffload::daemon
