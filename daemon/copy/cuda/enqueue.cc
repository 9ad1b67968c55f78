#include "daemon/copy/cuda/enqueue.h"

#include <algorithm>
#include <atomic>
#include <functional>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/cuda/cuda_status.h"
#include "daemon/copy/cuda/log.h"
#include "daemon/copy/cuda/poll_pacing.h"
#include "common/status_macros.h"
#include "daemon/copy/copy_plan.h"
#include "daemon/copy/cuda/copy_batcher.h"
#include "daemon/copy/cuda/copy_kernels.h"

namespace kvoffload::daemon::cuda {
namespace {

// Fixed choice, measured (docs/TUNING.md): every grid, thread and unroll setting of the kernel
// gave the same link-bound rates.
constexpr int kKernelSms = 16;  // the kernel path's grid (resident for the whole transfer)

// Adds one host ↔ device copy of `bytes` at region offset `host_offset`, split where it crosses
// a registration chunk's end: each chunk is its own cudaHostRegister, and one copy is never
// left to span two of them.
absl::Status AddRegionCopy(CopyBatcher& batcher, bool store, uint8_t* base, uint64_t chunk_bytes,
                           uint64_t host_offset, uint8_t* other, uint64_t bytes) {
  while (bytes > 0) {
    const uint64_t piece = std::min(bytes, chunk_bytes - host_offset % chunk_bytes);
    RETURN_IF_ERROR(store ? batcher.Add(base + host_offset, other, piece)
                          : batcher.Add(other, base + host_offset, piece));
    host_offset += piece;
    other += piece;
    bytes -= piece;
  }
  return absl::OkStatus();
}

// cudaMemcpy2DAsync refuses pitches above the device's maximum (cudaDevAttrMaxPitch, 2^31 − 1
// on every GPU we run on); a stretch with a larger one goes row by row.
constexpr uint64_t kMax2dPitch = (uint64_t{1} << 31) - 1;

// Adds a strided segment (rows of s.bytes at a fixed pitch on each side): the rows of each
// registration chunk as one 2D copy on `stream`, a row that crosses a chunk's end (or a lone row)
// through the batcher, split there. *calls counts the 2D copies.
absl::Status AddRegionCopy2D(CopyBatcher& batcher, Device* device, cudaStream_t stream, bool store,
                             uint8_t* base, uint64_t chunk_bytes, const StridedSegment& s,
                             uint64_t* calls) {
  // VisitStridedSegments never makes a row wider than its pitch; row by row if one ever is.
  const bool pitches_fit = s.host_pitch <= kMax2dPitch && s.gpu_pitch <= kMax2dPitch &&
                           s.bytes <= s.host_pitch && s.bytes <= s.gpu_pitch;
  uint64_t r = 0;
  while (r < s.rows) {
    const uint64_t host = s.host_offset + r * s.host_pitch;
    uint8_t* gpu = reinterpret_cast<uint8_t*>(s.gpu_address + r * s.gpu_pitch);
    const uint64_t chunk_end = (host / chunk_bytes + 1) * chunk_bytes;
    // Rows r .. r + n − 1 end inside this chunk (host + k × pitch + bytes ≤ chunk_end).
    const uint64_t n =
        host + s.bytes > chunk_end || !pitches_fit
            ? 1
            : std::min(s.rows - r, (chunk_end - host - s.bytes) / s.host_pitch + 1);
    if (n == 1) {
      RETURN_IF_ERROR(AddRegionCopy(batcher, store, base, chunk_bytes, host, gpu, s.bytes));
    } else if (store) {
      RETURN_IF_ERROR(device->Check(cudaMemcpy2DAsync(base + host, s.host_pitch, gpu, s.gpu_pitch,
                                                      s.bytes, n, cudaMemcpyDeviceToHost, stream),
                                    "cudaMemcpy2DAsync (store)"));
      ++*calls;
    } else {
      RETURN_IF_ERROR(device->Check(cudaMemcpy2DAsync(gpu, s.gpu_pitch, base + host, s.host_pitch,
                                                      s.bytes, n, cudaMemcpyHostToDevice, stream),
                                    "cudaMemcpy2DAsync (load)"));
      ++*calls;
    }
    r += n;
  }
  return absl::OkStatus();
}

// Records the job's completion after everything queued on `last` (and on `other`, joined into
// it, when the job may have left work there unseen). If the event cannot be recorded, both
// streams are synchronized so the job is never reported while its work runs.
void RecordCompletion(Device* device, cudaStream_t last, cudaStream_t other, bool join_other,
                      cudaStream_t wake, PendingJob* j, absl::Status* status) {
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
    // A long copy wakes the queue from its lane's wake stream instead of being polled
    // (poll_pacing.h).
    if (j->queue != nullptr && j->queue->WakesByStream(j->bytes)) {
      j->stream_wakes = j->queue->WakeAfter(*completion, wake);
    }
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

// Records a load's worker event (the worker's next kernels wait for it) and then the job's
// completion after everything queued on `last`; see RecordCompletion.
void EndJob(const PreparedJob& job, Device* device, cudaStream_t last, cudaStream_t other,
            bool join_other, PendingJob* j, absl::Status* status) {
  if (status->ok() && job.load_event != nullptr) {
    *status = device->Check(cudaEventRecord(job.load_event, last),
                            "cudaEventRecord of the worker's event");
  }
  RecordCompletion(device, last, other, join_other, job.memory->lane(job.direction).wake, j,
                   status);
}

CopyPagesArgs KernelArgs(bool store, const CudaWorkerMemory& m, const Device::Buffer& buffer,
                         uint64_t pair_begin, uint64_t num_pairs, uint64_t align_bits) {
  CopyPagesArgs args;
  args.store = store;
  args.tensors = m.kernel_table();
  args.num_tensors = static_cast<uint32_t>(m.tensors().size());
  args.units_per_pair = m.units_per_pair();
  args.pairs = reinterpret_cast<const PagePair*>(buffer.device) + pair_begin;
  args.num_pairs = num_pairs;
  args.unit_bytes = kUnitBytes;
  args.vector_bytes = VectorBytesFor(align_bits);
  return args;
}

// The SM paths' pair table of `num_pairs` entries, from the device's descriptor pool, into
// j->buffer. Sets *no_room, with nothing taken, when the pool has no room.
absl::Status AcquirePairTable(Device* device, uint64_t num_pairs, PendingJob* j, bool* no_room) {
  absl::StatusOr<Device::Buffer> buffer = device->AcquireBuffer(num_pairs * sizeof(PagePair));
  *no_room = absl::IsResourceExhausted(buffer.status());
  if (*no_room) return absl::OkStatus();
  RETURN_IF_ERROR(buffer.status());
  j->buffer = *buffer;
  return absl::OkStatus();
}

// Uploads the pair table filled in j.buffer.host on `stream`.
absl::Status UploadPairTable(Device* device, const PendingJob& j, uint64_t num_pairs,
                             cudaStream_t stream) {
  return device->Check(cudaMemcpyAsync(j.buffer.device, j.buffer.host,
                                       num_pairs * sizeof(PagePair), cudaMemcpyHostToDevice,
                                       stream),
                       "uploading the descriptor table");
}

CopyKernelConfig KernelConfig(int sms) {
  CopyKernelConfig config;  // 512 threads, unroll 8
  config.max_blocks = sms;
  return config;
}

}  // namespace

// Copy engines only: every merged segment is one DMA (batched), every stretch of consecutive
// blocks one 2D DMA per tensor (per registration chunk). No SM.
absl::Status EnqueueCopyEngine(const PreparedJob& job, PendingJob* j,
                               const EnqueueOptions& options) {
  CudaWorkerMemory* m = job.memory;
  Device* device = m->device();
  const bool store = job.direction == CopyDirection::kStore;
  Lane& lane = m->lane(job.direction);
  absl::MutexLock lock(&lane.mu);
  uint8_t* base = job.region->base();
  const uint64_t chunk_bytes = job.region->chunk_bytes();
  // One share: the job's blocks [begin, end), visited and issued on `stream` by whichever thread
  // runs it, so each share's first copies start while the rest of it is still being visited.
  struct Share {
    uint64_t begin = 0, end = 0;
    cudaStream_t stream = nullptr;
    absl::Status status;
    uint64_t copies = 0, batches = 0;
    int64_t first = 0;
  };
  auto issue = [&](Share& share) {
    CopyBatcher batcher(options.max_batch_copies, share.stream, options.batch_unsupported,
                        options.first_batch_copies, options.batch_overlap_hint);
    uint64_t strided_calls = 0;
    VisitStridedSegments(
        job.table, share.begin, share.end, m->tensors(), options.strided_min_rows,
        [&](const StridedSegment& seg) {
          if (!share.status.ok()) return;
          share.status =
              seg.rows == 1
                  ? AddRegionCopy(batcher, store, base, chunk_bytes, seg.host_offset,
                                  reinterpret_cast<uint8_t*>(seg.gpu_address), seg.bytes)
                  : AddRegionCopy2D(batcher, device, share.stream, store, base, chunk_bytes, seg,
                                    &strided_calls);
        });
    if (share.status.ok()) share.status = batcher.Flush();
    share.first = batcher.first_flush_returned();
    share.copies = batcher.copies() + strided_calls;
    share.batches = batcher.batches();
  };
  // Shares of equal blocks: where a job is worth splitting, its blocks are random, so copies
  // spread evenly (a stretch cut at a share's edge is two 2D copies instead of one).
  const size_t helpers = options.issue_pool == nullptr
                             ? 0
                             : std::min({lane.issue.size(), lane.issued.size(),
                                         options.issue_pool->threads()});
  // At most a share per block: a job of few blocks and many tensors has nothing to split.
  const size_t k = helpers == 0 ? 1
                                : IssueShares(job.estimated_copies,
                                              std::min<uint64_t>(helpers + 1, job.table.num_blocks),
                                              options.parallel_issue_min_copies);
  std::vector<Share> shares(k);
  for (size_t i = 0; i < k; ++i) {
    shares[i].begin = job.table.num_blocks * i / k;
    shares[i].end = job.table.num_blocks * (i + 1) / k;
    shares[i].stream = i == 0 ? lane.dma : lane.issue[i - 1];
  }
  if (k == 1) {
    issue(shares[0]);
  } else {
    const int ordinal = device->ordinal();
    std::vector<std::function<void()>> tasks;
    for (size_t i = 0; i < k; ++i) {
      tasks.push_back([&, i, ordinal] {
        Share& share = shares[i];
        if (i > 0) share.status = device->Check(cudaSetDevice(ordinal), "cudaSetDevice");
        if (share.status.ok()) issue(share);
      });
    }
    options.issue_pool->Run(std::move(tasks));
    // Join every other stream into `dma`, where the completion is recorded: the job is reported
    // only once all of its shares ended. A join that cannot be made waits for its stream here.
    for (size_t i = 1; i < k; ++i) {
      cudaEvent_t joined = lane.issued[i - 1];
      if (cudaEventRecord(joined, shares[i].stream) != cudaSuccess ||
          cudaStreamWaitEvent(lane.dma, joined, 0) != cudaSuccess) {
        cudaGetLastError();
        absl::Status synced = device->Check(cudaStreamSynchronize(shares[i].stream),
                                            "cudaStreamSynchronize (an issuing stream)");
        if (shares[i].status.ok()) shares[i].status = std::move(synced);
      }
    }
  }
  absl::Status status;
  for (const Share& share : shares) {
    if (status.ok() && !share.status.ok()) status = share.status;
    if (share.first != 0 && (j->times.first == 0 || share.first < j->times.first)) {
      j->times.first = share.first;
    }
    j->times.copies += share.copies;
    j->times.batches += share.batches;
  }
  EndJob(job, device, lane.dma, nullptr, false, j, &status);
  return status;
}

// Staged: per chunk, a short gather (store) or scatter (load) launch on copy_sms SMs between
// the worker's pages and staging buffer b, and the copy engines between b and the region.
// Buffers rotate over jobs; `filled`/`drained` events order each buffer's writer and reader.
// Sets *no_room, with nothing enqueued, when the lane has no staging and the device's staging
// limit leaves no room for it, or the descriptor pool none for the job's table.
absl::Status EnqueueStaged(const PreparedJob& job, PendingJob* j, const EnqueueOptions& options,
                           bool* no_room) {
  CudaWorkerMemory* m = job.memory;
  Device* device = m->device();
  const bool store = job.direction == CopyDirection::kStore;
  Lane& lane = m->lane(job.direction);
  const uint64_t num_pairs = job.blocks.size();
  const uint64_t bpb = job.table.bytes_per_block;
  absl::MutexLock lock(&lane.mu);
  absl::Status staging =
      m->EnsureStaging(lane, options.staging_chunk_bytes);
  if (absl::IsResourceExhausted(staging)) {
    *no_room = true;
    return absl::OkStatus();
  }
  RETURN_IF_ERROR(staging);
  RETURN_IF_ERROR(AcquirePairTable(device, num_pairs, j, no_room));
  if (*no_room) return absl::OkStatus();
  const uint32_t n = lane.num_staging;
  const uint64_t first = lane.next_staging;
  lane.next_staging += job.staged.chunks.size();
  // The pair table: each block's page address in its chunk's staging buffer.
  auto* pairs = reinterpret_cast<PagePair*>(j->buffer.host);
  uint64_t align_bits = m->align_bits() | bpb;
  for (const StagedChunk& c : job.staged.chunks) {
    const uint64_t staging =
        reinterpret_cast<uint64_t>(lane.staging[(c.buffer + first) % n]);
    align_bits |= staging;
    for (size_t i = c.block_begin; i < c.block_end; ++i) {
      pairs[i] = PagePair{job.blocks[i].gpu_block, staging + (i - c.block_begin) * bpb};
    }
  }
  absl::Status status = UploadPairTable(device, *j, num_pairs, lane.kernel);
  uint8_t* base = job.region->base();
  const CopyKernelConfig config = KernelConfig(options.copy_sms);
  for (const StagedChunk& c : job.staged.chunks) {
    if (!status.ok()) break;
    const uint32_t b = (c.buffer + first) % n;
    uint8_t* staging = lane.staging[b];
    auto dma = [&]() -> absl::Status {
      CopyBatcher batcher(kMaxCopiesPerBatch, lane.dma, options.batch_unsupported);
      for (size_t k = c.copy_begin; k < c.copy_end; ++k) {
        const StagedCopy& copy = job.staged.copies[k];
        RETURN_IF_ERROR(AddRegionCopy(batcher, store, base, job.region->chunk_bytes(),
                                      copy.host_offset, staging + copy.staging_offset,
                                      copy.bytes));
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
  EndJob(job, device, last, other, /*join_other=*/!status.ok(), j, &status);
  return status;
}

// Kernel path: one launch on kKernelSms SMs reads (store) or writes (load) the mapped region
// directly. Only for host runs too short for the copy engines. Sets *no_room, with nothing
// enqueued, when the descriptor pool has no room for the job's table.
absl::Status EnqueueKernel(const PreparedJob& job, PendingJob* j, const EnqueueOptions& options,
                           bool* no_room) {
  CudaWorkerMemory* m = job.memory;
  Device* device = m->device();
  const bool store = job.direction == CopyDirection::kStore;
  Lane& lane = m->lane(job.direction);
  const uint64_t num_pairs = job.blocks.size();
  ASSIGN_OR_RETURN(const std::atomic<uint64_t>* chunks,
                   job.region->DevicePointers(device->ordinal()));
  RETURN_IF_ERROR(AcquirePairTable(device, num_pairs, j, no_room));
  if (*no_room) return absl::OkStatus();
  auto* pairs = reinterpret_cast<PagePair*>(j->buffer.host);
  const uint64_t chunk_bytes = job.region->chunk_bytes();
  uint64_t align_bits = m->align_bits();
  for (uint64_t i = 0; i < num_pairs; ++i) {
    const BlockDescriptor& d = job.blocks[i];
    const uint64_t host =
        chunks[d.host_offset / chunk_bytes].load(std::memory_order_acquire) +
        d.host_offset % chunk_bytes;
    pairs[i] = PagePair{d.gpu_block, host};
    align_bits |= host;
  }
  absl::MutexLock lock(&lane.mu);
  absl::Status status = UploadPairTable(device, *j, num_pairs, lane.kernel);
  if (status.ok()) {
    CopyPagesArgs args = KernelArgs(store, *m, j->buffer, 0, num_pairs, align_bits);
    status = device->Check(LaunchCopyPages(args, KernelConfig(kKernelSms), lane.kernel),
                           store ? "gather kernel launch" : "scatter kernel launch");
  }
  EndJob(job, device, lane.kernel, nullptr, false, j, &status);
  return status;
}

}  // namespace kvoffload::daemon::cuda
