// The C ABI over the C++ client library (client/kvoffload_c.h). Every entry point converts its
// arguments, calls the client, and turns the absl::Status into (code, message) once, here; no
// C++ exception crosses the boundary.
#include "client/kvoffload_c.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "client/c_abi/abi_util.h"
#include "client/c_abi/spec_from_c.h"
#include "client/cuda/cuda_client.h"
#include "common/error_info.h"
#include "common/limits.h"
#include "client/daemon_socket.h"
#include "client/kvoffload_client.h"

#ifndef KVOFFLOAD_VERSION
#define KVOFFLOAD_VERSION "0.1.0"
#endif
#define KVO_STRINGIFY_(x) #x
#define KVO_STRINGIFY(x) KVO_STRINGIFY_(x)

namespace kvo = kvoffload::client;
using kvoffload::client::c_abi::ArrayArg;
using kvoffload::client::c_abi::FinishedToC;
using kvoffload::client::c_abi::Guarded;
using kvoffload::client::c_abi::OptionsFromC;
using kvoffload::client::c_abi::ReadInto;
using kvoffload::client::c_abi::Required;

// The C header repeats what every layer shares; a second definition that diverges fails here.
static_assert(KVO_MAX_KEY_BYTES == kvoffload::common::kMaxKeyBytes, "KVO_MAX_KEY_BYTES");

// The opaque worker handle (kvo_scheduler: c_abi/scheduler_c.cc). The EventPool belongs to the
// worker handle and outlives its sessions (a session registered again names the same events).
struct kvo_worker {
  // Declared first so that it is destroyed last: the session ends before its events go.
  std::unique_ptr<kvo::cuda::EventPool> events;  // null for host workers or num_events == 0
  std::unique_ptr<kvo::WorkerClient> client;
  int32_t device = -1;
  bool cuda = false;
};

namespace {

absl::Status ConnectWorker(kvo::WorkerOptions options, std::unique_ptr<kvo_worker> worker,
                           kvo_worker** worker_out) {
  absl::StatusOr<std::unique_ptr<kvo::WorkerClient>> client = kvo::WorkerClient::Connect(options);
  if (!client.ok()) return client.status();
  worker->client = std::move(*client);
  *worker_out = worker.release();
  return absl::OkStatus();
}

absl::Status CheckWorker(const kvo_worker* worker) {
  if (worker == nullptr || worker->client == nullptr) {
    return absl::InvalidArgumentError("worker handle is NULL");
  }
  return absl::OkStatus();
}

absl::Status CudaAvailable(const char* what) {
  int count = 0;
  const cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) {
    return absl::UnavailableError(absl::StrCat(
        what, ": no usable CUDA device in this process (cudaGetDeviceCount: ",
        cudaGetErrorName(err), ", ", cudaGetErrorString(err),
        "); use kvo_worker_connect_host with a daemon on --backend=host for GPU-less workers"));
  }
  if (count == 0) {
    return absl::UnavailableError(absl::StrCat(what, ": no CUDA device in this process"));
  }
  return absl::OkStatus();
}

// The parts of WorkerOptions every connect shares, checked before anything else is done (a
// missing daemon is reported before any CUDA work).
absl::StatusOr<kvo::WorkerOptions> WorkerOptionsFor(const char* socket_path,
                                                    const kvo_engine_spec* c_spec,
                                                    uint32_t mp_rank,
                                                    const kvo_client_options* c_options) {
  if (absl::Status s = Required(socket_path, "socket_path"); !s.ok()) return s;
  absl::StatusOr<kvo::EngineSpec> spec = kvo::SpecFromC(c_spec);
  if (!spec.ok()) return spec.status();
  absl::StatusOr<kvo::ClientOptions> client = OptionsFromC(c_options);
  if (!client.ok()) return client.status();
  if (absl::Status s = kvo::CheckDaemonSocket(socket_path); !s.ok()) return s;
  kvo::WorkerOptions options;
  options.socket_path = socket_path;
  options.spec = *std::move(spec);
  options.mp_rank = mp_rank;
  options.connect_timeout = client->open_timeout;
  options.call_timeout = client->call_timeout;
  options.reconnect = client->reopen;  // one switch in the C struct: kvo_client_options.reconnect
  return options;
}

