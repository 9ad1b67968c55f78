#include "daemon/copy/cuda/cuda_copy_backend.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <utility>

#include <cuda_runtime_api.h>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "daemon/copy/copy_plan.h"
#include "daemon/copy/cuda/completion.h"
#include "daemon/copy/cuda/copy_kernels.h"
#include "common/cuda/cuda_status.h"
#include "daemon/copy/cuda/device.h"
#include "daemon/copy/cuda/driver_api.h"
#include "daemon/copy/cuda/worker_memory.h"
#include "daemon/copy/descriptor_table.h"

namespace kvoffload::daemon::cuda {
namespace {

spdlog::logger* Log() {
  static spdlog::logger* const log = common::Logger("cuda");
  return log;
}

std::string UuidText(const std::string& raw) { return absl::BytesToHexString(raw); }

// cudaMemcpyBatchAsync in batches of at most `max` copies (vLLM #49276), or page-by-page
// cudaMemcpyAsync where the driver has no batch copies. Not thread-safe; one per enqueue.
class CopyBatcher {
 public:
  CopyBatcher(size_t max, cudaStream_t stream, std::atomic<bool>* unsupported)
      : max_(max), stream_(stream), unsupported_(unsupported) {
    dsts_.reserve(std::min<size_t>(max, 4096));
    srcs_.reserve(std::min<size_t>(max, 4096));
    sizes_.reserve(std::min<size_t>(max, 4096));
    std::memset(&attr_, 0, sizeof(attr_));
    attr_.srcAccessOrder = cudaMemcpySrcAccessOrderStream;
    attr_.flags = cudaMemcpyFlagPreferOverlapWithCompute;
  }

  absl::Status Add(void* dst, const void* src, size_t bytes) {
    dsts_.push_back(dst);
    srcs_.push_back(src);
    sizes_.push_back(bytes);
    return sizes_.size() >= max_ ? Flush() : absl::OkStatus();
  }

  absl::Status Flush() {
    if (sizes_.empty()) return absl::OkStatus();
    absl::Status s;
    bool done = false;
    if (!unsupported_->load(std::memory_order_relaxed)) {
      size_t attr_index = 0;
      const cudaError_t err = cudaMemcpyBatchAsync(dsts_.data(), srcs_.data(), sizes_.data(),
                                                   sizes_.size(), &attr_, &attr_index, 1, stream_);
      if (err == cudaErrorNotSupported) {
        cudaGetLastError();
        unsupported_->store(true);
        Log()->info("cudaMemcpyBatchAsync not supported here; copying page by page");
      } else {
        s = CudaStatus(err, absl::StrCat("cudaMemcpyBatchAsync of ", sizes_.size(), " copies"));
        done = true;
      }
    }
    for (size_t i = 0; !done && i < sizes_.size() && s.ok(); ++i) {
      s = CudaStatus(cudaMemcpyAsync(dsts_[i], srcs_[i], sizes_[i], cudaMemcpyDefault, stream_),
                     "cudaMemcpyAsync");
    }
    dsts_.clear();
    srcs_.clear();
    sizes_.clear();
    return s;
  }

 private:
  const size_t max_;
  cudaStream_t stream_;
  std::atomic<bool>* unsupported_;
  cudaMemcpyAttributes attr_;
  std::vector<void*> dsts_;
  std::vector<const void*> srcs_;
  std::vector<size_t> sizes_;
};

// Fixed choices, measured (docs/TUNING.md): every grid, thread and unroll setting of
// the kernel gave the same link-bound rates.
constexpr int kKernelSms = 16;  // the kernel path's grid (resident for the whole transfer)
// Bound on one cudaMemcpyBatchAsync call (vLLM #49276: one of ~52K descriptors crashed).
constexpr size_t kMaxCopiesPerBatch = 4096;
// How often a device's completion thread looks at its jobs.
constexpr absl::Duration kPollInterval = absl::Microseconds(10);
// RegisterRegion pins in chunks of at most this many bytes, each ending on a row boundary
// (vLLM #51080: one cudaHostRegister over >= 512 GiB fails).
constexpr uint64_t kMaxRegisterChunkBytes = uint64_t{64} << 30;

absl::Status ValidateOptions(const CudaBackendOptions& o) {
  if (o.copy_sms < 1) return absl::InvalidArgumentError("copy_sms must be at least 1");
  if (o.staging_chunk_bytes < 4096 || o.staging_chunk_bytes % 4096 != 0) {
    return absl::InvalidArgumentError("staging_chunk_bytes must be a positive multiple of 4096");
  }
  if (o.staging_idle_release < absl::ZeroDuration()) {
    return absl::InvalidArgumentError("staging_idle_release must not be negative");
  }
  if (o.sm_copies == SmCopies::kNever &&
      (o.forced_path == ForcedPath::kStaged || o.forced_path == ForcedPath::kKernel)) {
    return absl::InvalidArgumentError("a forced staged or kernel path needs SM copies");
  }
  return absl::OkStatus();
}

// A job validated and planned at submission; started (enqueued) once its worker's event fired.
struct PreparedJob {
  CopyDirection direction = CopyDirection::kStore;
  CudaWorkerMemory* memory = nullptr;
  std::shared_ptr<PinnedRegion> region;
  DescriptorTable table;
  CopyPath path = CopyPath::kStaged;
  StagedPlan staged;               // path == kStaged
  cudaEvent_t load_event = nullptr;  // loads: the worker's event, recorded after the copy
};

// Both of a device's objects; the queue goes first (its thread may use the device).
struct DeviceState {
  std::unique_ptr<Device> device;
  std::unique_ptr<CompletionQueue> queue;
};

}  // namespace

// ---------------------------------------------------------------------------------------------
class CudaCopyBackend::Impl {
 public:
  Impl(const CudaBackendOptions& options, std::vector<std::string> uuids)
      : options_(options),
        uuids_(std::move(uuids)),
        orphans_(nullptr, kPollInterval) {
    policy_.staging_chunk_bytes = options.staging_chunk_bytes;
  }

