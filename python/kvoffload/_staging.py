"""The worker-side mechanics of kvoffload.StagedWorker (staged.py): a job's blocks as word views
of the KV tensors in row layout (_BlockLayout), the side streams and events that order the
gathers and scatters against the caller's stream and the daemon's DMA (_CudaStreams,
_HostStreams), and CUDA graphs of a full chunk's gather and scatter (_ChunkGraphs).

Thread-safety: none of their own; StagedWorker calls them holding its lock.
"""

import collections
import logging
import math

from ._common import KvoffloadError, StatusCode
from .tensors import _views_of_tensor, _tensors_of, merge_adjacent

logger = logging.getLogger("kvoffload")


def _torch():
    import torch  # only a StagedWorker needs it
    return torch


def _invalid(message):
    return KvoffloadError(StatusCode.INVALID_ARGUMENT, "StagedWorker: " + message)


class _Source(collections.namedtuple("_Source", ["view", "offset", "width"])):
    """One strided part of every block: view[b] (shape [k, page / word]) is block b's bytes of
    this part, at `offset` words of a staging block, `width` words long."""


def _word_bytes(*values):
    """The widest integer word (8, 4, 2, 1 bytes) that divides every value: gathers of int64
    words are ~8x fewer elements than of bytes."""
    g = 0
    for v in values:
        g = math.gcd(g, int(v))
    for w in (8, 4, 2, 1):
        if g % w == 0:
            return w
    return 1


