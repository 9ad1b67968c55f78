#include "daemon/copy/host/host_copy_backend.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/check.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "common/thread_name.h"
#include "daemon/copy/copy_plan.h"
#include "daemon/copy/descriptor_table.h"
#include "daemon/copy/host/host_worker_memory.h"

namespace kvoffload::daemon {
namespace {

constexpr int kMaxThreads = 256;

spdlog::logger* Log() {
  static spdlog::logger* const log = common::Logger("copy.host");
  return log;
}

// Moves the bytes of the job's blocks [first, last): every tensor's page, pages that are
// contiguous on both sides in one memcpy (the same segments the CUDA backend's DMA path uses).
void CopyBlocks(CopyDirection direction, const DescriptorTable& table, uint64_t first,
                uint64_t last, const std::vector<TensorDescriptor>& tensors, uint8_t* region_base) {
  VisitSegments(table, first, last, tensors, [&](const Segment& s) {
    uint8_t* host = region_base + s.host_offset;
    uint8_t* gpu = reinterpret_cast<uint8_t*>(static_cast<uintptr_t>(s.gpu_address));
    if (direction == CopyDirection::kStore) {
      std::memcpy(host, gpu, s.bytes);
    } else {
      std::memcpy(gpu, host, s.bytes);
    }
  });
}

}  // namespace

// One submitted job. Built by Submit, shared by the threads that run its chunks; finished by the
// thread that ends its last chunk.
struct HostCopyBackend::Job {
  CopyDirection direction = CopyDirection::kStore;
  uint8_t* region_base = nullptr;
  const std::vector<TensorDescriptor>* tensors = nullptr;  // owned by the WorkerMemory
  DescriptorTable table;
  CopyDone done;
  absl::Status status;        // non-OK: rejected at Submit, nothing is copied
  bool holds_region = false;  // counted in regions_[region_key].jobs_in_flight
  uintptr_t region_key = 0;
  uint64_t blocks_per_chunk = 1;
  size_t num_chunks = 1;
  size_t next_chunk = 0;  // guarded by HostCopyBackend::mu_
  std::atomic<size_t> unfinished_chunks{1};
  std::atomic<bool> aborted{false};
};

HostCopyBackend::HostCopyBackend(int num_threads) {
  if (num_threads <= 0) {
    num_threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  }
  num_threads = std::min(num_threads, kMaxThreads);
  threads_.reserve(num_threads);
  for (int i = 0; i < num_threads; ++i) {
    threads_.emplace_back([this] {
      common::SetThreadName("kvo-hostcopy");
      WorkerLoop();
    });
  }
  Log()->info("host copy backend started with {} threads", num_threads);
}

HostCopyBackend::~HostCopyBackend() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  for (std::thread& t : threads_) t.join();
  Log()->info("host copy backend stopped: {} jobs ok, {} failed", jobs_ok_.load(),
              jobs_failed_.load());
}

absl::Status HostCopyBackend::RegisterRegion(uint8_t* base, uint64_t bytes, uint64_t row_bytes) {
  const uintptr_t begin = reinterpret_cast<uintptr_t>(base);
  uintptr_t end = 0;
  if (base == nullptr || bytes == 0 || row_bytes == 0 || row_bytes > bytes ||
      __builtin_add_overflow(begin, bytes, &end)) {
    return absl::InvalidArgumentError(absl::StrCat("RegisterRegion: bad range (base ", begin, ", ",
                                                   bytes, " bytes, rows of ", row_bytes,
                                                   " bytes)"));
  }
  absl::MutexLock lock(&mu_);
  auto next = regions_.upper_bound(begin);
  if (next != regions_.end() && next->first < end) {
    return absl::AlreadyExistsError("RegisterRegion: the range overlaps a registered region");
  }
  if (next != regions_.begin()) {
    auto prev = std::prev(next);
    if (prev->first + prev->second.bytes > begin) {
      return absl::AlreadyExistsError("RegisterRegion: the range overlaps a registered region");
    }
  }
  regions_.emplace(begin, RegisteredRegion{bytes, row_bytes, 0});
  Log()->info("registered a region of {} bytes (rows of {} bytes)", bytes, row_bytes);
  return absl::OkStatus();
}