  ~Impl() {
    orphans_.Shutdown();
    {
      absl::MutexLock lock(&devices_mu_);
      for (auto& [ordinal, state] : devices_) state.queue->Shutdown();
    }
    std::vector<uint8_t*> bases;
    {
      absl::MutexLock lock(&regions_mu_);
      for (const auto& [base, region] : regions_) bases.push_back(base);
    }
    if (!bases.empty()) Log()->warn("{} regions still registered at shutdown", bases.size());
    for (uint8_t* base : bases) UnregisterRegion(base);
    absl::MutexLock lock(&devices_mu_);
    for (auto& [ordinal, state] : devices_) state.queue.reset();
    devices_.clear();
  }

  const CudaBackendOptions& options() const { return options_; }

  bool SmPathsEnabled(int ordinal) const {
    absl::MutexLock lock(&devices_mu_);
    auto it = devices_.find(ordinal);
    return it != devices_.end() && it->second.device->sm_paths();
  }

  absl::StatusOr<DeviceState*> GetDevice(int ordinal) {
    absl::MutexLock lock(&devices_mu_);
    auto it = devices_.find(ordinal);
    if (it != devices_.end()) return &it->second;
    ASSIGN_OR_RETURN(std::unique_ptr<Device> device, Device::Create(ordinal));
    const bool forced_sm = options_.forced_path == ForcedPath::kStaged ||
                           options_.forced_path == ForcedPath::kKernel;
    const bool sm_paths = forced_sm || options_.sm_copies == SmCopies::kAlways ||
                          (options_.sm_copies == SmCopies::kIfMps && device->mps());
    if (sm_paths) {
      RETURN_IF_ERROR(device->EnableSmPaths(options_.descriptor_bytes_per_device));
      device->set_staging_limit(options_.staging_bytes_per_device);
    }
    Log()->info("device {}: {}", ordinal,
                sm_paths ? (forced_sm ? "SM copy paths on (a forced path)"
                                      : device->mps() ? "SM copy paths on (MPS)"
                                                      : "SM copy paths on (--sm_copies=always)")
                         : "copy engines only (no MPS: kernels would time-slice the model)");
    DeviceState state;
    state.queue = std::make_unique<CompletionQueue>(device.get(), kPollInterval);
    state.device = std::move(device);
    return &devices_.emplace(ordinal, std::move(state)).first->second;
  }

  std::map<int32_t, uint64_t> GpuMemoryBytes() const {
    std::map<int32_t, uint64_t> out;
    absl::MutexLock lock(&devices_mu_);
    for (const auto& [ordinal, state] : devices_) {
      out[ordinal] = state.device->context_bytes() + state.device->allocated_bytes();
    }
    return out;
  }

  std::map<int32_t, std::string> FailedDevices() const {
    std::map<int32_t, std::string> out;
    absl::MutexLock lock(&devices_mu_);
    for (const auto& [ordinal, state] : devices_) {
      absl::Status health = state.device->health();
      if (!health.ok()) {
        out[ordinal] = std::string(health.message());
      } else if (state.device->releaser().StalledFor() > absl::Seconds(10)) {
        // Not failed for copies, but the driver did not release a worker's mappings: report it
        // rather than hang (the release thread alone waits).
        out[ordinal] = absl::StrCat("releasing a worker's mappings has not returned for ",
                                    absl::FormatDuration(state.device->releaser().StalledFor()),
                                    " (", state.device->releaser().pending(),
                                    " releases pending)");
      }
    }
    return out;
  }

  // ----- regions -----
  // Records the region and pins it in the context of a device already in use; with no context
  // yet, pinning waits for the first worker (PinPendingRegions), so registering a region never
  // creates a context on a GPU that no worker uses.
  absl::Status RegisterRegion(uint8_t* base, uint64_t bytes, uint64_t row_bytes) {
    if (base == nullptr || bytes == 0 || row_bytes == 0) {
      return absl::InvalidArgumentError("RegisterRegion needs a base, a size and a row size");
    }
    if (row_bytes > kMaxRegisterChunkBytes) {
      return absl::InvalidArgumentError(absl::StrCat("row_bytes ", row_bytes,
                                                     " exceeds the registration chunk of ",
                                                     kMaxRegisterChunkBytes, " bytes"));
    }
    const uint64_t chunk_bytes = kMaxRegisterChunkBytes / row_bytes * row_bytes;
    auto region = std::make_shared<PinnedRegion>(base, bytes, row_bytes, chunk_bytes);
    absl::MutexLock pin(&pin_mu_);
    {
      absl::MutexLock lock(&regions_mu_);
      if (regions_.count(base) != 0) {
        return absl::FailedPreconditionError("region already registered with the CUDA backend");
      }
    }
    const int ordinal = DeviceInUse();
    if (ordinal >= 0) RETURN_IF_ERROR(Pin(*region, ordinal));
    if (ordinal >= 0) {
      Log()->info("registered a region of {} bytes in {} chunks (pinned in device {}'s context)",
                  bytes, region->num_chunks(), ordinal);
    } else {
      Log()->info("registered a region of {} bytes in {} chunks (pinned when the first worker "
                  "opens)", bytes, region->num_chunks());
    }
    absl::MutexLock lock(&regions_mu_);
    regions_.emplace(base, std::move(region));
    return absl::OkStatus();
  }

