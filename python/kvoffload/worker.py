"""kvoffload.Worker: a GPU worker's session with kvoffloadd, over the C ABI (see
kvoffload.client for deadlines, restarts and thread-safety)."""

import array
import ctypes
import sys
from typing import List, Optional, Sequence, Union

from . import _native
from ._common import (Direction, FinishedJob, KvoffloadError, SessionPhase, SessionState,
                      StatusCode, WorkerInfo, EngineSpec, _client_options, _err_buffer, _Handle,
                      _raise_for)
from .host import HostTensor
from .tensors import as_views


def _u64_array(values, what):
    """A ctypes uint64 array (zero-copy for array('Q')), plus its length."""
    if isinstance(values, array.array) and values.typecode == "Q":
        arr = values
    else:
        try:
            arr = array.array("Q", values)
        except (TypeError, OverflowError) as e:
            raise TypeError("%s must be non-negative integers below 2**64: %s" % (what, e)) from e
    n = len(arr)
    if n == 0:
        return None, 0
    return (ctypes.c_uint64 * n).from_buffer(arr), n


def _finished(c) -> FinishedJob:
    return FinishedJob(job_id=c.job_id, ok=c.code == 0, code=c.code,
                       message=c.message.decode("utf-8", "replace"), bytes=c.bytes,
                       reason=c.reason.decode("utf-8", "replace"))


def _stream_handle(stream) -> int:
    """cudaStream_t as an integer: an int, a torch.cuda.Stream (or anything with .cuda_stream),
    or None for torch's current stream (the legacy default stream 0 without torch)."""
    if stream is None:
        torch = sys.modules.get("torch")
        if torch is not None and torch.cuda.is_available():
            return int(torch.cuda.current_stream().cuda_stream)
        return 0
    if isinstance(stream, int):
        return stream
    if hasattr(stream, "cuda_stream"):
        return int(stream.cuda_stream)
    raise TypeError("stream must be an int (cudaStream_t), a torch.cuda.Stream or None, got %r" %
                    (stream,))