absl::Status ConnectCuda(const char* socket_path, const kvo_engine_spec* c_spec, uint32_t mp_rank,
                         int32_t device, const kvo_cuda_tensor* tensors, size_t num_tensors,
                         size_t num_events, const kvo_client_options* c_options,
                         kvo_worker** worker_out) {
  if (absl::Status s = Required(worker_out, "worker_out"); !s.ok()) return s;
  if (absl::Status s = ArrayArg(tensors, num_tensors, "tensors"); !s.ok()) return s;
  absl::StatusOr<kvo::WorkerOptions> worker_options =
      WorkerOptionsFor(socket_path, c_spec, mp_rank, c_options);
  if (!worker_options.ok()) return worker_options.status();
  if (absl::Status s = CudaAvailable("kvo_worker_connect_cuda"); !s.ok()) return s;

  kvo::WorkerOptions options = *std::move(worker_options);
  for (size_t i = 0; i < num_tensors; ++i) {
    const kvo_cuda_tensor& t = tensors[i];
    absl::StatusOr<kvo::cuda::AllocationRef> ref = kvo::cuda::ResolveAllocation(t.device_ptr);
    if (!ref.ok()) {
      return absl::Status(ref.status().code(),
                          absl::StrCat("tensor #", i, " (device_ptr 0x", absl::Hex(t.device_ptr),
                                       "): ", ref.status().message()));
    }
    if (device < 0) device = ref->device;
    if (ref->device != device) {
      return absl::InvalidArgumentError(
          absl::StrCat("tensor #", i, " (device_ptr 0x", absl::Hex(t.device_ptr),
                       ") is on CUDA device ", ref->device, ", not device ", device,
                       "; a worker's tensors must all be on its device"));
    }
    options.tensors.push_back({std::move(ref->ipc_handle), ref->allocation_bytes, ref->offset,
                               t.num_blocks, t.block_stride_bytes, t.page_bytes});
  }
  if (device < 0) {
    if (cudaGetDevice(&device) != cudaSuccess) device = 0;
  }
  options.device = device;
  absl::StatusOr<std::string> uuid = kvo::cuda::DeviceUuid(device);
  if (!uuid.ok()) return uuid.status();
  options.device_uuid = std::move(*uuid);

  auto worker = std::make_unique<kvo_worker>();
  worker->cuda = true;
  worker->device = device;
  if (num_events > 0) {
    // EventPool::Create uses the current device: make it the worker's, then restore the caller's.
    int current = -1;
    if (cudaGetDevice(&current) != cudaSuccess) current = -1;
    if (current != device) {
      const cudaError_t err = cudaSetDevice(device);
      if (err != cudaSuccess) {
        return absl::InvalidArgumentError(absl::StrCat("cudaSetDevice(", device,
                                                       "): ", cudaGetErrorName(err)));
      }
    }
    absl::StatusOr<std::unique_ptr<kvo::cuda::EventPool>> events =
        kvo::cuda::EventPool::Create(num_events);
    if (current >= 0 && current != device) cudaSetDevice(current);
    if (!events.ok()) return events.status();
    worker->events = std::move(*events);
    options.event_handles = worker->events->ipc_handles();
  }
  return ConnectWorker(std::move(options), std::move(worker), worker_out);
}