  void UnregisterRegion(uint8_t* base) {
    absl::MutexLock pin(&pin_mu_);
    std::shared_ptr<PinnedRegion> region;
    {
      absl::MutexLock lock(&regions_mu_);
      auto it = regions_.find(base);
      if (it == regions_.end()) return;
      region = std::move(it->second);
      regions_.erase(it);
    }
    const int ordinal = region->pinned_device();
    if (ordinal < 0) return;  // never pinned
    cudaSetDevice(ordinal);
    for (size_t c = 0; c < region->num_chunks(); ++c) {
      absl::Status s = CudaStatus(cudaHostUnregister(base + c * region->chunk_bytes()),
                                  "cudaHostUnregister");
      if (!s.ok()) Log()->warn("unregistering a region: {}", s.ToString());
    }
  }

  // Pins every region still waiting for a context, in `ordinal`'s (a worker of that device is
  // opening). An error (e.g. the locked-memory limit) refuses that worker.
  absl::Status PinPendingRegions(int ordinal) {
    absl::MutexLock pin(&pin_mu_);
    std::vector<std::shared_ptr<PinnedRegion>> pending;
    {
      absl::MutexLock lock(&regions_mu_);
      for (const auto& [base, region] : regions_) {
        if (region->pinned_device() < 0) pending.push_back(region);
      }
    }
    for (const std::shared_ptr<PinnedRegion>& region : pending) {
      RETURN_IF_ERROR(Pin(*region, ordinal));
      Log()->info("pinned a region of {} bytes in device {}'s context", region->bytes(), ordinal);
    }
    return absl::OkStatus();
  }

  std::shared_ptr<PinnedRegion> FindRegion(uint8_t* base) {
    absl::MutexLock lock(&regions_mu_);
    auto it = regions_.find(base);
    return it == regions_.end() ? nullptr : it->second;
  }

  // ----- workers -----
  absl::StatusOr<int> ResolveOrdinal(const WorkerRegistration& r) const {
    if (!r.device_uuid.empty()) {
      if (r.device_uuid.size() != 16) {
        return absl::InvalidArgumentError(
            absl::StrCat("device_uuid must be 16 bytes, not ", r.device_uuid.size()));
      }
      for (size_t d = 0; d < uuids_.size(); ++d) {
        if (uuids_[d] == r.device_uuid) return static_cast<int>(d);
      }
      return absl::InvalidArgumentError(absl::StrCat(
          "no GPU visible to the daemon has uuid ", UuidText(r.device_uuid)));
    }
    if (r.device < 0 || r.device >= static_cast<int>(uuids_.size())) {
      return absl::InvalidArgumentError(absl::StrCat("device ", r.device, " does not exist (",
                                                     uuids_.size(), " GPUs) and no uuid given"));
    }
    return r.device;
  }

