// The copy-backend seam: everything the daemon needs from a GPU (or from the host stand-in used
// by tests and CI) sits behind CopyBackend. The daemon core (engines, index, jobs, votes) is
// identical for both; only the bytes move differently.
//
//   // cuda::CreateCudaCopyBackend(options) or CreateHostCopyBackend(threads):
//   std::unique_ptr<CopyBackend> backend = ...;
//   RETURN_IF_ERROR(backend->RegisterRegion(region->data(), region->size(), geometry.row_bytes));
//   ASSIGN_OR_RETURN(auto memory, backend->OpenWorker(registration));
//   backend->Submit(std::move(job), [](absl::Status s, uint64_t bytes) { ... });
#ifndef KVOFFLOAD_DAEMON_COPY_COPY_BACKEND_H_
#define KVOFFLOAD_DAEMON_COPY_COPY_BACKEND_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/tensor_handle.h"
#include "daemon/copy/copy_run.h"

namespace kvoffload::daemon {

// One KV tensor of a worker, as registered (the client's record: common/tensor_handle.h).
using TensorRegistration = common::TensorHandle;

struct WorkerRegistration {
  int32_t device = -1;
  std::string device_uuid;                  // 16 raw bytes of cudaUUID_t, or empty
  std::vector<TensorRegistration> tensors;  // in registration order
  std::vector<std::string> event_handles;   // cudaIpcEventHandle_t bytes each
  // The registering process as the kernel named it (its connection's SO_PEERCRED), never as the
  // message claims. The host backend opens only memory of this process that this uid owns.
  // In-process tests name this process (getpid()); there is no "self" value.
  int32_t caller_pid = 0;
  uint32_t caller_uid = 0;
};

// A worker's opened memory: the mapped allocations (each distinct handle opened once), the
// resolved tensor table and the event pool. Created by CopyBackend::OpenWorker, owned by the
// worker session; the destructor releases every mapping. It must outlive every job submitted
// with it: the session destroys it only after its jobs' `done` callbacks have run.
class WorkerMemory {
 public:
  virtual ~WorkerMemory() = default;
  WorkerMemory(const WorkerMemory&) = delete;
  WorkerMemory& operator=(const WorkerMemory&) = delete;

  // Number of blocks every tensor holds (the minimum over tensors): valid gpu block ids.
  virtual uint64_t num_blocks() const = 0;
  // Σ page_bytes over tensors: the worker's bytes per GPU block.
  virtual uint64_t bytes_per_block() const = 0;
  virtual size_t num_events() const = 0;

 protected:
  WorkerMemory() = default;
};

// One worker's copy for one job, as runs (copy_run.h): run k moves GPU blocks
// [gpu_block, gpu_block + num_blocks) ↔ region blocks [region_block, ...). In the region, the
// worker's bytes for block j of row r start at
// region_base + r × row_bytes + slot × slot_bytes + j × bytes_per_block, tensors concatenated in
// registration order. The runs were validated by the caller (ValidatePart, engine/job_part.h);
// a backend re-checks only what keeps its own memory safe (GPU blocks its worker holds, bytes
// inside the registered region), in O(runs).
struct CopyJob {
  CopyDirection direction = CopyDirection::kStore;
  WorkerMemory* memory = nullptr;  // not owned
  uint8_t* region_base = nullptr;  // not owned; registered with RegisterRegion
  uint64_t row_bytes = 0;
  uint64_t slot_bytes = 0;
  uint32_t slot = 0;
  uint32_t blocks_per_row = 1;
  std::vector<CopyRun> runs;                   // in the job's order
  int32_t event_index = -1;                    // into memory's event pool; -1 = none
  absl::Duration timeout = absl::Seconds(30);  // a wait on the worker's event fails after this
};

// `status` is the outcome of the copy; `bytes` what crossed the link (0 on failure). Called
// exactly once, from a backend thread, after the copy has really finished or is known never to
// touch the region or the worker's memory again.
using CopyDone = std::function<void(absl::Status status, uint64_t bytes)>;

// Thread-safe: every method may be called from any thread.
class CopyBackend {
 public:
  virtual ~CopyBackend() = default;

  virtual std::string name() const = 0;  // "host" or "cuda"

  // Makes [base, base + bytes) usable as a copy target (CUDA: cudaHostRegister in chunks that end
  // on multiples of `row_bytes`). The region stays owned by the caller.
  virtual absl::Status RegisterRegion(uint8_t* base, uint64_t bytes, uint64_t row_bytes) = 0;
  // Undoes RegisterRegion (or DeclareRegion); no job may be in flight on the region and no
  // PinRegionChunk of it running.
  virtual void UnregisterRegion(uint8_t* base) = 0;

  // Serve while pinning (durable regions): records the region like RegisterRegion, but a copy may touch
  // only chunks that PinRegionChunk has made usable. Chunk c is bytes [c × chunk_bytes,
  // min(bytes, (c + 1) × chunk_bytes)); chunk_bytes is a positive multiple of row_bytes, so a row
  // never spans two chunks. The defaults suit a backend with nothing to pin (host): the whole
  // region is usable at once.
  virtual absl::Status DeclareRegion(uint8_t* base, uint64_t bytes, uint64_t row_bytes,
                                     uint64_t chunk_bytes) {
    (void)chunk_bytes;
    return RegisterRegion(base, bytes, row_bytes);
  }
  // Makes one chunk of a declared region usable (CUDA: cudaHostRegister of its bytes, which must
  // be populated). May run concurrently for different chunks. UNAVAILABLE when it cannot be done
  // yet (CUDA: no device context before the first worker opens): the caller retries later.
  virtual absl::Status PinRegionChunk(uint8_t* base, size_t chunk) {
    (void)base;
    (void)chunk;
    return absl::OkStatus();
  }

  // Opens a worker's memory. INVALID_ARGUMENT for handles that do not open or tensors that do
  // not fit their allocation.
  virtual absl::StatusOr<std::unique_ptr<WorkerMemory>> OpenWorker(
      const WorkerRegistration& registration) = 0;

  // Starts the copy; never blocks on it. `done` runs exactly once.
  virtual void Submit(CopyJob job, CopyDone done) = 0;

  // GPU memory the daemon itself uses per device ordinal (context, streams, descriptor tables).
  virtual std::map<int32_t, uint64_t> GpuMemoryBytes() const = 0;

  // Devices that can no longer copy (a sticky CUDA error; only a restart recovers them), each
  // with the reason; their jobs fail fast with UNAVAILABLE. Empty when every device is healthy.
  virtual std::map<int32_t, std::string> FailedDevices() const { return {}; }
};

}  // namespace kvoffload::daemon

#endif  // KVOFFLOAD_DAEMON_COPY_COPY_BACKEND_H_