class _BlockLayout:
    """The KV tensors' blocks as word views, and the row layout of a block: the pages of
    kv_tensor_views(tensors) in order (what a plain Worker registers)."""

    def __init__(self, kv_caches, num_blocks, block_dim):
        torch = _torch()
        tensors = _tensors_of(kv_caches)
        if not tensors:
            raise _invalid("no KV tensors")
        groups = []  # (u8 base tensor, base address, [views of one tensor])
        for t in tensors:
            views = _views_of_tensor(t, num_blocks, block_dim)
            if int(t.stride()[-1]) != 1 and int(t.shape[-1]) != 1:
                raise _invalid("a KV tensor's last dim must be contiguous (stride 1), got shape "
                               "%s strides %s" % (tuple(t.shape), tuple(t.stride())))
            u8 = t.view(torch.uint8) if t.element_size() != 1 else t
            base = int(u8.data_ptr()) - int(u8.storage_offset())
            groups.append((u8, base, views))
        all_views = [v for _, _, vs in groups for v in vs]
        self.num_blocks = all_views[0].num_blocks
        if any(v.num_blocks != self.num_blocks for v in all_views):
            raise _invalid("the tensors disagree on the number of blocks: %s" %
                           sorted({v.num_blocks for v in all_views}))
        self.pages = [v.page_bytes for v in merge_adjacent(all_views)]
        self.block_bytes = sum(self.pages)
        self.device = tensors[0].device
        if any(t.device != self.device for t in tensors):
            raise _invalid("the KV tensors are on more than one device")
        values = [self.block_bytes]
        for u8, base, views in groups:
            values += [u8.storage_offset()] + [v.data_ptr - base for v in views]
            values += [v.page_bytes for v in views] + [v.block_stride_bytes for v in views]
        self.word = _word_bytes(*values)
        self.dtype = {8: torch.int64, 4: torch.int32, 2: torch.int16, 1: torch.uint8}[self.word]
        self.sources = []
        offset = 0
        for u8, base, views in groups:
            words = u8.view(self.dtype) if self.word != 1 else u8
            i = 0
            while i < len(views):
                # Views of one tensor with one page, stride and spacing (K and V of a layer) are
                # one [blocks, k, page] view: one kernel for all of them.
                j = i + 1
                delta = views[j].data_ptr - views[i].data_ptr if j < len(views) else 0
                while (j < len(views) and views[j].page_bytes == views[i].page_bytes and
                       views[j].block_stride_bytes == views[i].block_stride_bytes and
                       views[j].data_ptr - views[j - 1].data_ptr == delta and delta > 0):
                    j += 1
                v, k = views[i], j - i
                w = self.word
                view = words.as_strided(
                    (self.num_blocks, k, v.page_bytes // w),
                    (v.block_stride_bytes // w, max(delta, v.page_bytes) // w, 1),
                    (v.data_ptr - base) // w)
                self.sources.append(_Source(view, offset // w, k * v.page_bytes // w))
                offset += k * v.page_bytes
                i = j
        assert offset == self.block_bytes

    def gather(self, idx, out):
        """out [m, block words] = blocks idx, in row layout."""
        torch = _torch()
        m = int(idx.shape[0])
        parts = [s.view.index_select(0, idx).reshape(m, s.width) for s in self.sources]
        if len(parts) == 1:
            out.copy_(parts[0])
        else:
            torch.cat(parts, dim=1, out=out)

    def scatter(self, idx, src):
        """Blocks idx = src [m, block words]."""
        m = int(idx.shape[0])
        for s in self.sources:
            part = src[:, s.offset:s.offset + s.width].view(m, s.view.shape[1], s.view.shape[2])
            s.view.index_copy_(0, idx, part)


class _CudaStreams:
    """The side streams of a CUDA StagedWorker: one for the stores' gathers, one for the loads'
    scatters (a load's scatter never queues behind a gather waiting for the model's KV writes).
    Work on one staging buffer is ordered across the two by an event per buffer."""
    events = True

    def __init__(self, device, buffers):
        torch = _torch()
        self.torch, self.device = torch, device
        self.streams = {d: torch.cuda.Stream(device=device) for d in ("store", "load")}
        self.last = [None] * buffers  # per buffer: after our last GPU op on it

    def mark(self, stream):
        """An event after the work queued so far on the caller's stream (None: torch's current)."""
        torch = self.torch
        if stream is None:
            stream = torch.cuda.current_stream(self.device)
        elif isinstance(stream, int):
            stream = torch.cuda.ExternalStream(stream, device=self.device)
        event = torch.cuda.Event()
        event.record(stream)
        return event

    def follow(self, direction, event):
        self.streams[direction].wait_event(event)

    def begin(self, direction, slot):
        """Enters the direction's stream, after our last op on buffer `slot`."""
        stream = self.streams[direction]
        if self.last[slot] is not None:
            stream.wait_event(self.last[slot])
        return self.torch.cuda.stream(stream)

    def end(self, direction, slot, worker):
        """After our ops on buffer `slot`: its ordering event, and the worker's interprocess event
        `slot` that the daemon's next job on the buffer waits on."""
        stream = self.streams[direction]
        event = self.torch.cuda.Event()
        event.record(stream)
        self.last[slot] = event
        worker.record_event(slot, int(stream.cuda_stream))
        return event

    def host_index(self, blocks):
        """Block ids in pinned host memory (keep it until the copy that reads it has run)."""
        return self.torch.tensor(blocks, dtype=self.torch.int64).pin_memory()

    def index(self, direction, blocks):
        """Block ids on the device, copied on the direction's stream (no sync with the model's);
        the pinned host copy is returned to be kept until the ids are used."""
        host = self.host_index(blocks)
        with self.torch.cuda.stream(self.streams[direction]):
            return host.to(self.device, non_blocking=True), host

    def drain(self):
        for stream in self.streams.values():
            stream.synchronize()


class _HostStreams:
    """CPU tensors: every op is done when it returns; the daemon waits on no event."""
    events = False

    def mark(self, stream):
        return None

    def follow(self, direction, event):
        pass

    def begin(self, direction, slot):
        return _NoContext()

    def end(self, direction, slot, worker):
        return None

    def index(self, direction, blocks):
        return _torch().tensor(blocks, dtype=_torch().int64), None

    def drain(self):
        pass


class _NoContext:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


class _ChunkGraphs:
    """CUDA graphs of a full chunk's gather (store) and scatter (load), one per staging buffer
    and direction, over a static index buffer each. Eagerly a chunk is an index_select per KV
    tensor and a cat (a scatter: an index_copy_ per tensor), ~10 µs of Python and a launch each:
    with 32 layers that bounded the chunk rate below the link's (copy path v3). A replay is one
    launch. Partial chunks (a job's last) stay eager.

    Each direction's graphs share one memory pool (about a chunk of index_select scratch for the
    gathers): they are replayed only on that direction's stream, one after another, and keep
    nothing in the pool between replays (they write into the staging buffer and the KV
    tensors)."""

    def __init__(self, layout, staging, chunk_blocks, buffers, streams):
        torch = _torch()
        self.chunk_blocks = chunk_blocks
        self.replays = 0  # full chunks that went through a graph (tests and benchmarks read it)
        self.idx = {d: [torch.zeros(chunk_blocks, dtype=torch.int64, device=staging.device)
                        for _ in range(buffers)] for d in ("store", "load")}
        # The gather once, op by op, before any capture: an op that cannot be captured (one
        # that synchronizes) fails here, where nothing is left half-done. It writes only
        # staging; a scatter would write KV blocks, so it is not tried.
        with torch.cuda.stream(streams.streams["store"]):
            layout.gather(self.idx["store"][0], staging[:chunk_blocks])
        torch.cuda.synchronize(staging.device)
        self.graphs = {}
        for direction, op in (("store", layout.gather), ("load", layout.scatter)):
            graphs, pool = [], None
            for slot in range(buffers):
                g = torch.cuda.CUDAGraph()
                _capture(torch, g, pool, streams.streams[direction], lambda: op(
                    self.idx[direction][slot], staging[slot * chunk_blocks:
                                                       (slot + 1) * chunk_blocks]))
                pool = g.pool()
                graphs.append(g)
            self.graphs[direction] = graphs

    @classmethod
    def build(cls, layout, staging, chunk_blocks, buffers, streams):
        """The graphs, or None (logged) where this torch or device cannot capture them: the
        chunks then run eagerly, as before."""
        try:
            return cls(layout, staging, chunk_blocks, buffers, streams)
        except Exception as e:  # noqa: BLE001 — an optimisation, never a reason to fail
            logger.error("kvoffload.StagedWorker: no CUDA graphs for its chunks (%s: %s); "
                         "gathers and scatters run op by op", type(e).__name__, e)
            return None

    def run(self, direction, slot, host_index):
        """Replays the chunk op of buffer `slot` for the ids in pinned `host_index`, on the
        current stream (the direction's, entered by the caller)."""
        self.idx[direction][slot].copy_(host_index, non_blocking=True)
        self.graphs[direction][slot].replay()
        self.replays += 1


def _capture(torch, graph, pool, stream, body):
    """Captures body() on `stream` into `graph`, only this thread's work where torch allows it
    (another thread of the model's process may use CUDA meanwhile). Unlike torch.cuda.graph's
    context, a failure ends the capture and gives the caller's current stream back (the stream
    context's exit runs in any case), so the model's thread is not left on our side stream."""
    with torch.cuda.stream(stream):
        try:
            graph.capture_begin(pool=pool, capture_error_mode="thread_local")
        except TypeError:  # torch < 2.1
            graph.capture_begin(pool=pool)
        try:
            body()
        finally:
            graph.capture_end()