  absl::StatusOr<std::unique_ptr<WorkerMemory>> OpenWorker(const WorkerRegistration& r) {
    ASSIGN_OR_RETURN(const int ordinal, ResolveOrdinal(r));
    if (r.tensors.empty()) return absl::InvalidArgumentError("a worker needs at least one tensor");
    for (size_t i = 0; i < r.tensors.size(); ++i) {
      const TensorRegistration& t = r.tensors[i];
      if (t.allocation_handle.size() != sizeof(cudaIpcMemHandle_t)) {
        return absl::InvalidArgumentError(absl::StrCat(
            "tensor ", i, ": allocation_handle has ", t.allocation_handle.size(),
            " bytes, a cudaIpcMemHandle_t has ", sizeof(cudaIpcMemHandle_t)));
      }
      RETURN_IF_ERROR(ValidateTensorGeometry(i, t.offset, t.num_blocks, t.block_stride_bytes,
                                             t.page_bytes, t.allocation_bytes));
    }
    for (size_t i = 0; i < r.event_handles.size(); ++i) {
      if (r.event_handles[i].size() != sizeof(cudaIpcEventHandle_t)) {
        return absl::InvalidArgumentError(absl::StrCat(
            "event ", i, ": handle has ", r.event_handles[i].size(),
            " bytes, a cudaIpcEventHandle_t has ", sizeof(cudaIpcEventHandle_t)));
      }
    }
    ASSIGN_OR_RETURN(DeviceState * state, GetDevice(ordinal));
    Device* device = state->device.get();
    RETURN_IF_ERROR(device->health());
    RETURN_IF_ERROR(PinPendingRegions(ordinal));
    RETURN_IF_ERROR(CudaStatus(cudaSetDevice(ordinal), "cudaSetDevice"));
    auto memory = std::make_unique<CudaWorkerMemory>(this, device);
    // Each distinct allocation is opened once; the destructor closes what was opened so far.
    absl::flat_hash_map<std::string, std::pair<uint64_t, uint64_t>> opened;  // → base, size
    std::vector<TensorDescriptor> tensors;
    uint64_t num_blocks = std::numeric_limits<uint64_t>::max();
    for (size_t i = 0; i < r.tensors.size(); ++i) {
      const TensorRegistration& t = r.tensors[i];
      auto it = opened.find(t.allocation_handle);
      if (it == opened.end()) {
        cudaIpcMemHandle_t handle;
        std::memcpy(&handle, t.allocation_handle.data(), sizeof(handle));
        void* mapped = nullptr;
        const cudaError_t err =
            cudaIpcOpenMemHandle(&mapped, handle, cudaIpcMemLazyEnablePeerAccess);
        if (err != cudaSuccess) {
          return CudaStatus(err, absl::StatusCode::kInvalidArgument,
                            absl::StrCat("cudaIpcOpenMemHandle (tensor ", i, ", device ",
                                         ordinal, ")"));
        }
        memory->ipc_mappings_.push_back(mapped);
        // The real extent of the allocation, never the client's word for it.
        absl::StatusOr<AddressRange> range = GetAddressRange(reinterpret_cast<uint64_t>(mapped));
        if (!range.ok()) {
          return absl::InvalidArgumentError(absl::StrCat(
              "tensor ", i, ": the extent of the opened allocation cannot be read (",
              range.status().message(), "); refusing to trust the declared size"));
        }
        it = opened.emplace(t.allocation_handle,
                            std::make_pair(reinterpret_cast<uint64_t>(mapped), range->bytes))
                 .first;
      }
      RETURN_IF_ERROR(ValidateTensorGeometry(i, t.offset, t.num_blocks, t.block_stride_bytes,
                                             t.page_bytes, it->second.second));
      tensors.push_back({it->second.first + t.offset, t.block_stride_bytes, t.page_bytes, 0});
      num_blocks = std::min(num_blocks, t.num_blocks);
    }
    for (size_t i = 0; i < r.event_handles.size(); ++i) {
      cudaIpcEventHandle_t handle;
      std::memcpy(&handle, r.event_handles[i].data(), sizeof(handle));
      cudaEvent_t event = nullptr;
      const cudaError_t err = cudaIpcOpenEventHandle(&event, handle);
      if (err != cudaSuccess) {
        return CudaStatus(err, absl::StatusCode::kInvalidArgument,
                          absl::StrCat("cudaIpcOpenEventHandle (event ", i, ")"));
      }
      memory->events_.push_back(event);
      memory->owns_events_ = true;
    }
    RETURN_IF_ERROR(memory->Finish(std::move(tensors), num_blocks));
    memory->ReleaseStagingWhenIdle(options_.staging_idle_release);
    Log()->info("opened worker on device {}: {} tensors in {} allocations, {} bytes per block, "
                "{} events",
                ordinal, r.tensors.size(), opened.size(), memory->bytes_per_block_,
                memory->events_.size());
    return std::unique_ptr<WorkerMemory>(std::move(memory));
  }

  absl::StatusOr<std::unique_ptr<WorkerMemory>> TEST_OpenLocalWorker(
      int ordinal, const std::vector<LocalTensor>& local, const std::vector<cudaEvent_t>& events) {
    if (ordinal < 0 || ordinal >= static_cast<int>(uuids_.size())) {
      return absl::InvalidArgumentError(absl::StrCat("device ", ordinal, " does not exist"));
    }
    if (local.empty()) return absl::InvalidArgumentError("a worker needs at least one tensor");
    std::vector<TensorDescriptor> tensors;
    uint64_t num_blocks = std::numeric_limits<uint64_t>::max();
    for (size_t i = 0; i < local.size(); ++i) {
      const LocalTensor& t = local[i];
      RETURN_IF_ERROR(ValidateTensorGeometry(i, 0, t.num_blocks, t.block_stride_bytes,
                                             t.page_bytes,
                                             std::numeric_limits<uint64_t>::max() - t.device_ptr));
      tensors.push_back({t.device_ptr, t.block_stride_bytes, t.page_bytes, 0});
      num_blocks = std::min(num_blocks, t.num_blocks);
    }
    ASSIGN_OR_RETURN(DeviceState * state, GetDevice(ordinal));
    RETURN_IF_ERROR(PinPendingRegions(ordinal));
    RETURN_IF_ERROR(CudaStatus(cudaSetDevice(ordinal), "cudaSetDevice"));
    auto memory = std::make_unique<CudaWorkerMemory>(this, state->device.get());
    memory->events_ = events;
    RETURN_IF_ERROR(memory->Finish(std::move(tensors), num_blocks));
    memory->ReleaseStagingWhenIdle(options_.staging_idle_release);
    return std::unique_ptr<WorkerMemory>(std::move(memory));
  }

