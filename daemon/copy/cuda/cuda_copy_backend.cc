#include "daemon/copy/cuda/cuda_copy_backend.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <limits>
#include <atomic>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/check.h"
#include "common/cuda/cuda_status.h"
#include "common/status_macros.h"
#include "daemon/copy/copy_plan.h"
#include "daemon/copy/cuda/completion.h"
#include "daemon/copy/cuda/copy_batcher.h"
#include "daemon/copy/cuda/copy_kernels.h"
#include "daemon/copy/cuda/device.h"
#include "daemon/copy/cuda/driver_api.h"
#include "daemon/copy/cuda/enqueue.h"
#include "daemon/copy/cuda/issue_pool.h"
#include "daemon/copy/cuda/job_times.h"
#include "daemon/copy/cuda/log.h"
#include "daemon/copy/cuda/region_pins.h"
#include "daemon/copy/cuda/worker_memory.h"
#include "daemon/copy/cuda/worker_open.h"
#include "daemon/copy/descriptor_table.h"

namespace kvoffload::daemon::cuda {
namespace {

// How often a device's completion thread looks at its jobs.
constexpr absl::Duration kPollInterval = absl::Microseconds(10);


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
        issue_pool_(options.issue_threads - 1),
        orphans_(nullptr, kPollInterval) {
    policy_.staging_chunk_bytes = options.staging_chunk_bytes;
    enqueue_.copy_sms = options.copy_sms;
    enqueue_.staging_chunk_bytes = options.staging_chunk_bytes;
    enqueue_.batch_unsupported = &batch_unsupported_;
    enqueue_.first_batch_copies = options.first_batch_copies;
    enqueue_.max_batch_copies = options.max_batch_copies;
    enqueue_.batch_overlap_hint = options.batch_overlap_hint;
    enqueue_.strided_min_rows = options.strided_min_rows;
    enqueue_.issue_pool = &issue_pool_;
    enqueue_.parallel_issue_min_copies = options.parallel_issue_min_copies;
  }

