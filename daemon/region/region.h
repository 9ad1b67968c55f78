// Region: the host memory of one engine on this node (DESIGN.md §1-§3). It is an anonymous
// memfd of exactly the requested size, mapped MAP_SHARED and fully populated before Create
// returns, so that the resident size is known up front (vLLM 53042/48436: no rounding, no hidden
// copies) and nothing is left behind in /dev/shm if the daemon dies (vLLM 51579).
//
//   RegionOptions options;
//   options.populate_threads = 8;
//   ASSIGN_OR_RETURN(std::unique_ptr<Region> region,
//                    Region::Create("engine-a/dp0", geometry.capacity_bytes, options));
//   RETURN_IF_ERROR(backend->RegisterRegion(region->data(), region->size(), geometry.row_bytes));
//
// Pages: by default regular pages plus madvise(MADV_HUGEPAGE), so transparent huge pages are used
// where the kernel's shmem THP policy allows it. With `options.huge_pages`, MFD_HUGETLB is tried
// first; when that is impossible (no hugetlb pool, too few free huge pages, or a size that is not a
// multiple of the huge page size, which hugetlbfs cannot hold exactly) the region falls back to
// regular pages, logs a note, and reports it through hugetlb() so the daemon can show it in stats.
//
// Population: the range is split into `populate_threads` contiguous chunks (aligned to the huge
// page size); each thread faults its own chunk with MADV_POPULATE_WRITE (Linux ≥ 5.14), or, on
// older kernels, by writing one byte per page. With MADV_POPULATE_WRITE a shortage of memory is
// reported as RESOURCE_EXHAUSTED; with the touch fallback the kernel may instead kill the process
// (OOM) — the node-wide MemoryBudget exists so that does not happen.
//
// Serve while pinning (durable regions): with `options.populate = false`, Create only maps the memfd
// and PopulateRange faults chunks in later, from any threads (RegionPreparer does that in the
// background while the engine already serves its first chunks).
//
// NUMA: `options.numa_node` >= 0 binds the pages preferentially (MPOL_PREFERRED) to that node
// before any is faulted, so a region sits beside its engine's GPUs on a host with several nodes;
// a node that does not exist is a note in the log, not an error (first touch decides then).
//
// Thread-safety: a Region is immutable after Create; data() may be read and written from any
// thread (synchronising access to the bytes is the caller's business).
// Ownership: the Region owns the mapping and the memfd; the destructor unmaps and closes them.
// Move-only; copying is deleted.
#ifndef KVOFFLOAD_DAEMON_REGION_REGION_H_
#define KVOFFLOAD_DAEMON_REGION_REGION_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"

namespace kvoffload::daemon {

struct RegionOptions {
  // Threads that fault the region in. <= 0: std::thread::hardware_concurrency(). Fewer are used
  // when the region is too small to give each thread at least one huge-page-sized chunk.
  int populate_threads = 8;
  // Try MFD_HUGETLB (explicit hugetlbfs pages) first; fall back to regular pages with a note.
  bool huge_pages = false;
  // madvise(MADV_HUGEPAGE) on regular pages (transparent huge pages for shmem, where enabled).
  bool transparent_huge_pages = true;
  // false: Create maps the region without faulting it in; PopulateRange does that later.
  bool populate = true;
  // >= 0: prefer this NUMA node for the region's pages (mbind MPOL_PREFERRED); -1: first touch.
  int numa_node = -1;
  // Serve while pinning (durable regions), read by the engine's resources, not by Region: > 0 — an
  // engine's region is populated and registered in the background (RegionPreparer,
  // populate_threads threads) in chunks of about this many bytes, rounded down to whole rows,
  // and each chunk is served as soon as it is ready; 0 — all of it before the engine opens.
  uint64_t ready_chunk_bytes = 0;
  // Pinning alone (a region adopted after a restart, already populated) pauses this long after
  // each chunk, so the copies of the chunks already usable get the driver between registrations
  // (the driver serialises them, and back-to-back registrations starved those copies).
  uint32_t adopted_pin_pause_us = 1000;
};

class Region {
 public:
  // Creates and populates a region of exactly `bytes` bytes. `name` labels the memfd (visible in
  // /proc/<pid>/fd and /proc/<pid>/maps as "memfd:kvoffload:<name>") and the log lines.
  // INVALID_ARGUMENT when bytes == 0; RESOURCE_EXHAUSTED (with strerror and the size) when the
  // memory cannot be had, including sizes above the node's physical memory, which are refused
  // before anything is allocated. On failure nothing is left allocated.
  static absl::StatusOr<std::unique_ptr<Region>> Create(const std::string& name, uint64_t bytes,
                                                        const RegionOptions& options);

  // Maps an existing region memfd (one a previous daemon created and handed to the service
  // manager's fd store: durable regions) without populating or clearing it: its pages are already there
  // and hold the rows. Takes ownership of `fd` (closed on failure too). FAILED_PRECONDITION when
  // the file does not have exactly `bytes` bytes (fstat), INVALID_ARGUMENT for bytes == 0.
  // hugetlb() reports whether the file lives on hugetlbfs; populate_seconds() is 0.
  static absl::StatusOr<std::unique_ptr<Region>> Adopt(int fd, const std::string& name,
                                                       uint64_t bytes,
                                                       const RegionOptions& options);

  ~Region();
  Region(Region&& other) noexcept;
  Region& operator=(Region&& other) noexcept;
  Region(const Region&) = delete;
  Region& operator=(const Region&) = delete;

  uint8_t* data() const { return data_; }
  uint64_t size() const { return size_; }
  // The memfd (close-on-exec). Owned by the region: do not close it.
  int fd() const { return fd_; }
  const std::string& name() const { return name_; }

  // Whether explicit huge pages (MFD_HUGETLB) back the region; false after a fallback.
  bool hugetlb() const { return hugetlb_; }
  // Faults [offset, offset + bytes) in, writable (MADV_POPULATE_WRITE, or touching each page on
  // kernels before 5.14). OUT_OF_RANGE past the end; RESOURCE_EXHAUSTED when memory runs out.
  // Thread-safe; populating a range twice is harmless (the pages are there).
  absl::Status PopulateRange(uint64_t offset, uint64_t bytes) const;
  // The fault granularity: a base page, or the huge page size on hugetlbfs.
  uint64_t page_bytes() const { return page_bytes_; }
  // Whether the pages were bound to options.numa_node.
  bool numa_bound() const { return numa_bound_; }

  // Wall time spent faulting the region in, and with how many threads.
  double populate_seconds() const { return populate_seconds_; }
  int populate_threads() const { return populate_threads_; }

 private:
  Region(std::string name, uint8_t* data, uint64_t size, int fd, bool hugetlb,
         double populate_seconds, int populate_threads, uint64_t page_bytes, bool numa_bound);
  void Reset();

  std::string name_;
  uint8_t* data_ = nullptr;
  uint64_t size_ = 0;
  int fd_ = -1;
  bool hugetlb_ = false;
  double populate_seconds_ = 0;
  int populate_threads_ = 0;
  uint64_t page_bytes_ = 4096;
  bool numa_bound_ = false;
};

}  // namespace kvoffload::daemon

#endif  // KVOFFLOAD_DAEMON_REGION_REGION_H_