  // ----- jobs -----
  void Submit(CopyJob job, CopyDone done) {
    auto p = std::make_unique<PendingJob>();
    p->done = std::move(done);
    p->direction = job.direction;
    p->submitted = absl::Now();
    auto* memory = dynamic_cast<CudaWorkerMemory*>(job.memory);
    if (memory == nullptr || memory->owner_ != this) {
      p->status = absl::InvalidArgumentError("CopyJob.memory was not opened by this backend");
      orphans_.Add(std::move(p));
      return;
    }
    p->memory = memory;
    memory->in_flight_.fetch_add(1);
    Device* device = memory->device_;
    p->device = device;
    absl::StatusOr<DeviceState*> state = GetDevice(device->ordinal());
    if (!state.ok()) {  // cannot happen: the memory's device exists
      p->status = state.status();
      orphans_.Add(std::move(p));
      return;
    }
    CompletionQueue* queue = (*state)->queue.get();
    auto prepared = std::make_shared<PreparedJob>();
    absl::Status s = Prepare(job, memory, prepared.get());
    if (s.ok()) s = device->health();
    if (!s.ok()) {
      p->status = std::move(s);
      queue->Add(std::move(p));
      return;
    }
    p->bytes = prepared->table.total_bytes();
    p->deadline = p->submitted + job.timeout;
    p->worker_event = job.event_index >= 0 ? memory->events_[job.event_index] : nullptr;
    if (job.direction == CopyDirection::kLoad) prepared->load_event = p->worker_event;
    p->start = [this, prepared](PendingJob* j) { Start(*prepared, j); };
    // The common case (no event, or one that already fired) starts here, without a poll's delay.
    if (p->worker_event == nullptr || cudaEventQuery(p->worker_event) == cudaSuccess) {
      p->started = true;
      p->start(p.get());
      p->start = nullptr;
    }
    queue->Add(std::move(p));
  }

  // Validates and plans a job (host work only).
  absl::Status Prepare(const CopyJob& job, CudaWorkerMemory* m, PreparedJob* out) {
    out->direction = job.direction;
    out->memory = m;
    out->region = FindRegion(job.region_base);
    if (out->region == nullptr) {
      return absl::InvalidArgumentError("CopyJob.region_base is not a registered region");
    }
    if (out->region->pinned_device() < 0) {  // a worker's open pins every region
      return absl::FailedPreconditionError("the region is not pinned yet");
    }
    if (job.row_bytes != out->region->row_bytes()) {
      return absl::InvalidArgumentError(absl::StrCat("job row_bytes ", job.row_bytes,
                                                     " differs from the registered ",
                                                     out->region->row_bytes()));
    }
    if (job.event_index < -1 || job.event_index >= static_cast<int64_t>(m->events_.size())) {
      return absl::InvalidArgumentError(absl::StrCat("event_index ", job.event_index,
                                                     " outside the worker's ", m->events_.size(),
                                                     " events"));
    }
    ASSIGN_OR_RETURN(out->table, BuildDescriptorTable(job, m->num_blocks_, m->bytes_per_block_));
    if (out->table.host_extent > out->region->bytes()) {
      return absl::InvalidArgumentError(absl::StrCat("job reaches region byte ",
                                                     out->table.host_extent, " of ",
                                                     out->region->bytes()));
    }
    switch (options_.forced_path) {
      case ForcedPath::kAuto: {
        CopyPathPolicy policy = policy_;
        policy.sm_paths = m->device_->sm_paths();
        out->path = ChooseCopyPath(out->table, m->tensors_, policy);
        break;
      }
      case ForcedPath::kCopyEngine:
        out->path = CopyPath::kCopyEngine;
        break;
      case ForcedPath::kStaged:
        out->path = m->bytes_per_block_ <= options_.staging_chunk_bytes ? CopyPath::kStaged
                                                                        : CopyPath::kKernel;
        break;
      case ForcedPath::kKernel:
        out->path = CopyPath::kKernel;
        break;
    }
    if (out->path == CopyPath::kStaged) {
      ASSIGN_OR_RETURN(out->staged, PlanStagedChunks(out->table, options_.staging_chunk_bytes,
                                                     kStagingBuffers, 0));
    }
    return absl::OkStatus();
  }

  // Enqueues a prepared job's GPU work (its worker's event has fired). Sets j->completion, or
  // leaves it null when nothing of the job is left running; j->status is the job's outcome so far.
  void Start(const PreparedJob& job, PendingJob* j) {
    if (job.table.blocks.empty()) return;
    Device* device = job.memory->device_;
    absl::Status s = CudaStatus(cudaSetDevice(device->ordinal()), "cudaSetDevice");
    if (s.ok()) {
      bool no_room = false;
      switch (job.path) {
        case CopyPath::kCopyEngine:
          s = EnqueueCopyEngine(job, j);
          break;
        case CopyPath::kStaged:
          s = EnqueueStaged(job, j, &no_room);
          break;
        case CopyPath::kKernel:
          s = EnqueueKernel(job, j, &no_room);
          break;
      }
      // The device's staging or descriptor budget is spent by other jobs: DMA needs neither.
      if (no_room) s = EnqueueCopyEngine(job, j);
    }
    if (!s.ok() && j->status.ok()) j->status = std::move(s);
  }

  // Records the job's completion after everything queued on `last` (and on `other`, joined into
  // it, when the job may have left work there unseen). If the event cannot be recorded, both
  // streams are synchronized so the job is never reported while its work runs.
  void Complete(Device* device, cudaStream_t last, cudaStream_t other, bool join_other,
                PendingJob* j, absl::Status* status) {
    if (join_other && other != nullptr) {
      cudaEvent_t joined = nullptr;
      if (cudaEventCreateWithFlags(&joined, cudaEventDisableTiming) == cudaSuccess) {
        if (cudaEventRecord(joined, other) == cudaSuccess) cudaStreamWaitEvent(last, joined, 0);
        cudaEventDestroy(joined);
      }
    }
    absl::StatusOr<cudaEvent_t> completion = device->AcquireEvent();
    absl::Status recorded =
        completion.ok() ? device->Check(cudaEventRecord(*completion, last),
                                        "cudaEventRecord (job completion)")
                        : completion.status();
    if (recorded.ok()) {
      j->completion = *completion;
      return;
    }
    if (completion.ok()) device->ReleaseEvent(*completion);
    absl::Status synced = device->Check(cudaStreamSynchronize(last), "cudaStreamSynchronize");
    if (other != nullptr && synced.ok()) {
      synced = device->Check(cudaStreamSynchronize(other), "cudaStreamSynchronize");
    }
    if (status->ok()) *status = recorded;
    Log()->error("device {}: {} job could not record its completion ({}); waited for its "
                 "streams{}",
                 device->ordinal(), CopyDirectionName(j->direction), recorded.ToString(),
                 synced.ok() ? "" : absl::StrCat(" (", synced.ToString(), ")"));
  }

