// The CUDA backend's three ways to enqueue a prepared job's GPU work, once its worker's event has
// fired (cuda_copy_backend.cc chooses one; DESIGN.md §5 and docs/TUNING.md say when each wins):
//   EnqueueCopyEngine  every merged segment is one DMA (batched), a stretch of consecutive
//                      blocks one 2D DMA per tensor; no SM. The default.
//   EnqueueStaged      per chunk, a short gather/scatter launch on copy_sms SMs between the
//                      worker's pages and a staging buffer, and DMA between staging and region.
//   EnqueueKernel      one launch reads or writes the mapped region directly.
// The SM paths run only where kernels can share SMs with the model (MPS, or --sm_copies=always).
// Each records the job's completion event in j->completion (or, if it cannot, waits for the
// job's streams), so a job is never reported while its work runs.
//
// Thread-safety: each takes the job's lane mutex for as long as it enqueues (EnqueueCopyEngine's
// issue-pool helpers use the lane's `issue` streams only while the caller holds it). Ownership:
// borrows the job, its memory and region; a staged or kernel job's descriptor buffer goes to
// j->buffer.
#ifndef KVOFFLOAD_DAEMON_COPY_CUDA_ENQUEUE_H_
#define KVOFFLOAD_DAEMON_COPY_CUDA_ENQUEUE_H_

#include <atomic>
#include <cstddef>
#include <memory>
#include <vector>

#include <cuda_runtime_api.h>

#include "absl/status/status.h"
#include "daemon/copy/copy_backend.h"
#include "daemon/copy/copy_plan.h"
#include "daemon/copy/cuda/completion.h"
#include "daemon/copy/cuda/device.h"
#include "daemon/copy/cuda/issue_pool.h"
#include "daemon/copy/cuda/worker_memory.h"
#include "daemon/copy/descriptor_table.h"

namespace kvoffload::daemon::cuda {

// A job validated and planned at submission; started (enqueued) once its worker's event fired.
struct PreparedJob {
  CopyDirection direction = CopyDirection::kStore;
  CudaWorkerMemory* memory = nullptr;
  std::shared_ptr<PinnedRegion> region;
  DescriptorTable table;
  CopyPath path = CopyPath::kStaged;
  // path != kCopyEngine: one (gpu_block, host_offset) pair per block for the SM kernels
  // (ExpandBlocks(table)); empty on the copy-engine path, which walks the table's runs.
  std::vector<BlockDescriptor> blocks;
  StagedPlan staged;               // path == kStaged
  // The copy engines' copies (EstimateCopies), counted at planning, outside the lane's mutex:
  // how many threads issue the job.
  uint64_t estimated_copies = 0;
  cudaEvent_t load_event = nullptr;  // loads: the worker's event, recorded after the copy
};

// Filled by the backend from CudaBackendOptions, where the defaults live (none is repeated here).
struct EnqueueOptions {
  int copy_sms = 0;                   // the staged path's gather/scatter grid
  size_t staging_chunk_bytes = 0;     // the staged path's chunk
  std::atomic<bool>* batch_unsupported = nullptr;  // shared by the backend's CopyBatchers
  // The copy-engine path's batches (CudaBackendOptions; BatchSchedule).
  size_t first_batch_copies = 0;
  size_t max_batch_copies = 0;
  bool batch_overlap_hint = false;
  // Stretches of at least this many consecutive blocks go as 2D copies (VisitStridedSegments);
  // 0: never (every page its own copy, as before).
  uint64_t strided_min_rows = 0;
  // Threads that issue one job's copies beside the caller (null: the caller alone), each on one
  // of the lane's `issue` streams, for a job of at least parallel_issue_min_copies copies per
  // thread (CudaBackendOptions::issue_threads).
  IssuePool* issue_pool = nullptr;
  uint64_t parallel_issue_min_copies = 0;
};

absl::Status EnqueueCopyEngine(const PreparedJob& job, PendingJob* j,
                               const EnqueueOptions& options);
// The SM paths set *no_room, with nothing enqueued, when the lane has no staging and the
// device's staging limit leaves no room for it, or the descriptor pool none for the job's table;
// the caller then takes the copy engines (DMA needs neither).
absl::Status EnqueueStaged(const PreparedJob& job, PendingJob* j, const EnqueueOptions& options,
                           bool* no_room);
absl::Status EnqueueKernel(const PreparedJob& job, PendingJob* j, const EnqueueOptions& options,
                           bool* no_room);

}  // namespace kvoffload::daemon::cuda

#endif  // KVOFFLOAD_DAEMON_COPY_CUDA_ENQUEUE_H_