void HostCopyBackend::UnregisterRegion(uint8_t* base) {
  absl::MutexLock lock(&mu_);
  auto it = regions_.find(reinterpret_cast<uintptr_t>(base));
  if (it == regions_.end()) {
    Log()->warn("UnregisterRegion: no region is registered at this base");
    return;
  }
  // The contract (the engine releases its region only after its last copy ended) is ours, not
  // worker input: a copy still running here would write into freed memory.
  KVO_CHECK(it->second.jobs_in_flight == 0, "UnregisterRegion: ", it->second.jobs_in_flight,
            " jobs are still in flight on the region of ", it->second.bytes, " bytes");
  Log()->info("unregistered a region of {} bytes", it->second.bytes);
  regions_.erase(it);
}

absl::StatusOr<std::unique_ptr<WorkerMemory>> HostCopyBackend::OpenWorker(
    const WorkerRegistration& registration) {
  ASSIGN_OR_RETURN(std::unique_ptr<HostWorkerMemory> memory, OpenHostWorker(registration));
  Log()->info(
      "opened worker memory of device {}: {} tensors, {} blocks of {} bytes, {} events (ignored)",
      registration.device, memory->tensors().size(), memory->num_blocks(),
      memory->bytes_per_block(), memory->num_events());
  return std::unique_ptr<WorkerMemory>(std::move(memory));
}

void HostCopyBackend::Submit(CopyJob job, CopyDone done) {
  if (!done) done = [](absl::Status, uint64_t) {};
  if (job.memory == nullptr) {
    return Reject(std::move(done), absl::InvalidArgumentError("copy job: no worker memory"));
  }
  const auto* memory = dynamic_cast<const HostWorkerMemory*>(job.memory);
  if (memory == nullptr) {
    return Reject(std::move(done), absl::InvalidArgumentError(
                                       "copy job: worker memory was not opened by this backend"));
  }
  if (job.event_index < -1 ||
      (job.event_index >= 0 && static_cast<size_t>(job.event_index) >= memory->num_events())) {
    return Reject(std::move(done), absl::InvalidArgumentError(absl::StrCat(
                                       "copy job: event index ", job.event_index,
                                       " is not below the ", memory->num_events(), " events")));
  }
  if (job.region_base == nullptr) {
    return Reject(std::move(done), absl::InvalidArgumentError("copy job: no region"));
  }
  absl::StatusOr<DescriptorTable> table =
      BuildDescriptorTable(job, memory->num_blocks(), memory->bytes_per_block());
  if (!table.ok()) return Reject(std::move(done), table.status());

  auto state = std::make_shared<Job>();
  state->direction = job.direction;
  state->region_base = job.region_base;
  state->tensors = &memory->tensors();
  state->table = std::move(table).value();
  state->done = std::move(done);

  const uint64_t blocks = state->table.num_blocks;
  const uint64_t bytes_per_block = state->table.bytes_per_block;
  const uint64_t threads = threads_.size();
  const uint64_t per_thread = (blocks + threads - 1) / threads;
  const uint64_t min_blocks = (kMinChunkBytes + bytes_per_block - 1) / bytes_per_block;
  const uint64_t max_blocks = std::max<uint64_t>(1, kMaxChunkBytes / bytes_per_block);
  state->blocks_per_chunk =
      std::max<uint64_t>(1, std::min(std::max(per_thread, min_blocks), max_blocks));
  state->num_chunks =
      std::max<uint64_t>(1, (blocks + state->blocks_per_chunk - 1) / state->blocks_per_chunk);
  state->unfinished_chunks.store(state->num_chunks, std::memory_order_relaxed);

  absl::MutexLock lock(&mu_);
  absl::Status in_region =
      ClaimRegion(job.region_base, state->table.host_extent, &state->region_key);
  if (in_region.ok()) {
    state->holds_region = true;
  } else {
    // Rejected after all: nothing is copied, `done` still runs on a backend thread.
    Log()->debug("rejected a copy job: {}", in_region.ToString());
    state->status = std::move(in_region);
    state->num_chunks = 1;
    state->unfinished_chunks.store(1, std::memory_order_relaxed);
  }
  queue_.push_back(std::move(state));
}