  // Copy engines only: every merged segment is one DMA (batched). No SM.
  absl::Status EnqueueCopyEngine(const PreparedJob& job, PendingJob* j) {
    CudaWorkerMemory* m = job.memory;
    Device* device = m->device_;
    const bool store = job.direction == CopyDirection::kStore;
    Lane& lane = store ? m->store_ : m->load_;
    absl::MutexLock lock(&lane.mu);
    absl::Status status;
    CopyBatcher batcher(kMaxCopiesPerBatch, lane.dma, &batch_unsupported_);
    uint8_t* base = job.region->base();
    VisitSegments(job.table.blocks.data(), job.table.blocks.data() + job.table.blocks.size(),
                  m->tensors_, [&](const Segment& seg) {
                    if (!status.ok()) return;
                    void* gpu = reinterpret_cast<void*>(seg.gpu_address);
                    status = store ? batcher.Add(base + seg.host_offset, gpu, seg.bytes)
                                   : batcher.Add(gpu, base + seg.host_offset, seg.bytes);
                  });
    if (status.ok()) status = batcher.Flush();
    if (status.ok() && job.load_event != nullptr) {
      status = device->Check(cudaEventRecord(job.load_event, lane.dma),
                             "cudaEventRecord of the worker's event");
    }
    Complete(device, lane.dma, nullptr, false, j, &status);
    return status;
  }

  CopyPagesArgs KernelArgs(bool store, const CudaWorkerMemory& m, const Device::Buffer& buffer,
                           uint64_t pair_begin, uint64_t num_pairs, uint64_t align_bits) const {
    CopyPagesArgs args;
    args.store = store;
    args.tensors = m.kernel_table_;
    args.num_tensors = static_cast<uint32_t>(m.tensors_.size());
    args.units_per_pair = m.units_per_pair_;
    args.pairs = reinterpret_cast<const PagePair*>(buffer.device) + pair_begin;
    args.num_pairs = num_pairs;
    args.unit_bytes = kUnitBytes;
    args.vector_bytes = VectorBytesFor(align_bits);
    return args;
  }

  static CopyKernelConfig KernelConfig(int sms) {
    CopyKernelConfig config;  // 512 threads, unroll 8
    config.max_blocks = sms;
    return config;
  }