absl::Status ConnectHost(const char* socket_path, const kvo_engine_spec* c_spec, uint32_t mp_rank,
                         const kvo_host_tensor* tensors, size_t num_tensors,
                         const kvo_client_options* c_options, kvo_worker** worker_out) {
  if (absl::Status s = Required(worker_out, "worker_out"); !s.ok()) return s;
  if (absl::Status s = ArrayArg(tensors, num_tensors, "tensors"); !s.ok()) return s;
  absl::StatusOr<kvo::WorkerOptions> worker_options =
      WorkerOptionsFor(socket_path, c_spec, mp_rank, c_options);
  if (!worker_options.ok()) return worker_options.status();
  kvo::WorkerOptions options = *std::move(worker_options);
  for (size_t i = 0; i < num_tensors; ++i) {
    const kvo_host_tensor& t = tensors[i];
    if (t.handle == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat("tensor #", i, ": handle is NULL"));
    }
    options.tensors.push_back({t.handle, t.allocation_bytes, t.offset, t.num_blocks,
                               t.block_stride_bytes, t.page_bytes});
  }
  return ConnectWorker(std::move(options), std::make_unique<kvo_worker>(), worker_out);
}

absl::Status EventCall(kvo_worker* worker, int32_t index, const char* what) {
  if (absl::Status s = CheckWorker(worker); !s.ok()) return s;
  if (!worker->cuda) {
    return absl::FailedPreconditionError(
        absl::StrCat(what, ": a host-backend worker (kvo_worker_connect_host) has no CUDA events"));
  }
  if (worker->events == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat(what, ": the worker was connected with num_events = 0"));
  }
  if (index < 0 || static_cast<size_t>(index) >= worker->events->size()) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": event index ", index,
                                                   " outside a pool of ",
                                                   worker->events->size()));
  }
  return absl::OkStatus();
}

// The checks and fields every submit shares; the caller adds the part's blocks and rows.
absl::StatusOr<kvo::JobRequest> JobRequestFor(kvo_worker* worker, uint64_t job_id,
                                              int32_t direction, int32_t event_index,
                                              uint64_t region_epoch) {
  if (absl::Status s = CheckWorker(worker); !s.ok()) return s;
  if (direction != KVO_STORE && direction != KVO_LOAD) {
    return absl::InvalidArgumentError(absl::StrCat(
        "job ", job_id, ": direction ", direction, " is neither KVO_STORE (1) nor KVO_LOAD (2)"));
  }
  if (event_index < -1) {
    return absl::InvalidArgumentError(
        absl::StrCat("job ", job_id, ": event_index ", event_index, " (want -1 or >= 0)"));
  }
  kvo::JobRequest job;
  job.job_id = job_id;
  job.direction = direction == KVO_STORE ? kvo::Direction::kStore : kvo::Direction::kLoad;
  job.event_index = event_index;
  job.region_epoch = region_epoch;
  return job;
}

}  // namespace