class Worker(_Handle):
    """A GPU worker's session with kvoffloadd (one per GPU rank).

    Create with Worker.connect_cuda (device tensors) or Worker.connect_host (shm tensors, for a
    daemon on --backend=host). close() (or the context manager) ends the session: the daemon
    fails this worker's unvoted jobs and releases its mappings.
    """

    def __init__(self, handle, lib):
        self._handle = handle
        self._lib = lib
        info = _native.c_worker_info()
        err = _err_buffer()
        _raise_for(lib.kvo_worker_info(handle, ctypes.byref(info), err, len(err)), err)
        self.info = WorkerInfo(
            slot=info.slot, writer=bool(info.writer), num_copies=info.num_copies,
            replicated=bool(info.replicated), row_bytes=info.row_bytes,
            slot_bytes=info.slot_bytes, num_rows=info.num_rows,
            blocks_per_row=info.blocks_per_row,
            worker_bytes_per_block=info.worker_bytes_per_block,
            capacity_bytes=info.capacity_bytes, session_id=info.session_id, device=info.device,
            num_events=info.num_events)

    @classmethod
    def connect_cuda(cls, socket_path: str, spec: EngineSpec, mp_rank: int, tensors,
                     device: Optional[int] = None, num_events: int = 8,
                     num_blocks: Optional[int] = None, open_timeout_s: Optional[float] = None,
                     call_timeout_s: Optional[float] = None, reconnect: bool = True) -> "Worker":
        """Registers CUDA KV tensors: torch tensors (see kv_tensor_views for the layout rules;
        num_blocks disambiguates the block dim), a dict of them, TensorViews or
        (data_ptr, num_blocks, block_stride_bytes, page_bytes) tuples. device None = the
        tensors' device. num_events: interprocess CUDA events for record_event / wait_event.
        open_timeout_s bounds connecting and registering, call_timeout_s each submit; reconnect:
        register again by itself after the daemon went away (module docstring)."""
        lib = _native.library()
        options = _client_options(open_timeout_s, call_timeout_s, reconnect)
        views = as_views(tensors, num_blocks=num_blocks)
        c_tensors = (_native.c_cuda_tensor * max(1, len(views)))()
        for i, v in enumerate(views):
            c_tensors[i] = _native.c_cuda_tensor(v.data_ptr, v.num_blocks, v.block_stride_bytes,
                                                 v.page_bytes)
        c_spec, keep = spec._to_c()
        handle = ctypes.c_void_p()
        err = _err_buffer()
        code = lib.kvo_worker_connect_cuda_options(
            socket_path.encode(), ctypes.byref(c_spec), mp_rank,
            -1 if device is None else int(device), c_tensors, len(views), num_events,
            ctypes.byref(options), ctypes.byref(handle), err, len(err))
        del keep
        _raise_for(code, err)
        return cls(handle, lib)

    @classmethod
    def connect_host(cls, socket_path: str, spec: EngineSpec, mp_rank: int,
                     tensors: Sequence[Union[HostTensor, tuple]],
                     open_timeout_s: Optional[float] = None,
                     call_timeout_s: Optional[float] = None, reconnect: bool = True) -> "Worker":
        """Registers host-backend tensors: HostTensor or (handle, allocation_bytes, offset,
        num_blocks, block_stride_bytes, page_bytes) tuples (see kvoffload.host). Deadlines and
        reconnect as for connect_cuda. The memfds must stay open while the worker lives (a
        session registered again names them again)."""
        lib = _native.library()
        options = _client_options(open_timeout_s, call_timeout_s, reconnect)
        tensors = [HostTensor(*t) for t in tensors]
        names = [t.handle.encode() for t in tensors]
        c_tensors = (_native.c_host_tensor * max(1, len(tensors)))()
        for i, t in enumerate(tensors):
            c_tensors[i] = _native.c_host_tensor(names[i], t.allocation_bytes, t.offset,
                                                 t.num_blocks, t.block_stride_bytes, t.page_bytes)
        c_spec, keep = spec._to_c()
        handle = ctypes.c_void_p()
        err = _err_buffer()
        code = lib.kvo_worker_connect_host_options(
            socket_path.encode(), ctypes.byref(c_spec), mp_rank, c_tensors, len(tensors),
            ctypes.byref(options), ctypes.byref(handle), err, len(err))
        del keep, names
        _raise_for(code, err)
        return cls(handle, lib)

    def _h(self):
        if self._handle is None:
            raise KvoffloadError(StatusCode.FAILED_PRECONDITION, "the worker is closed")
        return self._handle

    def _submit(self, direction, job_id, gpu_blocks, rows, event_index, region_epoch=0):
        blocks, nb = _u64_array(gpu_blocks, "gpu_blocks")
        row_arr, nr = _u64_array(rows, "rows")
        err = _err_buffer()
        _raise_for(self._lib.kvo_worker_submit_epoch(self._h(), job_id, direction, blocks, nb,
                                                     row_arr, nr, event_index, region_epoch, err,
                                                     len(err)), err)

    def submit_runs(self, job_id: int, direction: str, runs, event_index: int = -1,
                    region_epoch: int = 0) -> None:
        """Submits a part as runs (gpu_block, row, num_rows): rows [row, row + num_rows) take GPU
        blocks [gpu_block, gpu_block + num_rows × blocks_per_row). direction: "store" | "load".
        A job of one run costs the same host work at any size."""
        direction = Direction.of(direction)
        runs = list(runs)
        arr = (_native.c_block_run * max(1, len(runs)))()
        for i, run in enumerate(runs):
            if len(run) != 3 or any(not 0 <= int(x) < 1 << 64 for x in run):
                raise ValueError("a run is (gpu_block, row, num_rows) of non-negative ints, got %r"
                                 % (run,))
            arr[i] = _native.c_block_run(*(int(x) for x in run))
        err = _err_buffer()
        _raise_for(self._lib.kvo_worker_submit_runs(
            self._h(), job_id, direction, arr, len(runs), event_index,
            region_epoch, err, len(err)), err)

    def submit_ranges(self, job_id: int, direction: str, ranges, event_index: int = -1,
                      region_epoch: int = 0) -> None:
        """Submits a load part block by block: ranges of (gpu_block, row, first_block,
        num_blocks) — num_blocks consecutive region blocks from block first_block of row
        (first_block < blocks_per_row) into GPU blocks [gpu_block, gpu_block + num_blocks). A
        range may start and end inside a row (an offloaded block whose head the engine still
        holds). direction "load" ("store" is INVALID_ARGUMENT: stores write whole rows)."""
        direction = Direction.of(direction)
        ranges = list(ranges)
        arr = (_native.c_block_range * max(1, len(ranges)))()
        for i, r in enumerate(ranges):
            if (len(r) != 4 or any(not 0 <= int(x) < 1 << 64 for x in r) or
                    int(r[2]) >= 1 << 32):
                raise ValueError("a range is (gpu_block, row, first_block, num_blocks) of "
                                 "non-negative 64-bit ints (first_block 32-bit), got %r" % (r,))
            arr[i] = _native.c_block_range(*(int(x) for x in r))
        err = _err_buffer()
        _raise_for(self._lib.kvo_worker_submit_ranges(
            self._h(), job_id, direction, arr, len(ranges), event_index,
            region_epoch, err, len(err)), err)

    @property
    def region_epoch(self) -> int:
        """Identity of the engine's region on this node, as reported at the live (else the last)
        session's registration."""
        epoch = ctypes.c_uint64()
        err = _err_buffer()
        _raise_for(self._lib.kvo_worker_region_epoch(self._h(), ctypes.byref(epoch), err,
                                                     len(err)), err)
        return epoch.value

    def submit_store(self, job_id: int, gpu_blocks, rows, event_index: int = -1,
                     region_epoch: int = 0) -> None:
        """Sends this worker's part of a store (GPU → host) job: gpu_blocks has
        len(rows) × blocks_per_row entries. event_index: an event recorded with record_event
        after the KV writes (the daemon waits on it), or -1. region_epoch: the scheduler's
        Scheduler.region_epoch the rows were planned in (0 = the live session's region: rows
        planned before the worker registered again must carry their epoch); a
        re-created region fails the job with FAILED_PRECONDITION. The verdict comes from
        poll/wait."""
        self._submit(Direction.STORE, job_id, gpu_blocks, rows, event_index, region_epoch)

    def submit_load(self, job_id: int, gpu_blocks, rows, event_index: int = -1,
                    region_epoch: int = 0) -> None:
        """Sends this worker's part of a load (host → GPU) job (rows from prepare_load)."""
        self._submit(Direction.LOAD, job_id, gpu_blocks, rows, event_index, region_epoch)

    def record_event(self, index: int, stream=None) -> None:
        """cudaEventRecord(event[index], stream). FAILED_PRECONDITION on a host worker."""
        err = _err_buffer()
        _raise_for(self._lib.kvo_worker_record_event(self._h(), index, _stream_handle(stream),
                                                     err, len(err)), err)

    def wait_event(self, index: int, stream=None) -> None:
        """cudaStreamWaitEvent(stream, event[index]). FAILED_PRECONDITION on a host worker."""
        err = _err_buffer()
        _raise_for(self._lib.kvo_worker_wait_event(self._h(), index, _stream_handle(stream), err,
                                                   len(err)), err)

    def poll(self) -> List[FinishedJob]:
        """Every job finished since the last poll (non-blocking)."""
        out = []
        n = ctypes.c_size_t()
        err = _err_buffer()
        buf = (_native.c_finished * 64)()
        while True:
            _raise_for(self._lib.kvo_worker_poll(self._h(), buf, len(buf), ctypes.byref(n), err,
                                                 len(err)), err)
            out.extend(_finished(buf[i]) for i in range(n.value))
            if n.value < len(buf):
                return out

    def wait(self, job_id: int, timeout_s: Optional[float] = None) -> FinishedJob:
        """Waits for one job and returns its verdict (check .ok, or call .check()).
        Raises KvoffloadError DEADLINE_EXCEEDED after timeout_s (None = no bound), or the
        session's error if it ends first."""
        timeout_ms = -1 if timeout_s is None else max(0, int(timeout_s * 1000))
        done = _native.c_finished()
        err = _err_buffer()
        _raise_for(self._lib.kvo_worker_wait(self._h(), job_id, timeout_ms, ctypes.byref(done),
                                             err, len(err)), err)
        return _finished(done)

    def check_session(self) -> None:
        """Raises KvoffloadError when the session with the daemon has ended."""
        err = _err_buffer()
        _raise_for(self._lib.kvo_worker_session_status(self._h(), err, len(err)), err)

    def session_state(self) -> SessionState:
        """Where the session stands (see SessionState); never raises for an ended session."""
        state = _native.c_session_state()
        err = _err_buffer()
        _raise_for(self._lib.kvo_worker_session_state(self._h(), ctypes.byref(state), err,
                                                      len(err)), err)
        return SessionState(
            phase=SessionPhase(state.phase), code=state.code,
            message=state.message.decode("utf-8", "replace"), generation=state.generation,
            region_changes=state.region_changes, reconnect_attempts=state.reconnect_attempts,
            region_epoch=state.region_epoch, session_id=state.session_id,
            reason=state.reason.decode("utf-8", "replace"))

    @property
    def alive(self) -> bool:
        if self._handle is None:
            return False
        err = _err_buffer()
        return self._lib.kvo_worker_session_status(self._handle, err, len(err)) == 0

    def _close_handle(self, handle) -> None:
        self._lib.kvo_worker_close(handle)