  // Staged: per chunk, a short gather (store) or scatter (load) launch on copy_sms SMs between
  // the worker's pages and staging buffer b, and the copy engines between b and the region.
  // Buffers rotate over jobs; `filled`/`drained` events order each buffer's writer and reader.
  // Sets *no_room, with nothing enqueued, when the lane has no staging and the device's staging
  // limit leaves no room for it, or the descriptor pool none for the job's table.
  absl::Status EnqueueStaged(const PreparedJob& job, PendingJob* j, bool* no_room) {
    CudaWorkerMemory* m = job.memory;
    Device* device = m->device_;
    const bool store = job.direction == CopyDirection::kStore;
    Lane& lane = store ? m->store_ : m->load_;
    const uint64_t num_pairs = job.table.blocks.size();
    const uint64_t bpb = job.table.bytes_per_block;
    absl::MutexLock lock(&lane.mu);
    absl::Status staging =
        m->EnsureStaging(lane, options_.staging_chunk_bytes);
    if (absl::IsResourceExhausted(staging)) {
      *no_room = true;
      return absl::OkStatus();
    }
    RETURN_IF_ERROR(staging);
    absl::StatusOr<Device::Buffer> buffer = device->AcquireBuffer(num_pairs * sizeof(PagePair));
    if (absl::IsResourceExhausted(buffer.status())) {
      *no_room = true;
      return absl::OkStatus();
    }
    RETURN_IF_ERROR(buffer.status());
    j->buffer = *buffer;
    const uint32_t n = lane.num_staging;
    const uint64_t first = lane.next_staging;
    lane.next_staging += job.staged.chunks.size();
    // The pair table: each block's page address in its chunk's staging buffer.
    auto* pairs = reinterpret_cast<PagePair*>(j->buffer.host);
    uint64_t align_bits = m->align_bits_ | bpb;
    for (const StagedChunk& c : job.staged.chunks) {
      const uint64_t staging =
          reinterpret_cast<uint64_t>(lane.staging[(c.buffer + first) % n]);
      align_bits |= staging;
      for (size_t i = c.block_begin; i < c.block_end; ++i) {
        pairs[i] = PagePair{job.table.blocks[i].gpu_block, staging + (i - c.block_begin) * bpb};
      }
    }
    absl::Status status = device->Check(
        cudaMemcpyAsync(j->buffer.device, j->buffer.host, num_pairs * sizeof(PagePair),
                        cudaMemcpyHostToDevice, lane.kernel),
        "uploading the descriptor table");
    uint8_t* base = job.region->base();
    const CopyKernelConfig config = KernelConfig(options_.copy_sms);
    for (const StagedChunk& c : job.staged.chunks) {
      if (!status.ok()) break;
      const uint32_t b = (c.buffer + first) % n;
      uint8_t* staging = lane.staging[b];
      auto dma = [&]() -> absl::Status {
        CopyBatcher batcher(kMaxCopiesPerBatch, lane.dma, &batch_unsupported_);
        for (size_t k = c.copy_begin; k < c.copy_end; ++k) {
          const StagedCopy& copy = job.staged.copies[k];
          RETURN_IF_ERROR(store ? batcher.Add(base + copy.host_offset,
                                              staging + copy.staging_offset, copy.bytes)
                                : batcher.Add(staging + copy.staging_offset,
                                              base + copy.host_offset, copy.bytes));
        }
        return batcher.Flush();
      };
      auto kernel = [&]() -> absl::Status {
        CopyPagesArgs args =
            KernelArgs(store, *m, j->buffer, c.block_begin, c.block_end - c.block_begin, align_bits);
        return device->Check(LaunchCopyPages(args, config, lane.kernel),
                             store ? "staged gather launch" : "staged scatter launch");
      };
      // Writer of buffer b waits for its last reader; reader waits for the writer.
      cudaStream_t writer = store ? lane.kernel : lane.dma;
      cudaStream_t reader = store ? lane.dma : lane.kernel;
      status = device->Check(cudaStreamWaitEvent(writer, lane.drained[b], 0),
                             "cudaStreamWaitEvent (staging drained)");
      if (status.ok()) status = store ? kernel() : dma();
      if (status.ok()) {
        status = device->Check(cudaEventRecord(lane.filled[b], writer),
                               "cudaEventRecord (staging filled)");
      }
      if (status.ok()) {
        status = device->Check(cudaStreamWaitEvent(reader, lane.filled[b], 0),
                               "cudaStreamWaitEvent (staging filled)");
      }
      if (status.ok()) status = store ? dma() : kernel();
      if (status.ok()) {
        status = device->Check(cudaEventRecord(lane.drained[b], reader),
                               "cudaEventRecord (staging drained)");
      }
    }
    cudaStream_t last = store ? lane.dma : lane.kernel;
    cudaStream_t other = store ? lane.kernel : lane.dma;
    if (status.ok() && job.load_event != nullptr) {
      status = device->Check(cudaEventRecord(job.load_event, last),
                             "cudaEventRecord of the worker's event");
    }
    Complete(device, last, other, /*join_other=*/!status.ok(), j, &status);
    return status;
  }

  // Kernel path: one launch on kKernelSms SMs reads (store) or writes (load) the mapped region
  // directly. Only for host runs too short for the copy engines. Sets *no_room, with nothing
  // enqueued, when the descriptor pool has no room for the job's table.
  absl::Status EnqueueKernel(const PreparedJob& job, PendingJob* j, bool* no_room) {
    CudaWorkerMemory* m = job.memory;
    Device* device = m->device_;
    const bool store = job.direction == CopyDirection::kStore;
    Lane& lane = store ? m->store_ : m->load_;
    const uint64_t num_pairs = job.table.blocks.size();
    ASSIGN_OR_RETURN(const std::vector<uint64_t>* chunks,
                     job.region->DevicePointers(device->ordinal()));
    absl::StatusOr<Device::Buffer> buffer = device->AcquireBuffer(num_pairs * sizeof(PagePair));
    if (absl::IsResourceExhausted(buffer.status())) {
      *no_room = true;
      return absl::OkStatus();
    }
    RETURN_IF_ERROR(buffer.status());
    j->buffer = *buffer;
    auto* pairs = reinterpret_cast<PagePair*>(j->buffer.host);
    const uint64_t chunk_bytes = job.region->chunk_bytes();
    uint64_t align_bits = m->align_bits_;
    for (uint64_t i = 0; i < num_pairs; ++i) {
      const BlockDescriptor& d = job.table.blocks[i];
      const uint64_t host = (*chunks)[d.host_offset / chunk_bytes] + d.host_offset % chunk_bytes;
      pairs[i] = PagePair{d.gpu_block, host};
      align_bits |= host;
    }
    absl::MutexLock lock(&lane.mu);
    absl::Status status = device->Check(
        cudaMemcpyAsync(j->buffer.device, j->buffer.host, num_pairs * sizeof(PagePair),
                        cudaMemcpyHostToDevice, lane.kernel),
        "uploading the descriptor table");
    if (status.ok()) {
      CopyPagesArgs args = KernelArgs(store, *m, j->buffer, 0, num_pairs, align_bits);
      status = device->Check(LaunchCopyPages(args, KernelConfig(kKernelSms), lane.kernel),
                             store ? "gather kernel launch" : "scatter kernel launch");
    }
    if (status.ok() && job.load_event != nullptr) {
      status = device->Check(cudaEventRecord(job.load_event, lane.kernel),
                             "cudaEventRecord of the worker's event");
    }
    Complete(device, lane.kernel, nullptr, false, j, &status);
    return status;
  }

  // The lowest device with a context, or -1.
  int DeviceInUse() const {
    absl::MutexLock lock(&devices_mu_);
    return devices_.empty() ? -1 : devices_.begin()->first;
  }

