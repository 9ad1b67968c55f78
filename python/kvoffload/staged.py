"""kvoffload.StagedWorker: the opt-in worker-side reorder, for KV layouts whose blocks the daemon
can only move page by page (copy path v3).

Why: vLLM's per-layer caches keep a block's K and V pages of every layer in separate tensors, so
a block is 2 × layers pages apart on the GPU, and random blocks reach the daemon's copy engines
as one DMA per page (4-64 KiB pages: 5-44 GB/s on the H200, against ~55 for the link). The
daemon cannot gather them with SMs without taking the model a time slice (no MPS: copy path v3). The
worker can, on a stream of its own process. A StagedWorker registers with the daemon not the KV
caches but a staging buffer, laid out as the daemon lays out a row (a block's pages back to
back, in registration order), and moves each job through it in chunks of `chunk_rows` rows:

  store  a side stream waits for the caller's stream (the KV writes), gathers the chunk's blocks
         from every tensor into a free staging buffer (an index_select per tensor, one cat),
         records the buffer's event; a daemon store job of consecutive staging blocks into the
         chunk's rows waits on that event: one DMA per row, no kernel in the daemon;
  load   a daemon load job of the chunk's rows into a free staging buffer; after its verdict
         the side stream (having waited for the caller's stream: the blocks are free) scatters
         the buffer into the blocks (index_copy_). The job's verdict comes once its scatters
         have run.
`buffers` staging buffers (4 by default) keep up to that many chunks in flight, so gathers,
scatters and DMA overlap, and the daemon has more than one job to keep the link busy. A full
chunk's gather or scatter is one CUDA graph replay (_staging._ChunkGraphs); a job's last, partial
chunk runs op by op.

Rows hold the same bytes as the rows a Worker registered with the same tensors stores: the
staging registers the same per-tensor pages (the engine's layout identity), in the same order.
Staged and plain workers read each other's rows, and the rows survive a daemon restart.

Job ids: a job becomes one daemon job per chunk, id (job_id << 16) | chunk; so job ids are below
2**48 and a job has at most 65,536 chunks. Every local worker of an engine must be a StagedWorker
with the same chunk_rows: the daemon votes on each chunk job.

The KV tensors are torch tensors (anything kvoffload.kv_tensor_views takes, with each tensor's
last dim contiguous); connect_cuda registers a CUDA staging buffer, connect_host a memfd one for
a daemon on --backend=host (CPU tensors: tests and demos).

Thread-safety: submit_*, poll, wait may be called from any thread; close() must not race them.
One driver thread per StagedWorker collects verdicts and runs the loads' scatters. Ownership:
the StagedWorker owns its Worker, staging buffer and thread; the caller keeps the KV tensors
alive until close().
"""

import array
import collections
import threading
from typing import List, Optional

from ._common import FinishedJob, KvoffloadError, StatusCode
from ._staging import (_BlockLayout, _ChunkGraphs, _CudaStreams, _HostStreams, _invalid,
                       _torch)
from .host import HostAllocation
from .worker import Worker

CHUNK_BITS = 16
MAX_JOB_ID = (1 << (64 - CHUNK_BITS)) - 1
DEFAULT_STAGING_BYTES = 128 << 20
DEFAULT_BUFFERS = 4


class _Job:
    def __init__(self, job_id, direction, blocks, rows, ready, region_epoch, chunk_rows, bpr):
        self.id, self.direction, self.blocks, self.rows = job_id, direction, blocks, rows
        self.ready, self.region_epoch, self.bpr = ready, region_epoch, bpr
        self.chunks = [(r0, min(len(rows), r0 + chunk_rows))
                       for r0 in range(0, len(rows), chunk_rows)]
        self.next_chunk = 0   # the next chunk to start
        self.open_chunks = 0  # started, verdict not yet handled
        self.followed = False
        self.scattered = None  # an event after its last scatter
        self.code, self.message, self.bytes = 0, "", 0

    def fail(self, code, message):
        if self.code == 0:  # the first failure is the job's
            self.code, self.message = int(code), message

    def over(self):
        return self.open_chunks == 0 and self.next_chunk == len(self.chunks)