extern "C" {

void kvo_client_options_init(kvo_client_options* options) {
  if (options == nullptr) return;
  std::memset(options, 0, sizeof(*options));
  options->open_timeout_ms = absl::ToInt64Milliseconds(kvo::kDefaultOpenTimeout);
  options->call_timeout_ms = absl::ToInt64Milliseconds(kvo::kDefaultCallTimeout);
  options->reconnect = 1;
}

void kvo_engine_spec_init(kvo_engine_spec* spec) {
  if (spec == nullptr) return;
  // Points into a spec that is never freed: the defaults are common::EngineSpec's own.
  static const kvo::CEngineSpec* const kDefaults =
      new kvo::CEngineSpec(kvoffload::common::EngineSpec());
  *spec = *kDefaults->get();
}

int kvo_engine_spec_describe(const kvo_engine_spec* spec, char* out, size_t out_len, char* err,
                             size_t err_len) {
  return Guarded(err, err_len, [&]() -> absl::Status {
    if (out == nullptr || out_len == 0) {
      return absl::InvalidArgumentError("kvo_engine_spec_describe: out is NULL or out_len 0");
    }
    absl::StatusOr<kvoffload::common::EngineSpec> s = kvo::SpecFromC(spec);
    if (!s.ok()) return s.status();
    kvoffload::client::c_abi::CopyString(s->DescribeAll(), out, out_len);
    return absl::OkStatus();
  });
}

const char* kvo_version(void) {
  static const char kVersion[] =
      "kvoffload-c " KVOFFLOAD_VERSION " abi " KVO_STRINGIFY(KVO_ABI_VERSION);
  return kVersion;
}

int kvo_abi_version(void) { return KVO_ABI_VERSION; }

const char* kvo_last_error_reason(void) { return kvoffload::client::c_abi::LastErrorReason(); }

const char* kvo_last_error_metadata(void) {
  return kvoffload::client::c_abi::LastErrorMetadata();
}

int kvo_worker_connect_cuda(const char* socket_path, const kvo_engine_spec* spec, uint32_t mp_rank,
                            int32_t device, const kvo_cuda_tensor* tensors, size_t num_tensors,
                            size_t num_events, kvo_worker** worker_out, char* err,
                            size_t err_len) {
  return kvo_worker_connect_cuda_options(socket_path, spec, mp_rank, device, tensors, num_tensors,
                                         num_events, /*options=*/nullptr, worker_out, err,
                                         err_len);
}

int kvo_worker_connect_cuda_options(const char* socket_path, const kvo_engine_spec* spec,
                                    uint32_t mp_rank, int32_t device,
                                    const kvo_cuda_tensor* tensors, size_t num_tensors,
                                    size_t num_events, const kvo_client_options* options,
                                    kvo_worker** worker_out, char* err, size_t err_len) {
  return Guarded(err, err_len, [&] {
    return ConnectCuda(socket_path, spec, mp_rank, device, tensors, num_tensors, num_events,
                       options, worker_out);
  });
}

int kvo_worker_connect_host(const char* socket_path, const kvo_engine_spec* spec, uint32_t mp_rank,
                            const kvo_host_tensor* tensors, size_t num_tensors,
                            kvo_worker** worker_out, char* err, size_t err_len) {
  return kvo_worker_connect_host_options(socket_path, spec, mp_rank, tensors, num_tensors,
                                         /*options=*/nullptr, worker_out, err, err_len);
}

int kvo_worker_connect_host_options(const char* socket_path, const kvo_engine_spec* spec,
                                    uint32_t mp_rank, const kvo_host_tensor* tensors,
                                    size_t num_tensors, const kvo_client_options* options,
                                    kvo_worker** worker_out, char* err, size_t err_len) {
  return Guarded(err, err_len, [&] {
    return ConnectHost(socket_path, spec, mp_rank, tensors, num_tensors, options, worker_out);
  });
}

int kvo_worker_info(const kvo_worker* worker, struct kvo_worker_info* info_out, char* err,
                    size_t err_len) {
  return Guarded(err, err_len, [&] {
    if (absl::Status s = CheckWorker(worker); !s.ok()) return s;
    if (absl::Status s = Required(info_out, "info_out"); !s.ok()) return s;
    const kvo::Registered& r = worker->client->registration();
    std::memset(info_out, 0, sizeof(*info_out));
    info_out->slot = r.slot;
    info_out->writer = r.writer ? 1 : 0;
    info_out->num_copies = r.geometry.num_copies;
    info_out->replicated = r.geometry.replicated ? 1 : 0;
    info_out->blocks_per_row = r.geometry.blocks_per_row;
    info_out->device = worker->device;
    info_out->row_bytes = r.geometry.row_bytes;
    info_out->slot_bytes = r.geometry.slot_bytes;
    info_out->num_rows = r.geometry.num_rows;
    info_out->worker_bytes_per_block = r.geometry.worker_bytes_per_block;
    info_out->capacity_bytes = r.geometry.capacity_bytes;
    info_out->session_id = r.session_id;
    info_out->num_events = worker->events == nullptr ? 0 : worker->events->size();
    return absl::OkStatus();
  });
}

int kvo_worker_submit(kvo_worker* worker, uint64_t job_id, int32_t direction,
                      const uint64_t* gpu_blocks, size_t num_gpu_blocks, const uint64_t* rows,
                      size_t num_rows, int32_t event_index, char* err, size_t err_len) {
  return kvo_worker_submit_epoch(worker, job_id, direction, gpu_blocks, num_gpu_blocks, rows,
                                 num_rows, event_index, /*region_epoch=*/0, err, err_len);
}

int kvo_worker_submit_epoch(kvo_worker* worker, uint64_t job_id, int32_t direction,
                            const uint64_t* gpu_blocks, size_t num_gpu_blocks,
                            const uint64_t* rows, size_t num_rows, int32_t event_index,
                            uint64_t region_epoch, char* err, size_t err_len) {
  return Guarded(err, err_len, [&]() -> absl::Status {
    absl::StatusOr<kvo::JobRequest> job =
        JobRequestFor(worker, job_id, direction, event_index, region_epoch);
    if (!job.ok()) return job.status();
    if (absl::Status s = ArrayArg(gpu_blocks, num_gpu_blocks, "gpu_blocks"); !s.ok()) return s;
    if (absl::Status s = ArrayArg(rows, num_rows, "rows"); !s.ok()) return s;
    job->gpu_blocks.assign(gpu_blocks, gpu_blocks + num_gpu_blocks);
    job->rows.assign(rows, rows + num_rows);
    return worker->client->Submit(*job);
  });
}

int kvo_worker_submit_runs(kvo_worker* worker, uint64_t job_id, int32_t direction,
                           const kvo_block_run* runs, size_t num_runs, int32_t event_index,
                           uint64_t region_epoch, char* err, size_t err_len) {
  return Guarded(err, err_len, [&]() -> absl::Status {
    absl::StatusOr<kvo::JobRequest> job =
        JobRequestFor(worker, job_id, direction, event_index, region_epoch);
    if (!job.ok()) return job.status();
    if (absl::Status s = ArrayArg(runs, num_runs, "runs"); !s.ok()) return s;
    for (size_t i = 0; i < num_runs; ++i) {
      job->runs.push_back({runs[i].gpu_block, runs[i].row, runs[i].num_rows});
    }
    return worker->client->Submit(*job);
  });
}

int kvo_worker_submit_ranges(kvo_worker* worker, uint64_t job_id, int32_t direction,
                             const kvo_block_range* ranges, size_t num_ranges, int32_t event_index,
                             uint64_t region_epoch, char* err, size_t err_len) {
  return Guarded(err, err_len, [&]() -> absl::Status {
    absl::StatusOr<kvo::JobRequest> job =
        JobRequestFor(worker, job_id, direction, event_index, region_epoch);
    if (!job.ok()) return job.status();
    if (absl::Status s = ArrayArg(ranges, num_ranges, "ranges"); !s.ok()) return s;
    for (size_t i = 0; i < num_ranges; ++i) {
      job->ranges.push_back(
          {ranges[i].gpu_block, ranges[i].row, ranges[i].first_block, ranges[i].num_blocks});
    }
    return worker->client->Submit(*job);
  });
}

int kvo_worker_record_event(kvo_worker* worker, int32_t index, uint64_t cuda_stream, char* err,
                            size_t err_len) {
  return Guarded(err, err_len, [&] {
    if (absl::Status s = EventCall(worker, index, "kvo_worker_record_event"); !s.ok()) return s;
    return worker->events->Record(static_cast<size_t>(index),
                                  reinterpret_cast<cudaStream_t>(cuda_stream));
  });
}

int kvo_worker_wait_event(kvo_worker* worker, int32_t index, uint64_t cuda_stream, char* err,
                          size_t err_len) {
  return Guarded(err, err_len, [&] {
    if (absl::Status s = EventCall(worker, index, "kvo_worker_wait_event"); !s.ok()) return s;
    return worker->events->Wait(static_cast<size_t>(index),
                                reinterpret_cast<cudaStream_t>(cuda_stream));
  });
}

int kvo_worker_poll(kvo_worker* worker, kvo_finished* out, size_t capacity, size_t* n_out,
                    char* err, size_t err_len) {
  return Guarded(err, err_len, [&] {
    if (absl::Status s = CheckWorker(worker); !s.ok()) return s;
    if (absl::Status s = Required(n_out, "n_out"); !s.ok()) return s;
    if (absl::Status s = ArrayArg(out, capacity, "out"); !s.ok()) return s;
    // Jobs beyond `capacity` stay in the client for the next poll or wait: one queue.
    size_t n = 0;
    for (const kvo::FinishedJob& job : worker->client->PollFinished(capacity)) {
      FinishedToC(job, &out[n++]);
    }
    *n_out = n;
    return absl::OkStatus();
  });
}

int kvo_worker_wait(kvo_worker* worker, uint64_t job_id, int64_t timeout_ms, kvo_finished* out,
                    char* err, size_t err_len) {
  return Guarded(err, err_len, [&]() -> absl::Status {
    if (absl::Status s = CheckWorker(worker); !s.ok()) return s;
    if (absl::Status s = Required(out, "out"); !s.ok()) return s;
    const absl::Duration timeout =
        timeout_ms < 0 ? absl::InfiniteDuration() : absl::Milliseconds(timeout_ms);
    // Woken by the client's reader the moment the verdict arrives (no polling). A job that a
    // concurrent poll took is that poll's, as with any other consumer.
    absl::StatusOr<kvo::FinishedJob> job = worker->client->WaitFinished(job_id, timeout);
    if (!job.ok()) return job.status();
    FinishedToC(*job, out);
    return absl::OkStatus();
  });
}

int kvo_worker_session_status(const kvo_worker* worker, char* err, size_t err_len) {
  return Guarded(err, err_len, [&] {
    if (absl::Status s = CheckWorker(worker); !s.ok()) return s;
    return worker->client->session_status();
  });
}

int kvo_worker_session_state(const kvo_worker* worker, struct kvo_session_state* state_out,
                             char* err, size_t err_len) {
  return Guarded(err, err_len, [&] {
    if (absl::Status s = CheckWorker(worker); !s.ok()) return s;
    if (absl::Status s = Required(state_out, "state_out"); !s.ok()) return s;
    const kvo::WorkerSessionState state = worker->client->session_state();
    std::memset(state_out, 0, sizeof(*state_out));
    switch (state.phase) {
      case kvo::WorkerSessionState::Phase::kLive: state_out->phase = KVO_SESSION_LIVE; break;
      case kvo::WorkerSessionState::Phase::kReconnecting:
        state_out->phase = KVO_SESSION_RECONNECTING;
        break;
      case kvo::WorkerSessionState::Phase::kEnded: state_out->phase = KVO_SESSION_ENDED; break;
    }
    state_out->code = static_cast<int32_t>(state.status.code());
    state_out->generation = state.generation;
    state_out->region_changes = state.region_changes;
    state_out->reconnect_attempts = state.reconnect_attempts;
    state_out->region_epoch = state.registration.region_epoch;
    state_out->session_id = state.registration.session_id;
    kvoffload::client::c_abi::CopyString(state.status.message(), state_out->message,
                                         sizeof(state_out->message));
    kvoffload::client::c_abi::CopyString(kvoffload::common::ErrorReason(state.status),
                                         state_out->reason, sizeof(state_out->reason));
    return absl::OkStatus();
  });
}

void kvo_worker_close(kvo_worker* worker) {
  if (worker == nullptr) return;
  try {
    worker->client.reset();  // ends the session before the events it names are destroyed
    delete worker;
  } catch (...) {
  }
}

int kvo_worker_region_epoch(const kvo_worker* worker, uint64_t* epoch_out, char* err,
                            size_t err_len) {
  return Guarded(err, err_len, [&] {
    return ReadInto(CheckWorker(worker), epoch_out, "epoch_out",
                    [&] { return worker->client->registration().region_epoch; });
  });
}

}  // extern "C"