absl::Status HostCopyBackend::ClaimRegion(const uint8_t* region_base, uint64_t extent,
                                          uintptr_t* region_key) {
  const uintptr_t base = reinterpret_cast<uintptr_t>(region_base);
  auto it = regions_.upper_bound(base);
  if (it == regions_.begin() || base - std::prev(it)->first >= std::prev(it)->second.bytes) {
    return absl::InvalidArgumentError("copy job: region_base is not in a registered region");
  }
  --it;
  const uint64_t left = it->second.bytes - (base - it->first);
  if (extent > left) {
    return absl::InvalidArgumentError(absl::StrCat("copy job: touches ", extent,
                                                   " bytes from region_base, past the ", left,
                                                   " bytes left in its registered region"));
  }
  ++it->second.jobs_in_flight;
  *region_key = it->first;
  return absl::OkStatus();
}

void HostCopyBackend::Reject(CopyDone done, absl::Status status) {
  Log()->debug("rejected a copy job: {}", status.ToString());
  auto state = std::make_shared<Job>();
  state->done = std::move(done);
  state->status = std::move(status);
  absl::MutexLock lock(&mu_);
  queue_.push_back(std::move(state));
}

void HostCopyBackend::WorkerLoop() {
  while (true) {
    std::shared_ptr<Job> job;
    size_t first = 0;
    size_t last = 0;
    bool abort = false;
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(this, &HostCopyBackend::HasWorkOrStopping));
      if (queue_.empty()) return;  // stopping, and every job has been taken
      job = std::move(queue_.front());
      queue_.pop_front();
      first = job->next_chunk;
      abort = stopping_;
      last = abort ? job->num_chunks : first + 1;  // on shutdown: all chunks left, run none
      job->next_chunk = last;
      if (last < job->num_chunks) queue_.push_back(job);
    }
    if (abort) {
      job->aborted.store(true, std::memory_order_relaxed);
    } else if (job->status.ok()) {
      const uint64_t begin = first * job->blocks_per_chunk;
      const uint64_t end = std::min(job->table.num_blocks, begin + job->blocks_per_chunk);
      CopyBlocks(job->direction, job->table, begin, end, *job->tensors, job->region_base);
    }
    const size_t taken = last - first;
    if (job->unfinished_chunks.fetch_sub(taken, std::memory_order_acq_rel) == taken) Finish(*job);
  }
}

void HostCopyBackend::Finish(Job& job) {
  absl::Status status = std::move(job.status);
  if (status.ok() && job.aborted.load(std::memory_order_relaxed)) {
    status = absl::AbortedError("copy job: the host copy backend shut down before it finished");
  }
  const uint64_t bytes = status.ok() ? job.table.total_bytes() : 0;
  if (status.ok()) {
    jobs_ok_.fetch_add(1, std::memory_order_relaxed);
    (job.direction == CopyDirection::kStore ? bytes_stored_ : bytes_loaded_)
        .fetch_add(bytes, std::memory_order_relaxed);
  } else {
    jobs_failed_.fetch_add(1, std::memory_order_relaxed);
  }
  if (job.holds_region) {
    // Before `done`: the caller may unregister the region from its callback.
    absl::MutexLock lock(&mu_);
    auto it = regions_.find(job.region_key);
    if (it != regions_.end() && it->second.jobs_in_flight > 0) --it->second.jobs_in_flight;
  }
  CopyDone done = std::move(job.done);
  done(std::move(status), bytes);
}

HostCopyBackend::Stats HostCopyBackend::stats() const {
  Stats stats;
  stats.jobs_ok = jobs_ok_.load(std::memory_order_relaxed);
  stats.jobs_failed = jobs_failed_.load(std::memory_order_relaxed);
  stats.bytes_stored = bytes_stored_.load(std::memory_order_relaxed);
  stats.bytes_loaded = bytes_loaded_.load(std::memory_order_relaxed);
  return stats;
}

std::unique_ptr<CopyBackend> CreateHostCopyBackend(int num_threads) {
  return std::make_unique<HostCopyBackend>(num_threads);
}

}  // namespace kvoffload::daemon
