// The C ABI over the C++ client library (client/kvoffload_c.h). Every entry point converts its
// arguments, calls the client, and turns the absl::Status into (code, message) once, here; no
// C++ exception crosses the boundary.
#include "client/kvoffload_c.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstring>
#include <deque>
#include <exception>
#include <memory>
#include <new>
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
#include "client/c_abi/spec_from_c.h"
#include "client/cuda/cuda_client.h"
#include "common/limits.h"
#include "client/daemon_socket.h"
#include "client/kvoffload_client.h"

#ifndef KVOFFLOAD_VERSION
#define KVOFFLOAD_VERSION "0.1.0"
#endif
#define KVO_STRINGIFY_(x) #x
#define KVO_STRINGIFY(x) KVO_STRINGIFY_(x)

namespace kvo = kvoffload::client;

// The opaque handles. The EventPool belongs to the worker handle and outlives its session.
// The C header repeats what every layer shares; a second definition that diverges fails here.
static_assert(KVO_MAX_KEY_BYTES == kvoffload::common::kMaxKeyBytes, "KVO_MAX_KEY_BYTES");

struct kvo_worker {
  // Declared first so that it is destroyed last: the session ends before its events go.
  std::unique_ptr<kvo::cuda::EventPool> events;  // null for host workers or num_events == 0
  std::unique_ptr<kvo::WorkerClient> client;
  int32_t device = -1;
  bool cuda = false;
};

struct kvo_scheduler {
  std::unique_ptr<kvo::SchedulerClient> client;
};

namespace {

int Report(const absl::Status& status, char* err, size_t err_len) {
  if (err != nullptr && err_len > 0) {
    const absl::string_view message = status.message();
    const size_t n = std::min(message.size(), err_len - 1);
    std::memcpy(err, message.data(), n);
    err[n] = '\0';
  }
  return static_cast<int>(status.code());
}

// Runs `body` (returning absl::Status) and reports its status; exceptions become statuses.
template <typename Body>
int Guarded(char* err, size_t err_len, Body&& body) {
  try {
    return Report(body(), err, err_len);
  } catch (const std::bad_alloc&) {
    return Report(absl::ResourceExhaustedError("kvoffload: out of memory"), err, err_len);
  } catch (const std::exception& e) {
    return Report(absl::InternalError(absl::StrCat("kvoffload: ", e.what())), err, err_len);
  } catch (...) {
    return Report(absl::InternalError("kvoffload: unknown C++ exception"), err, err_len);
  }
}

void CopyString(absl::string_view from, char* to, size_t capacity) {
  const size_t n = std::min(from.size(), capacity - 1);
  std::memcpy(to, from.data(), n);
  to[n] = '\0';
}

absl::Status Required(const void* pointer, const char* what) {
  if (pointer == nullptr) return absl::InvalidArgumentError(absl::StrCat(what, " is NULL"));
  return absl::OkStatus();
}

// An array of `n` elements may be NULL only when n == 0.
absl::Status ArrayArg(const void* pointer, size_t n, const char* what) {
  if (pointer == nullptr && n > 0) {
    return absl::InvalidArgumentError(absl::StrCat(what, " is NULL but its length is ", n));
  }
  return absl::OkStatus();
}

void GeometryToC(const kvo::RegionGeometry& g, bool created, kvo_geometry* out) {
  std::memset(out, 0, sizeof(*out));
  out->replicated = g.replicated ? 1 : 0;
  out->num_copies = g.num_copies;
  out->blocks_per_row = g.blocks_per_row;
  out->created = created ? 1 : 0;
  out->worker_bytes_per_block = g.worker_bytes_per_block;
  out->slot_bytes = g.slot_bytes;
  out->row_bytes = g.row_bytes;
  out->num_rows = g.num_rows;
  out->capacity_bytes = g.capacity_bytes;
  CopyString(g.fingerprint, out->fingerprint, sizeof(out->fingerprint));
}

void FinishedToC(const kvo::FinishedJob& job, kvo_finished* out) {
  std::memset(out, 0, sizeof(*out));
  out->job_id = job.job_id;
  out->code = static_cast<int32_t>(job.status.code());
  out->bytes = job.bytes;
  CopyString(job.status.message(), out->message, sizeof(out->message));
}

// NULL = the defaults; every timeout must be > 0.
absl::StatusOr<kvo::ClientOptions> OptionsFromC(const kvo_client_options* c) {
  kvo::ClientOptions options;
  if (c == nullptr) return options;
  if (c->open_timeout_ms <= 0 || c->call_timeout_ms <= 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "client options: open_timeout_ms (", c->open_timeout_ms, ") and call_timeout_ms (",
        c->call_timeout_ms, ") must be > 0; kvo_client_options_init sets the defaults"));
  }
  options.open_timeout = absl::Milliseconds(c->open_timeout_ms);
  options.call_timeout = absl::Milliseconds(c->call_timeout_ms);
  return options;
}

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