class _Chunk:
    def __init__(self, job, index, slot):
        self.job, self.index, self.slot = job, index, slot
        self.daemon_id = (job.id << CHUNK_BITS) | index
        r0, r1 = job.chunks[index]
        self.rows = job.rows[r0:r1]
        self.blocks = job.blocks[r0 * job.bpr:r1 * job.bpr]
        self.idx = None
        self.keep = None  # the ids' pinned host copy, alive until the chunk ends


class StagedWorker:
    """A GPU worker's session whose jobs go through worker-owned staging (module docstring)."""

    def __init__(self, worker, layout, streams, staging, chunk_rows, buffers, keep=None,
                 graphs=None):
        self.worker = worker
        self.info = worker.info
        self.chunk_rows = chunk_rows
        self.buffers = buffers
        self.num_blocks = layout.num_blocks
        self._layout, self._streams = layout, streams
        self._staging, self._keep = staging, keep
        self._graphs = graphs  # _ChunkGraphs of full chunks, or None: every chunk op by op
        self._bpr = worker.info.blocks_per_row
        self._chunk_blocks = chunk_rows * self._bpr
        self._cv = threading.Condition()
        self._queue = collections.deque()     # jobs with chunks not yet started, in order
        self._inflight = collections.deque()  # started chunks, oldest first
        self._busy = [False] * buffers        # a started chunk holds the buffer
        self._jobs = {}                       # job id -> _Job until its verdict is taken
        self._done = collections.OrderedDict()  # job id -> FinishedJob, not yet taken
        self._closing = False
        self._closed = False
        self._thread = threading.Thread(target=self._run, name="kvoffload-staged", daemon=True)
        self._thread.start()

    # ----- construction -----
    @staticmethod
    def _chunking(layout, staging_bytes, buffers, blocks_per_row):
        """(chunk_rows, staging blocks) for the staging size."""
        if int(buffers) < 1:
            raise ValueError("buffers must be >= 1, got %r" % (buffers,))
        row_bytes = layout.block_bytes * blocks_per_row
        chunk_rows = int(staging_bytes) // (int(buffers) * row_bytes)
        if chunk_rows < 1:
            raise ValueError("staging_bytes=%d holds no row in each of %d buffers (a row is %d "
                             "bytes of this worker)" % (staging_bytes, buffers, row_bytes))
        return chunk_rows, chunk_rows * blocks_per_row * int(buffers)

    @staticmethod
    def _blocks_per_row(spec):
        bpr = int(spec.blocks_per_row)
        if bpr < 1:
            raise ValueError("spec.blocks_per_row must be >= 1, got %d" % bpr)
        return bpr

    @classmethod
    def connect_cuda(cls, socket_path, spec, mp_rank, kv_caches, num_blocks=None, block_dim=None,
                     staging_bytes=DEFAULT_STAGING_BYTES, buffers=DEFAULT_BUFFERS,
                     cuda_graphs=True, **connect_kw) -> "StagedWorker":
        """Like Worker.connect_cuda (connect_kw: open_timeout_s, call_timeout_s, reconnect), with
        staging_bytes of staging on the tensors' device, split into `buffers` buffers.
        cuda_graphs: a full chunk's gather or scatter is one CUDA graph replay (captured here,
        after one eager gather and a device synchronize) instead of an op per KV tensor."""
        torch = _torch()
        layout = _BlockLayout(kv_caches, num_blocks, block_dim)
        if layout.device.type != "cuda":
            raise _invalid("connect_cuda needs CUDA tensors (connect_host takes CPU ones)")
        device = layout.device if layout.device.index is not None else torch.device(
            "cuda", torch.cuda.current_device())
        bpr = cls._blocks_per_row(spec)
        chunk_rows, staging_blocks = cls._chunking(layout, staging_bytes, buffers, bpr)
        staging = torch.empty((staging_blocks, layout.block_bytes // layout.word),
                              dtype=layout.dtype, device=device)
        descriptors, offset = [], 0
        for page in layout.pages:  # the plain Worker's pages, back to back in a staging block
            descriptors.append((int(staging.data_ptr()) + offset, staging_blocks,
                                layout.block_bytes, page))
            offset += page
        worker = Worker.connect_cuda(socket_path, spec, mp_rank, descriptors,
                                     device=device.index, num_events=int(buffers), **connect_kw)
        streams = _CudaStreams(device, int(buffers))
        graphs = (_ChunkGraphs.build(layout, staging, chunk_rows * bpr, int(buffers), streams)
                  if cuda_graphs else None)
        return cls._made(worker, bpr, layout, streams, staging, chunk_rows, int(buffers), None,
                         graphs)

    @classmethod
    def connect_host(cls, socket_path, spec, mp_rank, kv_caches, num_blocks=None, block_dim=None,
                     staging_bytes=DEFAULT_STAGING_BYTES, buffers=DEFAULT_BUFFERS,
                     **connect_kw) -> "StagedWorker":
        """For a daemon on --backend=host: CPU KV tensors, staging in a memfd of this process."""
        torch = _torch()
        layout = _BlockLayout(kv_caches, num_blocks, block_dim)
        if layout.device.type != "cpu":
            raise _invalid("connect_host needs CPU tensors")
        bpr = cls._blocks_per_row(spec)
        chunk_rows, staging_blocks = cls._chunking(layout, staging_bytes, buffers, bpr)
        mem = HostAllocation(staging_blocks * layout.block_bytes, name="kvo-staging")
        try:
            staging = torch.frombuffer(mem.buf, dtype=layout.dtype).view(staging_blocks, -1)
            tensors, offset = [], 0
            for page in layout.pages:
                tensors.append(mem.tensor(offset, staging_blocks, layout.block_bytes, page))
                offset += page
            worker = Worker.connect_host(socket_path, spec, mp_rank, tensors, **connect_kw)
        except BaseException:
            mem.close()
            raise
        return cls._made(worker, bpr, layout, _HostStreams(), staging, chunk_rows, int(buffers),
                         mem)

    @classmethod
    def _made(cls, worker, bpr, layout, streams, staging, chunk_rows, buffers, keep,
              graphs=None):
        if worker.info.blocks_per_row != bpr:  # the staging was sized by the spec's
            worker.close()
            if keep is not None:
                keep.close()
            raise _invalid("the engine has %d blocks per row, the spec says %d" %
                           (worker.info.blocks_per_row, bpr))
        return cls(worker, layout, streams, staging, chunk_rows, buffers, keep, graphs)

    # ----- jobs -----
    def submit_store(self, job_id: int, gpu_blocks, rows, stream=None,
                     region_epoch: int = 0) -> None:
        """Stores blocks gpu_blocks (len(rows) x blocks_per_row) into rows, once the work queued
        so far on `stream` (the KV writes; None = torch's current stream) has run. The verdict
        comes from poll/wait."""
        self._submit("store", job_id, gpu_blocks, rows, stream, region_epoch)

    def submit_load(self, job_id: int, gpu_blocks, rows, stream=None,
                    region_epoch: int = 0) -> None:
        """Loads rows into blocks gpu_blocks, written after the work queued so far on `stream`
        has run; the blocks hold the rows' bytes once the verdict (poll/wait) is OK. A failed
        chunk's blocks are left as they were."""
        self._submit("load", job_id, gpu_blocks, rows, stream, region_epoch)

    def _submit(self, direction, job_id, gpu_blocks, rows, stream, region_epoch):
        job_id = int(job_id)
        if not 0 <= job_id <= MAX_JOB_ID:
            raise _invalid("job ids go up to 2**48 - 1 (the chunk number takes the low 16 "
                           "bits of the daemon's job id), got %d" % job_id)
        blocks = [int(b) for b in gpu_blocks]
        rows = [int(r) for r in rows]
        if not rows:
            raise _invalid("job %d has no rows" % job_id)
        if len(blocks) != len(rows) * self._bpr:
            raise _invalid("job %d: %d GPU blocks for %d rows of %d blocks" %
                           (job_id, len(blocks), len(rows), self._bpr))
        bad = [b for b in blocks if not 0 <= b < self.num_blocks]
        if bad:
            raise _invalid("job %d: GPU block %d outside the worker's %d blocks" %
                           (job_id, bad[0], self.num_blocks))
        if any(not 0 <= r < 1 << 64 for r in rows):
            raise _invalid("job %d: rows are unsigned 64-bit numbers" % job_id)
        if -(-len(rows) // self.chunk_rows) > 1 << CHUNK_BITS:
            raise _invalid("job %d needs more than %d chunks of %d rows" %
                           (job_id, 1 << CHUNK_BITS, self.chunk_rows))
        ready = self._streams.mark(stream)
        job = _Job(job_id, direction, blocks, rows, ready, int(region_epoch), self.chunk_rows,
                   self._bpr)
        with self._cv:
            if self._closing:
                raise KvoffloadError(StatusCode.FAILED_PRECONDITION, "StagedWorker: closed")
            if job_id in self._jobs:
                raise KvoffloadError(StatusCode.ALREADY_EXISTS,
                                     "StagedWorker: job %d is in flight or its verdict was not "
                                     "taken yet" % job_id)
            self._jobs[job_id] = job
            self._queue.append(job)
            self._start_chunks()  # the first gathers are launched from the caller's thread
            self._cv.notify_all()

    def _start_chunks(self):
        """Starts queued chunks while a staging buffer is free (holding _cv)."""
        while self._queue and not all(self._busy):
            job = self._queue[0]
            chunk = _Chunk(job, job.next_chunk, self._busy.index(False))
            job.next_chunk += 1
            job.open_chunks += 1
            if job.next_chunk == len(job.chunks):
                self._queue.popleft()
            self._busy[chunk.slot] = True
            try:
                self._start(chunk)
            except Exception as e:  # noqa: BLE001 — refused at once: no daemon job to wait for
                code, message = ((e.code, e.message) if isinstance(e, KvoffloadError) else
                                 (StatusCode.INTERNAL, "%s: %s" % (type(e).__name__, e)))
                job.fail(code, "chunk %d (daemon job %d): %s" %
                         (chunk.index, chunk.daemon_id, message))
                self._end_chunk(chunk)
                continue
            self._inflight.append(chunk)

    @property
    def uses_cuda_graphs(self) -> bool:
        """Whether full chunks are CUDA graph replays (connect_cuda's cuda_graphs, and captured)."""
        return self._graphs is not None

    @property
    def graph_replays(self) -> int:
        """Full chunks moved by a CUDA graph replay so far."""
        graphs = self._graphs
        return graphs.replays if graphs is not None else 0

    def _graphed(self, chunk):
        return self._graphs is not None and len(chunk.blocks) == self._graphs.chunk_blocks

    def _staging_rows(self, chunk):
        s0 = chunk.slot * self._chunk_blocks
        return s0, s0 + len(chunk.blocks)

    def _start(self, chunk):
        job, streams = chunk.job, self._streams
        s0, s1 = self._staging_rows(chunk)
        staging_blocks = array.array("Q", range(s0, s1))
        if not job.followed:
            if job.ready is not None:  # the caller's KV writes (store) / use of the blocks (load)
                streams.follow(job.direction, job.ready)
            job.followed = True
        if self._graphed(chunk):  # the ids go to the graph's buffer when it runs
            chunk.keep = streams.host_index(chunk.blocks)
        else:
            chunk.idx, chunk.keep = streams.index(job.direction, chunk.blocks)
        used = streams.events and streams.last[chunk.slot] is not None
        if job.direction == "store":
            with streams.begin("store", chunk.slot):
                if chunk.idx is None:
                    self._graphs.run("store", chunk.slot, chunk.keep)
                else:
                    self._layout.gather(chunk.idx, self._staging[s0:s1])
            streams.end("store", chunk.slot, self.worker)
            self.worker.submit_store(chunk.daemon_id, staging_blocks, chunk.rows,
                                     event_index=chunk.slot if streams.events else -1,
                                     region_epoch=job.region_epoch)
        else:
            # The DMA into the buffer waits for our last gather or scatter on it.
            self.worker.submit_load(chunk.daemon_id, staging_blocks, chunk.rows,
                                    event_index=chunk.slot if used else -1,
                                    region_epoch=job.region_epoch)

    def _finish(self, chunk, verdict):
        """After a started chunk's daemon verdict (holding _cv)."""
        job = chunk.job
        if not verdict.ok:
            job.fail(verdict.code, "chunk %d (daemon job %d): %s" %
                     (chunk.index, chunk.daemon_id, verdict.message))
        else:
            job.bytes += verdict.bytes
            if job.direction == "load":
                s0, s1 = self._staging_rows(chunk)
                with self._streams.begin("load", chunk.slot):
                    if chunk.idx is None:
                        self._graphs.run("load", chunk.slot, chunk.keep)
                    else:
                        self._layout.scatter(chunk.idx, self._staging[s0:s1])
                job.scattered = self._streams.end("load", chunk.slot, self.worker)
        self._end_chunk(chunk)

    def _end_chunk(self, chunk):
        self._busy[chunk.slot] = False
        chunk.job.open_chunks -= 1
        self._publish_if_over(chunk.job)

    def _publish_if_over(self, job):
        if not job.over():
            return
        if job.scattered is not None:
            # Scatters run in order on one stream: after the last, the blocks hold their bytes.
            try:
                job.scattered.synchronize()
            except Exception as e:  # noqa: BLE001 — a failed device: the job failed
                job.fail(StatusCode.INTERNAL, "waiting for the scatters: %s" % e)
        self._done[job.id] = FinishedJob(job_id=job.id, ok=job.code == 0, code=job.code,
                                         message=job.message, bytes=job.bytes)
        self._cv.notify_all()

    def _run(self):
        while True:
            with self._cv:
                while not self._inflight and not self._closing:
                    self._cv.wait()
                if not self._inflight:
                    return  # closing, and nothing is left in flight
                chunk = self._inflight[0]
            try:
                verdict = self.worker.wait(chunk.daemon_id)
            except KvoffloadError as e:  # the session ended: its error is the chunk's verdict
                verdict = FinishedJob(job_id=chunk.daemon_id, ok=False, code=e.code,
                                      message=e.message, bytes=0)
            with self._cv:
                self._inflight.popleft()
                try:
                    self._finish(chunk, verdict)
                except Exception as e:  # noqa: BLE001 — a scatter that raised fails its job only
                    chunk.job.fail(StatusCode.INTERNAL, "scatter of chunk %d: %s" %
                                   (chunk.index, e))
                    if self._busy[chunk.slot]:
                        self._end_chunk(chunk)
                if self._closing:
                    self._cancel_queued()
                else:
                    self._start_chunks()

    def _cancel_queued(self):
        """Fails what has not started (holding _cv): the session is closing."""
        while self._queue:
            job = self._queue.popleft()
            job.fail(StatusCode.CANCELLED, "the StagedWorker was closed before chunk %d of %d "
                     "started" % (job.next_chunk, len(job.chunks)))
            job.next_chunk = len(job.chunks)
            self._publish_if_over(job)

    # ----- verdicts -----
    def _take(self, job_id):
        self._jobs.pop(job_id, None)
        return self._done.pop(job_id)

    def poll(self) -> List[FinishedJob]:
        """Every job finished since the last poll (non-blocking)."""
        with self._cv:
            return [self._take(job_id) for job_id in list(self._done)]

    def wait(self, job_id: int, timeout_s: Optional[float] = None) -> FinishedJob:
        """One job's verdict. KvoffloadError DEADLINE_EXCEEDED after timeout_s (None: no bound;
        the daemon answers every chunk), NOT_FOUND for a job not in flight."""
        with self._cv:
            if job_id not in self._jobs:
                raise KvoffloadError(StatusCode.NOT_FOUND,
                                     "StagedWorker: job %d is not in flight" % job_id)
            if not self._cv.wait_for(lambda: job_id in self._done, timeout_s):
                raise KvoffloadError(StatusCode.DEADLINE_EXCEEDED,
                                     "StagedWorker: job %d not finished within %s s" %
                                     (job_id, timeout_s))
            return self._take(job_id)

    def close(self) -> None:
        """Chunks in flight end (their jobs' verdicts stay readable by poll); jobs with chunks not
        started fail CANCELLED; then the session and the staging go. Idempotent."""
        with self._cv:
            if self._closed:
                return
            self._closed = True
            self._closing = True
            self._cancel_queued()
            self._cv.notify_all()
        self._thread.join()
        self._streams.drain()
        self.worker.close()
        self._staging = None
        self._graphs = None
        if self._keep is not None:
            self._keep.close()
            self._keep = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False