  // cudaHostRegister of every chunk in `ordinal`'s context; all or nothing.
  absl::Status Pin(PinnedRegion& region, int ordinal) ABSL_EXCLUSIVE_LOCKS_REQUIRED(pin_mu_) {
    RETURN_IF_ERROR(CudaStatus(cudaSetDevice(ordinal), "cudaSetDevice"));
    uint8_t* const base = region.base();
    for (size_t c = 0; c < region.num_chunks(); ++c) {
      const uint64_t offset = c * region.chunk_bytes();
      const uint64_t length = std::min(region.chunk_bytes(), region.bytes() - offset);
      const cudaError_t err =
          cudaHostRegister(base + offset, length, cudaHostRegisterPortable | cudaHostRegisterMapped);
      if (err != cudaSuccess) {
        for (size_t u = 0; u < c; ++u) cudaHostUnregister(base + u * region.chunk_bytes());
        return CudaStatus(err, absl::StrCat("cudaHostRegister of ", length, " bytes at offset ",
                                            offset, " of a ", region.bytes(), "-byte region",
                                            err == cudaErrorMemoryAllocation
                                                ? " (is the locked-memory limit, LimitMEMLOCK, "
                                                  "high enough?)"
                                                : ""));
      }
    }
    region.set_pinned_device(ordinal);
    return absl::OkStatus();
  }

 private:
  const CudaBackendOptions options_;
  const std::vector<std::string> uuids_;  // raw 16-byte uuid per ordinal
  CopyPathPolicy policy_;
  mutable absl::Mutex devices_mu_;
  std::map<int, DeviceState> devices_ ABSL_GUARDED_BY(devices_mu_);
  // Serialises pinning and unpinning (pinning a large region takes seconds): a region is pinned
  // exactly once and never unpinned while being pinned. Acquired before regions_mu_.
  absl::Mutex pin_mu_ ABSL_ACQUIRED_BEFORE(regions_mu_);
  absl::Mutex regions_mu_;
  std::map<uint8_t*, std::shared_ptr<PinnedRegion>> regions_ ABSL_GUARDED_BY(regions_mu_);
  std::atomic<bool> batch_unsupported_{false};
  CompletionQueue orphans_;  // jobs refused before their device is known
};

// ---------------------------------------------------------------------------------------------
CudaCopyBackend::CudaCopyBackend(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
CudaCopyBackend::~CudaCopyBackend() = default;

absl::StatusOr<std::unique_ptr<CudaCopyBackend>> CudaCopyBackend::Create(
    const CudaBackendOptions& options) {
  RETURN_IF_ERROR(ValidateOptions(options));
  int count = 0;
  const cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) {
    return CudaStatus(err, absl::StatusCode::kUnavailable,
                      "cudaGetDeviceCount (no usable CUDA driver or GPU)");
  }
  if (count <= 0) {
    return absl::UnavailableError("cudaGetDeviceCount: cudaSuccess but no CUDA device");
  }
  std::vector<std::string> uuids;
  for (int d = 0; d < count; ++d) {
    cudaDeviceProp props;
    RETURN_IF_ERROR(CudaStatus(cudaGetDeviceProperties(&props, d),
                               absl::StatusCode::kUnavailable, "cudaGetDeviceProperties"));
    uuids.emplace_back(props.uuid.bytes, sizeof(props.uuid.bytes));
    Log()->info("GPU {}: {} (uuid {}), {} SMs", d, props.name, UuidText(uuids.back()),
                props.multiProcessorCount);
  }
  return std::unique_ptr<CudaCopyBackend>(
      new CudaCopyBackend(std::make_unique<Impl>(options, std::move(uuids))));
}

absl::Status CudaCopyBackend::RegisterRegion(uint8_t* base, uint64_t bytes, uint64_t row_bytes) {
  return impl_->RegisterRegion(base, bytes, row_bytes);
}

void CudaCopyBackend::UnregisterRegion(uint8_t* base) { impl_->UnregisterRegion(base); }

absl::StatusOr<std::unique_ptr<WorkerMemory>> CudaCopyBackend::OpenWorker(
    const WorkerRegistration& registration) {
  return impl_->OpenWorker(registration);
}

absl::StatusOr<std::unique_ptr<WorkerMemory>> CudaCopyBackend::TEST_OpenLocalWorker(
    int device, const std::vector<LocalTensor>& tensors, const std::vector<cudaEvent_t>& events) {
  return impl_->TEST_OpenLocalWorker(device, tensors, events);
}

void CudaCopyBackend::Submit(CopyJob job, CopyDone done) {
  impl_->Submit(std::move(job), std::move(done));
}

std::map<int32_t, uint64_t> CudaCopyBackend::GpuMemoryBytes() const {
  return impl_->GpuMemoryBytes();
}

std::map<int32_t, std::string> CudaCopyBackend::FailedDevices() const {
  return impl_->FailedDevices();
}

const CudaBackendOptions& CudaCopyBackend::options() const { return impl_->options(); }

bool CudaCopyBackend::SmPathsEnabled(int device) const { return impl_->SmPathsEnabled(device); }

absl::StatusOr<std::unique_ptr<CopyBackend>> CreateCudaCopyBackend(
    const CudaBackendOptions& options) {
  ASSIGN_OR_RETURN(std::unique_ptr<CudaCopyBackend> backend, CudaCopyBackend::Create(options));
  return std::unique_ptr<CopyBackend>(std::move(backend));
}

}  // namespace kvoffload::daemon::cuda