absl::Status CheckScheduler(const kvo_scheduler* scheduler) {
  if (scheduler == nullptr || scheduler->client == nullptr) {
    return absl::InvalidArgumentError("scheduler handle is NULL");
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<std::string>> KeysFromC(const uint8_t* const* keys,
                                                   const size_t* key_lens, size_t n) {
  if (n > 0 && (keys == nullptr || key_lens == nullptr)) {
    return absl::InvalidArgumentError(absl::StrCat("keys or key_lens is NULL for ", n, " keys"));
  }
  std::vector<std::string> out;
  out.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    if (keys[i] == nullptr && key_lens[i] > 0) {
      return absl::InvalidArgumentError(absl::StrCat("key #", i, " is NULL"));
    }
    out.emplace_back(reinterpret_cast<const char*>(keys[i]), key_lens[i]);
  }
  return out;
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
  options->open_timeout_ms = absl::ToInt64Milliseconds(kvo::kDefaultOpenTimeout);
  options->call_timeout_ms = absl::ToInt64Milliseconds(kvo::kDefaultCallTimeout);
}

void kvo_engine_spec_init(kvo_engine_spec* spec) {
  if (spec == nullptr) return;
  std::memset(spec, 0, sizeof(*spec));
  spec->engine_id = "engine";
  spec->world_size = 1;
  spec->tp = 1;
  spec->pp = 1;
  spec->pcp = 1;
  spec->dcp = 1;
  spec->executor = KVO_EXECUTOR_MP;
  spec->attention = KVO_ATTENTION_MHA;
  spec->num_kv_groups = 1;
  spec->num_layers = 1;
  spec->blocks_per_row = 1;
}

const char* kvo_version(void) {
  static const char kVersion[] =
      "kvoffload-c " KVOFFLOAD_VERSION " abi " KVO_STRINGIFY(KVO_ABI_VERSION);
  return kVersion;
}

int kvo_abi_version(void) { return KVO_ABI_VERSION; }

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

void kvo_worker_close(kvo_worker* worker) {
  if (worker == nullptr) return;
  try {
    worker->client.reset();  // ends the session before the events it names are destroyed
    delete worker;
  } catch (...) {
  }
}

int kvo_scheduler_open(const char* socket_path, const kvo_engine_spec* spec,
                       kvo_scheduler** scheduler_out, kvo_geometry* geometry_out, char* err,
                       size_t err_len) {
  return kvo_scheduler_open_options(socket_path, spec, /*region_epoch=*/0, /*options=*/nullptr,
                                    scheduler_out, geometry_out, err, err_len);
}

int kvo_scheduler_open_epoch(const char* socket_path, const kvo_engine_spec* spec,
                             uint64_t region_epoch, kvo_scheduler** scheduler_out,
                             kvo_geometry* geometry_out, char* err, size_t err_len) {
  return kvo_scheduler_open_options(socket_path, spec, region_epoch, /*options=*/nullptr,
                                    scheduler_out, geometry_out, err, err_len);
}

int kvo_scheduler_open_options(const char* socket_path, const kvo_engine_spec* spec,
                               uint64_t region_epoch, const kvo_client_options* options,
                               kvo_scheduler** scheduler_out, kvo_geometry* geometry_out,
                               char* err, size_t err_len) {
  return Guarded(err, err_len, [&] {
    if (absl::Status s = Required(socket_path, "socket_path"); !s.ok()) return s;
    if (absl::Status s = Required(scheduler_out, "scheduler_out"); !s.ok()) return s;
    absl::StatusOr<kvo::EngineSpec> cpp_spec = kvo::SpecFromC(spec);
    if (!cpp_spec.ok()) return cpp_spec.status();
    absl::StatusOr<kvo::ClientOptions> client_options = OptionsFromC(options);
    if (!client_options.ok()) return client_options.status();
    absl::StatusOr<std::unique_ptr<kvo::SchedulerClient>> client =
        kvo::SchedulerClient::Open(socket_path, *cpp_spec, region_epoch, *client_options);
    if (!client.ok()) return client.status();
    auto scheduler = std::make_unique<kvo_scheduler>();
    scheduler->client = std::move(*client);
    if (geometry_out != nullptr) {
      GeometryToC(scheduler->client->geometry(), scheduler->client->created(), geometry_out);
    }
    *scheduler_out = scheduler.release();
    return absl::OkStatus();
  });
}

int kvo_scheduler_region_epoch(const kvo_scheduler* scheduler, uint64_t* epoch_out, char* err,
                               size_t err_len) {
  return Guarded(err, err_len, [&] {
    if (absl::Status s = CheckScheduler(scheduler); !s.ok()) return s;
    if (absl::Status s = Required(epoch_out, "epoch_out"); !s.ok()) return s;
    *epoch_out = scheduler->client->region_epoch();
    return absl::OkStatus();
  });
}

int kvo_worker_region_epoch(const kvo_worker* worker, uint64_t* epoch_out, char* err,
                            size_t err_len) {
  return Guarded(err, err_len, [&] {
    if (absl::Status s = CheckWorker(worker); !s.ok()) return s;
    if (absl::Status s = Required(epoch_out, "epoch_out"); !s.ok()) return s;
    *epoch_out = worker->client->registration().region_epoch;
    return absl::OkStatus();
  });
}

int kvo_scheduler_geometry(const kvo_scheduler* scheduler, kvo_geometry* geometry_out, char* err,
                           size_t err_len) {
  return Guarded(err, err_len, [&] {
    if (absl::Status s = CheckScheduler(scheduler); !s.ok()) return s;
    if (absl::Status s = Required(geometry_out, "geometry_out"); !s.ok()) return s;
    GeometryToC(scheduler->client->geometry(), scheduler->client->created(), geometry_out);
    return absl::OkStatus();
  });
}

int kvo_scheduler_lookup(kvo_scheduler* scheduler, const uint8_t* const* keys,
                         const size_t* key_lens, size_t n, int32_t* states_out, char* err,
                         size_t err_len) {
  return Guarded(err, err_len, [&]() -> absl::Status {
    if (absl::Status s = CheckScheduler(scheduler); !s.ok()) return s;
    if (absl::Status s = ArrayArg(states_out, n, "states_out"); !s.ok()) return s;
    absl::StatusOr<std::vector<std::string>> k = KeysFromC(keys, key_lens, n);
    if (!k.ok()) return k.status();
    absl::StatusOr<std::vector<kvo::KeyState>> states = scheduler->client->Lookup(*k);
    if (!states.ok()) return states.status();
    if (states->size() != n) {
      return absl::InternalError(absl::StrCat("kvoffloadd answered ", states->size(),
                                              " states for ", n, " keys"));
    }
    for (size_t i = 0; i < n; ++i) {
      switch ((*states)[i]) {
        case kvo::KeyState::kMiss: states_out[i] = KVO_KEY_MISS; break;
        case kvo::KeyState::kHit: states_out[i] = KVO_KEY_HIT; break;
        case kvo::KeyState::kHitPending: states_out[i] = KVO_KEY_HIT_PENDING; break;
      }
    }
    return absl::OkStatus();
  });
}

int kvo_scheduler_prepare_store(kvo_scheduler* scheduler, const uint8_t* const* keys,
                                const size_t* key_lens, size_t n, uint8_t* store_mask_out,
                                uint64_t* rows_out, uint8_t* evicted_buf, size_t evicted_buf_len,
                                size_t* evicted_lens_out, size_t* num_evicted_out, char* err,
                                size_t err_len) {
  return Guarded(err, err_len, [&]() -> absl::Status {
    if (absl::Status s = CheckScheduler(scheduler); !s.ok()) return s;
    if (absl::Status s = ArrayArg(store_mask_out, n, "store_mask_out"); !s.ok()) return s;
    if (absl::Status s = ArrayArg(rows_out, n, "rows_out"); !s.ok()) return s;
    if (absl::Status s = Required(num_evicted_out, "num_evicted_out"); !s.ok()) return s;
    // Checked before the index changes: evictions cannot be undone, so they must fit.
    if (evicted_buf != nullptr) {
      if (evicted_buf_len / KVO_MAX_KEY_BYTES < n) {
        return absl::InvalidArgumentError(absl::StrCat(
            "evicted_buf holds ", evicted_buf_len, " bytes; up to ", n,
            " evicted keys of up to KVO_MAX_KEY_BYTES (", KVO_MAX_KEY_BYTES,
            ") need n x KVO_MAX_KEY_BYTES bytes (pass NULL to ignore evicted keys)"));
      }
      if (absl::Status s = ArrayArg(evicted_lens_out, n, "evicted_lens_out"); !s.ok()) return s;
    }
    absl::StatusOr<std::vector<std::string>> k = KeysFromC(keys, key_lens, n);
    if (!k.ok()) return k.status();
    absl::StatusOr<kvo::PreparedStore> prepared = scheduler->client->PrepareStore(*k);
    if (!prepared.ok()) return prepared.status();
    // The new keys come back in request order: walk both lists together.
    size_t j = 0;
    for (size_t i = 0; i < n; ++i) {
      if (j < prepared->keys.size() && prepared->keys[j] == (*k)[i]) {
        store_mask_out[i] = 1;
        rows_out[i] = prepared->rows.at(j);
        ++j;
      } else {
        store_mask_out[i] = 0;
        rows_out[i] = KVO_NO_ROW;
      }
    }
    if (j != prepared->keys.size() || prepared->rows.size() != prepared->keys.size()) {
      return absl::InternalError(absl::StrCat(
          "kvoffloadd answered PrepareStore with ", prepared->keys.size(), " keys and ",
          prepared->rows.size(), " rows that do not follow the request's order"));
    }
    const std::vector<std::string>& evicted = prepared->evicted_keys;
    *num_evicted_out = std::min(evicted.size(), n);  // each evicted key made room for a new one
    if (evicted_buf != nullptr) {
      size_t offset = 0;
      for (size_t e = 0; e < evicted.size() && e < n; ++e) {
        const size_t len = std::min(evicted[e].size(), evicted_buf_len - offset);
        std::memcpy(evicted_buf + offset, evicted[e].data(), len);
        evicted_lens_out[e] = len;
        offset += len;
      }
    }
    return absl::OkStatus();
  });
}

int kvo_scheduler_complete_store(kvo_scheduler* scheduler, const uint8_t* const* keys,
                                 const size_t* key_lens, size_t n, int success, char* err,
                                 size_t err_len) {
  return Guarded(err, err_len, [&]() -> absl::Status {
    if (absl::Status s = CheckScheduler(scheduler); !s.ok()) return s;
    absl::StatusOr<std::vector<std::string>> k = KeysFromC(keys, key_lens, n);
    if (!k.ok()) return k.status();
    return scheduler->client->CompleteStore(*k, success != 0);
  });
}

int kvo_scheduler_prepare_load(kvo_scheduler* scheduler, const uint8_t* const* keys,
                               const size_t* key_lens, size_t n, uint64_t* rows_out, char* err,
                               size_t err_len) {
  return Guarded(err, err_len, [&]() -> absl::Status {
    if (absl::Status s = CheckScheduler(scheduler); !s.ok()) return s;
    if (absl::Status s = ArrayArg(rows_out, n, "rows_out"); !s.ok()) return s;
    absl::StatusOr<std::vector<std::string>> k = KeysFromC(keys, key_lens, n);
    if (!k.ok()) return k.status();
    absl::StatusOr<std::vector<uint64_t>> rows = scheduler->client->PrepareLoad(*k);
    if (!rows.ok()) return rows.status();
    if (rows->size() != n) {
      return absl::InternalError(
          absl::StrCat("kvoffloadd answered ", rows->size(), " rows for ", n, " keys"));
    }
    std::copy(rows->begin(), rows->end(), rows_out);
    return absl::OkStatus();
  });
}

int kvo_scheduler_complete_load(kvo_scheduler* scheduler, const uint8_t* const* keys,
                                const size_t* key_lens, size_t n, char* err, size_t err_len) {
  return Guarded(err, err_len, [&]() -> absl::Status {
    if (absl::Status s = CheckScheduler(scheduler); !s.ok()) return s;
    absl::StatusOr<std::vector<std::string>> k = KeysFromC(keys, key_lens, n);
    if (!k.ok()) return k.status();
    return scheduler->client->CompleteLoad(*k);
  });
}

int kvo_scheduler_touch(kvo_scheduler* scheduler, const uint8_t* const* keys,
                        const size_t* key_lens, size_t n, char* err, size_t err_len) {
  return Guarded(err, err_len, [&]() -> absl::Status {
    if (absl::Status s = CheckScheduler(scheduler); !s.ok()) return s;
    absl::StatusOr<std::vector<std::string>> k = KeysFromC(keys, key_lens, n);
    if (!k.ok()) return k.status();
    return scheduler->client->Touch(*k);
  });
}

void kvo_scheduler_close(kvo_scheduler* scheduler) { delete scheduler; }

}  // extern "C"