  ~Impl() {
    orphans_.Shutdown();
    {
      absl::MutexLock lock(&devices_mu_);
      for (auto& [ordinal, state] : devices_) state.queue->Shutdown();
    }
    const std::vector<uint8_t*> bases = regions_.Bases();
    if (!bases.empty()) Log()->warn("{} regions still registered at shutdown", bases.size());
    for (uint8_t* base : bases) regions_.Unregister(base);
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
    const bool forced_sm =
        options_.forced_path == ForcedPath::kStaged || options_.forced_path == ForcedPath::kKernel;
    const bool sm_paths = forced_sm || options_.sm_copies == SmCopies::kAlways ||
                          (options_.sm_copies == SmCopies::kIfMps && device->mps());
    if (sm_paths) {
      RETURN_IF_ERROR(device->EnableSmPaths(options_.descriptor_bytes_per_device));
      device->set_staging_limit(options_.staging_bytes_per_device);
    }
    Log()->info("device {}: {}", ordinal,
                sm_paths ? (forced_sm       ? "SM copy paths on (a forced path)"
                            : device->mps() ? "SM copy paths on (MPS)"
                                            : "SM copy paths on (--sm_copies=always)")
                         : "copy engines only (no MPS: kernels would time-slice the model)");
    DeviceState state;
    state.queue = std::make_unique<CompletionQueue>(device.get(), kPollInterval,
                                                     options_.stream_wake_min_bytes);
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
                                    " (", state.device->releaser().pending(), " releases pending)");
      }
    }
    return out;
  }

  // ----- regions -----
  absl::Status RegisterRegion(uint8_t* base, uint64_t bytes, uint64_t row_bytes) {
    return regions_.Register(base, bytes, row_bytes, [this] { return DeviceInUse(); });
  }
  void UnregisterRegion(uint8_t* base) { regions_.Unregister(base); }
  absl::Status DeclareRegion(uint8_t* base, uint64_t bytes, uint64_t row_bytes,
                             uint64_t chunk_bytes) {
    return regions_.Declare(base, bytes, row_bytes, chunk_bytes);
  }
  absl::Status PinRegionChunk(uint8_t* base, size_t chunk) {
    return regions_.PinChunk(base, chunk, [this] { return DeviceInUse(); });
  }

  // ----- workers -----
  absl::StatusOr<std::unique_ptr<WorkerMemory>> OpenWorker(const WorkerRegistration& r) {
    ASSIGN_OR_RETURN(const int ordinal, ResolveOrdinal(r, uuids_));
    RETURN_IF_ERROR(CheckWorkerHandles(r));
    ASSIGN_OR_RETURN(DeviceState * state, GetDevice(ordinal));
    Device* device = state->device.get();
    RETURN_IF_ERROR(device->health());
    RETURN_IF_ERROR(regions_.PinPending(ordinal));
    RETURN_IF_ERROR(CudaStatus(cudaSetDevice(ordinal), "cudaSetDevice"));
    // The memory closes whatever was opened into it if a later step fails.
    auto memory = std::make_unique<CudaWorkerMemory>(this, device);
    ASSIGN_OR_RETURN(OpenedTensors opened, OpenIpcTensors(r, ordinal, memory.get()));
    RETURN_IF_ERROR(OpenIpcEvents(r, memory.get()));
    RETURN_IF_ERROR(
        memory->Finish(std::move(opened.tensors), opened.num_blocks, options_.issue_threads - 1));
    memory->ReleaseStagingWhenIdle(options_.staging_idle_release);
    Log()->info(
        "opened worker on device {}: {} tensors in {} allocations, {} bytes per block, "
        "{} events",
        ordinal, r.tensors.size(), opened.allocations, memory->bytes_per_block(),
        memory->num_events());
    return std::unique_ptr<WorkerMemory>(std::move(memory));
  }

  absl::StatusOr<std::unique_ptr<WorkerMemory>> OpenLocalWorker(
      int ordinal, const std::vector<LocalTensor>& local, const std::vector<cudaEvent_t>& events) {
    if (ordinal < 0 || ordinal >= static_cast<int>(uuids_.size())) {
      return absl::InvalidArgumentError(absl::StrCat("device ", ordinal, " does not exist"));
    }
    if (local.empty()) return absl::InvalidArgumentError("a worker needs at least one tensor");
    std::vector<TensorDescriptor> tensors;
    uint64_t num_blocks = std::numeric_limits<uint64_t>::max();
    for (size_t i = 0; i < local.size(); ++i) {
      const LocalTensor& t = local[i];
      RETURN_IF_ERROR(ValidateTensorGeometry(i, 0, t.num_blocks, t.block_stride_bytes, t.page_bytes,
                                             std::numeric_limits<uint64_t>::max() - t.device_ptr));
      tensors.push_back({t.device_ptr, t.block_stride_bytes, t.page_bytes, 0});
      num_blocks = std::min(num_blocks, t.num_blocks);
    }
    ASSIGN_OR_RETURN(DeviceState * state, GetDevice(ordinal));
    RETURN_IF_ERROR(regions_.PinPending(ordinal));
    RETURN_IF_ERROR(CudaStatus(cudaSetDevice(ordinal), "cudaSetDevice"));
    auto memory = std::make_unique<CudaWorkerMemory>(this, state->device.get());
    memory->UseLocalEvents(events);
    RETURN_IF_ERROR(memory->Finish(std::move(tensors), num_blocks, options_.issue_threads - 1));
    memory->ReleaseStagingWhenIdle(options_.staging_idle_release);
    return std::unique_ptr<WorkerMemory>(std::move(memory));
  }

  // ----- jobs -----
  void Submit(CopyJob job, CopyDone done) {
    auto p = std::make_unique<PendingJob>();
    p->times.received = JobClockNanos();
    p->done = std::move(done);
    p->direction = job.direction;
    p->submitted = absl::Now();
    auto* memory = dynamic_cast<CudaWorkerMemory*>(job.memory);
    if (memory == nullptr || memory->owner() != this) {
      p->status = absl::InvalidArgumentError("CopyJob.memory was not opened by this backend");
      orphans_.Add(std::move(p));
      return;
    }
    p->memory = memory;
    memory->JobStarted();
    Device* device = memory->device();
    p->device = device;
    // The memory was opened on this device, and devices are only dropped by the destructor.
    absl::StatusOr<DeviceState*> state = GetDevice(device->ordinal());
    KVO_CHECK(state.ok(), "device ", device->ordinal(),
              " of an open worker memory has no state: ", state.status().ToString());
    CompletionQueue* queue = (*state)->queue.get();
    p->queue = queue;
    auto prepared = std::make_shared<PreparedJob>();
    absl::Status s = Prepare(job, memory, prepared.get());
    p->times.planned = JobClockNanos();
    if (s.ok()) s = device->health();
    if (!s.ok()) {
      p->status = std::move(s);
      queue->Add(std::move(p));
      return;
    }
    p->bytes = prepared->table.total_bytes();
    p->deadline = p->submitted + job.timeout;
    p->worker_event = job.event_index >= 0 ? memory->event(job.event_index) : nullptr;
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
    out->region = regions_.Find(job.region_base);
    if (out->region == nullptr) {
      return absl::InvalidArgumentError("CopyJob.region_base is not a registered region");
    }
    if (out->region->pinned_device() < 0) {  // a worker's open pins every whole region
      return absl::FailedPreconditionError("the region is not pinned yet");
    }
    if (job.row_bytes != out->region->row_bytes()) {
      return absl::InvalidArgumentError(absl::StrCat("job row_bytes ", job.row_bytes,
                                                     " differs from the registered ",
                                                     out->region->row_bytes()));
    }
    if (job.event_index < -1 || job.event_index >= static_cast<int64_t>(m->num_events())) {
      return absl::InvalidArgumentError(absl::StrCat(
          "event_index ", job.event_index, " outside the worker's ", m->num_events(), " events"));
    }
    ASSIGN_OR_RETURN(out->table, BuildDescriptorTable(job, m->num_blocks(), m->bytes_per_block()));
    if (out->table.host_extent > out->region->bytes()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "job reaches region byte ", out->table.host_extent, " of ", out->region->bytes()));
    }
    // The index never hands out a row before its chunk is pinned; this keeps the backend's own
    // memory safe should that ever break.
    if (out->table.host_extent > out->region->ready_bytes()) {
      return absl::FailedPreconditionError(
          absl::StrCat("job reaches region byte ", out->table.host_extent, " but only ",
                       out->region->ready_bytes(), " bytes of the region are pinned yet"));
    }
    switch (options_.forced_path) {
      case ForcedPath::kAuto: {
        CopyPathPolicy policy = policy_;
        policy.sm_paths = m->device()->sm_paths();
        out->path = ChooseCopyPath(out->table, m->tensors(), policy);
        break;
      }
      case ForcedPath::kCopyEngine:
        out->path = CopyPath::kCopyEngine;
        break;
      case ForcedPath::kStaged:
        out->path = m->bytes_per_block() <= options_.staging_chunk_bytes ? CopyPath::kStaged
                                                                        : CopyPath::kKernel;
        break;
      case ForcedPath::kKernel:
        out->path = CopyPath::kKernel;
        break;
    }
    // Only the SM kernels take a pair per block; the copy engines walk the table's runs.
    if (out->path != CopyPath::kCopyEngine) out->blocks = ExpandBlocks(out->table);
    // The copy engines' copies, for how many threads issue them (an SM path falls back to them
    // when it finds no room).
    if (options_.issue_threads > 1) {
      out->estimated_copies = EstimateCopies(out->table, m->tensors(), options_.strided_min_rows);
    }
    if (out->path == CopyPath::kStaged) {
      ASSIGN_OR_RETURN(out->staged,
                       PlanStagedChunks(out->blocks, out->table.bytes_per_block,
                                        options_.staging_chunk_bytes, kStagingBuffers, 0));
    }
    return absl::OkStatus();
  }

  // Enqueues a prepared job's GPU work (its worker's event has fired). Sets j->completion, or
  // leaves it null when nothing of the job is left running; j->status is the job's outcome so far.
  void Start(const PreparedJob& job, PendingJob* j) {
    if (job.table.num_blocks == 0) return;
    j->times.enqueue = JobClockNanos();
    Device* device = job.memory->device();
    absl::Status s = CudaStatus(cudaSetDevice(device->ordinal()), "cudaSetDevice");
    if (s.ok()) {
      bool no_room = false;
      switch (job.path) {
        case CopyPath::kCopyEngine:
          s = EnqueueCopyEngine(job, j, enqueue_);
          break;
        case CopyPath::kStaged:
          s = EnqueueStaged(job, j, enqueue_, &no_room);
          break;
        case CopyPath::kKernel:
          s = EnqueueKernel(job, j, enqueue_, &no_room);
          break;
      }
      // The device's staging or descriptor budget is spent by other jobs: DMA needs neither.
      if (no_room) s = EnqueueCopyEngine(job, j, enqueue_);
    }
    j->times.enqueued = JobClockNanos();
    j->started_at = absl::Now();  // the copy's age (NextPoll) counts from its enqueue
    if (!s.ok() && j->status.ok()) j->status = std::move(s);
  }

  // The lowest device with a context, or -1.
  int DeviceInUse() const {
    absl::MutexLock lock(&devices_mu_);
    return devices_.empty() ? -1 : devices_.begin()->first;
  }

 private:
  const CudaBackendOptions options_;
  const std::vector<std::string> uuids_;  // raw 16-byte uuid per ordinal
  CopyPathPolicy policy_;
  mutable absl::Mutex devices_mu_;
  std::map<int, DeviceState> devices_ ABSL_GUARDED_BY(devices_mu_);
  RegionPins regions_;
  std::atomic<bool> batch_unsupported_{false};
  IssuePool issue_pool_;  // helpers of EnqueueCopyEngine, shared by every device
  EnqueueOptions enqueue_;
  CompletionQueue orphans_;  // jobs refused before their device is known
};

// ---------------------------------------------------------------------------------------------
CudaCopyBackend::CudaCopyBackend(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
CudaCopyBackend::~CudaCopyBackend() = default;

absl::StatusOr<std::unique_ptr<CudaCopyBackend>> CudaCopyBackend::Create(
    const CudaBackendOptions& options) {
  RETURN_IF_ERROR(ValidateCudaBackendOptions(options));
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
    RETURN_IF_ERROR(CudaStatus(cudaGetDeviceProperties(&props, d), absl::StatusCode::kUnavailable,
                               "cudaGetDeviceProperties"));
    uuids.emplace_back(props.uuid.bytes, sizeof(props.uuid.bytes));
    Log()->info("GPU {}: {} (uuid {}), {} SMs", d, props.name, absl::BytesToHexString(uuids.back()),
                props.multiProcessorCount);
  }
  return std::unique_ptr<CudaCopyBackend>(
      new CudaCopyBackend(std::make_unique<Impl>(options, std::move(uuids))));
}

absl::Status CudaCopyBackend::RegisterRegion(uint8_t* base, uint64_t bytes, uint64_t row_bytes) {
  return impl_->RegisterRegion(base, bytes, row_bytes);
}

void CudaCopyBackend::UnregisterRegion(uint8_t* base) { impl_->UnregisterRegion(base); }

absl::Status CudaCopyBackend::DeclareRegion(uint8_t* base, uint64_t bytes, uint64_t row_bytes,
                                            uint64_t chunk_bytes) {
  return impl_->DeclareRegion(base, bytes, row_bytes, chunk_bytes);
}

absl::Status CudaCopyBackend::PinRegionChunk(uint8_t* base, size_t chunk) {
  return impl_->PinRegionChunk(base, chunk);
}

absl::StatusOr<std::unique_ptr<WorkerMemory>> CudaCopyBackend::OpenWorker(
    const WorkerRegistration& registration) {
  return impl_->OpenWorker(registration);
}

absl::StatusOr<std::unique_ptr<WorkerMemory>> CudaCopyBackend::OpenLocalWorker(
    int device, const std::vector<LocalTensor>& tensors, const std::vector<cudaEvent_t>& events) {
  return impl_->OpenLocalWorker(device, tensors, events);
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
