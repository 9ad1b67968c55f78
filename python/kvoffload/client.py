"""Worker and scheduler handles over the kvoffload C ABI (client/kvoffload_c.h).

Deadlines: every call that talks to the daemon is bounded. Opening an engine or registering a
worker (which may create and pin the region) gets `open_timeout_s` (default
DEFAULT_OPEN_TIMEOUT_S), every later call on the handle `call_timeout_s` (default
DEFAULT_CALL_TIMEOUT_S); over it, KvoffloadError DEADLINE_EXCEEDED naming the call, the socket
and the deadline. When no daemon listens on the socket, open/connect fail at once with
UNAVAILABLE ("kvoffloadd is not running (no socket at PATH): start it ...").

Restarts: when the daemon goes away and comes back (a restart, an upgrade, a crash), a Worker
fails the jobs it had in flight (UNAVAILABLE verdicts) and registers again by itself in the
background (session_state() says where it stands; a submit meanwhile raises UNAVAILABLE at once);
a Scheduler re-opens the engine on its next call, and its region_epoch changes when the region
was re-created (every row cached before is gone; parts planned with the old epoch fail
FAILED_PRECONDITION). reconnect=False turns both off (docs/clients.md).

Thread-safety: a Worker or Scheduler may be used from several threads at once (the C calls
release the GIL); close() must not race other calls on the same handle.
"""

import array
import ctypes
import dataclasses
import enum
import sys
import threading
from typing import List, Optional, Sequence, Union

from . import _native
from .host import HostTensor
from .tensors import as_views


class StatusCode(enum.IntEnum):
    """absl::StatusCode (= gRPC code) values, as the C ABI returns them."""
    OK = 0
    CANCELLED = 1
    UNKNOWN = 2
    INVALID_ARGUMENT = 3
    DEADLINE_EXCEEDED = 4
    NOT_FOUND = 5
    ALREADY_EXISTS = 6
    PERMISSION_DENIED = 7
    RESOURCE_EXHAUSTED = 8
    FAILED_PRECONDITION = 9
    ABORTED = 10
    OUT_OF_RANGE = 11
    UNIMPLEMENTED = 12
    INTERNAL = 13
    UNAVAILABLE = 14
    DATA_LOSS = 15
    UNAUTHENTICATED = 16


def code_name(code: int) -> str:
    try:
        return StatusCode(code).name
    except ValueError:
        return "CODE_%d" % code


class KvoffloadError(Exception):
    """A failed kvoffload call: `code` (int, absl/gRPC status code), `name` ('NOT_FOUND'),
    `message` (the daemon's or the library's words)."""

    def __init__(self, code: int, message: str):
        self.code = int(code)
        self.name = code_name(self.code)
        self.message = message
        super().__init__("%s: %s" % (self.name, message))


class Direction(enum.IntEnum):
    """A job's direction (KVO_STORE / KVO_LOAD of kvoffload_c.h)."""
    STORE = 1  # GPU → host region
    LOAD = 2   # host region → GPU

    @classmethod
    def of(cls, direction) -> "Direction":
        """A Direction from itself or from "store" / "load"."""
        if isinstance(direction, cls):
            return direction
        if direction in ("store", "load"):
            return cls.STORE if direction == "store" else cls.LOAD
        raise ValueError("direction must be 'store', 'load' or a Direction, not %r" %
                         (direction,))


class SessionPhase(enum.IntEnum):
    """Where a worker's session stands (KVO_SESSION_* of kvoffload_c.h)."""
    LIVE = 0
    RECONNECTING = 1  # the daemon went away; registering again in the background
    ENDED = 2         # for good (closed by the daemon for a reason, refused, or reconnect=False)


class KeyState(enum.IntEnum):
    MISS = 0
    HIT = 1
    HIT_PENDING = 2


DEFAULT_OPEN_TIMEOUT_S = 60.0  # KVO_DEFAULT_OPEN_TIMEOUT_MS
DEFAULT_CALL_TIMEOUT_S = 10.0  # KVO_DEFAULT_CALL_TIMEOUT_MS


def _client_options(open_timeout_s, call_timeout_s, reconnect=True):
    """kvo_client_options from seconds (None = the default). Raises ValueError unless > 0."""
    options = _native.c_client_options()
    options.reconnect = 1 if reconnect else 0
    for name, value, default in (("open_timeout_s", open_timeout_s, DEFAULT_OPEN_TIMEOUT_S),
                                 ("call_timeout_s", call_timeout_s, DEFAULT_CALL_TIMEOUT_S)):
        value = default if value is None else float(value)
        if not value > 0 or value == float("inf"):
            raise ValueError("%s must be a positive number of seconds, got %r" % (name, value))
        setattr(options, name.replace("_s", "_ms"), max(1, int(round(value * 1000))))
    return options


EXECUTORS = {"uni": 0, "mp": 1, "ray": 2, "external": 3}
ATTENTIONS = {"mha": 0, "mla": 1}


@dataclasses.dataclass
class EngineSpec:
    """One engine replica's topology and KV layout (common::EngineSpec; DESIGN.md §2).

    executor: "uni" | "mp" | "ray" | "external"; attention: "mha" | "mla".
    local_world_size 0 = not declared (taken as world_size). worker_bytes_per_block 0 =
    page_bytes × num_layers. budget_bytes is per node, per DP replica.
    """
    engine_id: str = "engine"
    dp_rank: int = 0
    world_size: int = 1
    local_world_size: int = 0
    tp: int = 1
    pp: int = 1
    pcp: int = 1
    dcp: int = 1
    executor: str = "mp"
    attention: str = "mha"
    num_kv_groups: int = 1
    num_layers: int = 1
    page_bytes: int = 0
    worker_bytes_per_block: int = 0
    blocks_per_row: int = 1
    budget_bytes: int = 0
    secondary_tiers: List[str] = dataclasses.field(default_factory=list)
    rows_assigned_by_engine: bool = False
    # Replicated (MLA) layout only: a store finishes on the writer's (mp_rank 0) part alone; the
    # other ranks never submit stores. Loads still need every local worker.
    stores_by_writer_only: bool = False
    # Further uids / groups allowed to use the engine besides its creator (only the creator's
    # lists count).
    member_uids: List[int] = dataclasses.field(default_factory=list)
    member_gids: List[int] = dataclasses.field(default_factory=list)

    def _to_c(self):
        """(c_engine_spec, keepalive) — the struct points into the bytes in keepalive."""
        def enum_value(value, table, what):
            if isinstance(value, int):
                return value
            try:
                return table[str(value).lower()]
            except KeyError:
                raise ValueError("%s %r is not one of %s" % (what, value, sorted(table))) from None

        engine_id = self.engine_id.encode()
        tiers = ",".join(self.secondary_tiers).encode()
        c = _native.c_engine_spec()
        c.engine_id = engine_id
        c.dp_rank = self.dp_rank
        c.world_size = self.world_size
        c.local_world_size = self.local_world_size
        c.tp = self.tp
        c.pp = self.pp
        c.pcp = self.pcp
        c.dcp = self.dcp
        c.executor = enum_value(self.executor, EXECUTORS, "executor")
        c.attention = enum_value(self.attention, ATTENTIONS, "attention")
        c.num_kv_groups = self.num_kv_groups
        c.num_layers = self.num_layers
        c.blocks_per_row = self.blocks_per_row
        c.page_bytes = self.page_bytes
        c.worker_bytes_per_block = self.worker_bytes_per_block
        c.budget_bytes = self.budget_bytes
        c.secondary_tiers = tiers
        c.rows_assigned_by_engine = 1 if self.rows_assigned_by_engine else 0
        c.stores_by_writer_only = 1 if self.stores_by_writer_only else 0
        for what, ids in (("member_uids", self.member_uids), ("member_gids", self.member_gids)):
            if any(not 0 <= int(i) < 1 << 32 for i in ids):
                raise ValueError("%s must be 32-bit unsigned ids, got %r" % (what, ids))
        uids = (ctypes.c_uint32 * max(1, len(self.member_uids)))(*self.member_uids)
        gids = (ctypes.c_uint32 * max(1, len(self.member_gids)))(*self.member_gids)
        c.member_uids = ctypes.cast(uids, ctypes.POINTER(ctypes.c_uint32))
        c.num_member_uids = len(self.member_uids)
        c.member_gids = ctypes.cast(gids, ctypes.POINTER(ctypes.c_uint32))
        c.num_member_gids = len(self.member_gids)
        return c, (engine_id, tiers, uids, gids)


@dataclasses.dataclass(frozen=True)
class Geometry:
    """The region's geometry as the daemon computed it."""
    replicated: bool
    num_copies: int
    blocks_per_row: int
    worker_bytes_per_block: int
    slot_bytes: int
    row_bytes: int
    num_rows: int
    capacity_bytes: int
    fingerprint: str
    created: bool  # Scheduler.open created the region (False: joined an existing one)


@dataclasses.dataclass(frozen=True)
class WorkerInfo:
    """What the daemon answered at registration."""
    slot: int
    writer: bool  # False for replicated non-writers: their stores only vote
    num_copies: int
    replicated: bool
    row_bytes: int
    slot_bytes: int
    num_rows: int
    blocks_per_row: int
    worker_bytes_per_block: int
    capacity_bytes: int
    session_id: int
    device: int  # CUDA ordinal, -1 for a host worker
    num_events: int


@dataclasses.dataclass(frozen=True)
class SessionState:
    """A worker's session: phase, its status (code 0 when live; UNAVAILABLE while registering
    again), generation (1 for the first session, +1 per session registered again: jobs of an
    older generation have failed), region_changes (sessions registered again that found a new
    region epoch: every row cached before is gone), and the live (else last) session's region
    epoch and id."""
    phase: SessionPhase
    code: int
    message: str
    generation: int
    region_changes: int
    reconnect_attempts: int
    region_epoch: int
    session_id: int

    @property
    def live(self) -> bool:
        return self.phase == SessionPhase.LIVE


@dataclasses.dataclass(frozen=True)
class FinishedJob:
    """A job's verdict on this worker's node. `code` is a StatusCode value."""
    job_id: int
    ok: bool
    code: int
    message: str
    bytes: int

    @property
    def code_name(self) -> str:
        return code_name(self.code)

    def check(self) -> "FinishedJob":
        """Raises KvoffloadError when the job failed; returns self otherwise."""
        if not self.ok:
            raise KvoffloadError(self.code, "job %d: %s" % (self.job_id, self.message))
        return self


@dataclasses.dataclass(frozen=True)
class PreparedStore:
    """Rows for the keys that were not present yet.

    keys/rows/indices are parallel: keys[i] (in request order) is request key indices[i] and was
    given rows[i] (in state WRITING until complete_store). evicted_keys were dropped for room.
    """
    keys: List[bytes]
    rows: List[int]
    indices: List[int]
    evicted_keys: List[bytes]


def _raise_for(code: int, err) -> None:
    if code != 0:
        raise KvoffloadError(code, err.value.decode("utf-8", "replace"))


def _err_buffer():
    return ctypes.create_string_buffer(_native.ERROR_BYTES)


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
                       message=c.message.decode("utf-8", "replace"), bytes=c.bytes)


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


class _Handle:
    """Owns one native handle: close() once, context manager, closed on garbage collection."""

    _handle = None

    def _close_handle(self, handle) -> None:
        raise NotImplementedError

    def close(self) -> None:
        if self._handle is not None:
            handle, self._handle = self._handle, None
            self._close_handle(handle)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass


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
        Scheduler.region_epoch the rows were planned in (0 = this session's region); a
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
            region_epoch=state.region_epoch, session_id=state.session_id)

    @property
    def alive(self) -> bool:
        if self._handle is None:
            return False
        err = _err_buffer()
        return self._lib.kvo_worker_session_status(self._handle, err, len(err)) == 0

    def _close_handle(self, handle) -> None:
        self._lib.kvo_worker_close(handle)


class _Keys:
    """Marshals a sequence of keys (bytes; str is UTF-8 encoded) for one call."""

    def __init__(self, keys):
        self.keys = [k.encode() if isinstance(k, str) else bytes(k) for k in keys]
        n = len(self.keys)
        self.n = n
        self.ptrs = (ctypes.c_char_p * max(1, n))(*self.keys)
        self.lens = (ctypes.c_size_t * max(1, n))(*(len(k) for k in self.keys))


class Scheduler(_Handle):
    """The scheduler's handle on an engine's region and row index (one per engine replica).

    Row states: FREE → WRITING (prepare_store) → READY (complete_store) ⇄ READING
    (prepare_load / complete_load); LRU eviction over READY rows without readers.
    """

    def __init__(self, handle, lib):
        self._handle = handle
        self._lib = lib
        self._evicted_lock = threading.Lock()
        self._evicted_buf = None  # grown as needed, guarded by _evicted_lock

    @classmethod
    def open(cls, socket_path: str, spec: EngineSpec, region_epoch: int = 0,
             open_timeout_s: Optional[float] = None,
             call_timeout_s: Optional[float] = None, reconnect: bool = True) -> "Scheduler":
        """OpenEngine: creates the engine's region or joins it (idempotent). A non-zero
        region_epoch (an earlier Scheduler.region_epoch) requires that very region:
        FAILED_PRECONDITION naming both epochs, and nothing created, when it is gone.
        open_timeout_s bounds this call, call_timeout_s every later call on the handle
        (module docstring); UNAVAILABLE at once when no daemon listens on socket_path.
        reconnect: re-open the engine on the next call after the daemon went away."""
        lib = _native.library()
        options = _client_options(open_timeout_s, call_timeout_s, reconnect)
        c_spec, keep = spec._to_c()
        handle = ctypes.c_void_p()
        geometry = _native.c_geometry()
        err = _err_buffer()
        code = lib.kvo_scheduler_open_options(socket_path.encode(), ctypes.byref(c_spec),
                                              region_epoch, ctypes.byref(options),
                                              ctypes.byref(handle), ctypes.byref(geometry), err,
                                              len(err))
        del keep
        _raise_for(code, err)
        scheduler = cls(handle, lib)
        scheduler.geometry = Geometry(
            replicated=bool(geometry.replicated), num_copies=geometry.num_copies,
            blocks_per_row=geometry.blocks_per_row,
            worker_bytes_per_block=geometry.worker_bytes_per_block,
            slot_bytes=geometry.slot_bytes, row_bytes=geometry.row_bytes,
            num_rows=geometry.num_rows, capacity_bytes=geometry.capacity_bytes,
            fingerprint=geometry.fingerprint.decode("utf-8", "replace"),
            created=bool(geometry.created))
        return scheduler

    def _h(self):
        if self._handle is None:
            raise KvoffloadError(StatusCode.FAILED_PRECONDITION, "the scheduler is closed")
        return self._handle

    @property
    def region_epoch(self) -> int:
        """Identity of the engine's region (never 0); pass it to Worker.submit_*. Changes when a
        re-open after the daemon went away found the region re-created (region_changes)."""
        epoch = ctypes.c_uint64()
        err = _err_buffer()
        _raise_for(self._lib.kvo_scheduler_region_epoch(self._h(), ctypes.byref(epoch), err,
                                                        len(err)), err)
        return epoch.value

    @property
    def region_changes(self) -> int:
        """Re-opens after the daemon went away that found the region re-created."""
        return self._counters()[0]

    @property
    def reopens(self) -> int:
        """Re-opens of the engine after the daemon went away (the region kept or not)."""
        return self._counters()[1]

    def _counters(self):
        changes = ctypes.c_uint64()
        reopens = ctypes.c_uint64()
        err = _err_buffer()
        _raise_for(self._lib.kvo_scheduler_region_changes(
            self._h(), ctypes.byref(changes), ctypes.byref(reopens), err, len(err)), err)
        return changes.value, reopens.value

    def lookup(self, keys) -> List[KeyState]:
        k = _Keys(keys)
        states = (ctypes.c_int32 * max(1, k.n))()
        err = _err_buffer()
        _raise_for(self._lib.kvo_scheduler_lookup(self._h(), k.ptrs, k.lens, k.n, states, err,
                                                  len(err)), err)
        return [KeyState(states[i]) for i in range(k.n)]

    def prepare_store(self, keys) -> PreparedStore:
        """Reserves rows for the keys not present. RESOURCE_EXHAUSTED (nothing changed) when
        fewer rows are free or evictable than new keys."""
        k = _Keys(keys)
        n = max(1, k.n)
        mask = (ctypes.c_uint8 * n)()
        rows = (ctypes.c_uint64 * n)()
        need = n * _native.MAX_KEY_BYTES
        evicted_lens = (ctypes.c_size_t * n)()
        num_evicted = ctypes.c_size_t()
        err = _err_buffer()
        evicted = []
        with self._evicted_lock:
            if self._evicted_buf is None or len(self._evicted_buf) < need:
                self._evicted_buf = (ctypes.c_uint8 * need)()
            buf = self._evicted_buf
            _raise_for(self._lib.kvo_scheduler_prepare_store(
                self._h(), k.ptrs, k.lens, k.n, mask, rows, buf, len(buf), evicted_lens,
                ctypes.byref(num_evicted), err, len(err)), err)
            address = ctypes.addressof(buf)
            offset = 0
            for e in range(num_evicted.value):
                evicted.append(ctypes.string_at(address + offset, evicted_lens[e]))
                offset += evicted_lens[e]
        indices = [i for i in range(k.n) if mask[i]]
        return PreparedStore(keys=[k.keys[i] for i in indices], rows=[rows[i] for i in indices],
                             indices=indices, evicted_keys=evicted)

    def complete_store(self, keys, success: bool = True) -> None:
        """success: the rows become READY (readable); False: they are freed."""
        k = _Keys(keys)
        err = _err_buffer()
        _raise_for(self._lib.kvo_scheduler_complete_store(self._h(), k.ptrs, k.lens, k.n,
                                                          1 if success else 0, err, len(err)),
                   err)

    def prepare_load(self, keys) -> List[int]:
        """Pins READY keys for reading and returns their rows (request order). NOT_FOUND for a
        key not in the index, FAILED_PRECONDITION for one still being written."""
        k = _Keys(keys)
        rows = (ctypes.c_uint64 * max(1, k.n))()
        err = _err_buffer()
        _raise_for(self._lib.kvo_scheduler_prepare_load(self._h(), k.ptrs, k.lens, k.n, rows, err,
                                                        len(err)), err)
        return [rows[i] for i in range(k.n)]

    def complete_load(self, keys) -> None:
        k = _Keys(keys)
        err = _err_buffer()
        _raise_for(self._lib.kvo_scheduler_complete_load(self._h(), k.ptrs, k.lens, k.n, err,
                                                         len(err)), err)

    def touch(self, keys) -> None:
        """Marks READY keys most recently used (keys[0] the most recent)."""
        k = _Keys(keys)
        err = _err_buffer()
        _raise_for(self._lib.kvo_scheduler_touch(self._h(), k.ptrs, k.lens, k.n, err, len(err)),
                   err)

    def _close_handle(self, handle) -> None:
        self._lib.kvo_scheduler_close(handle)


def version() -> str:
    """The loaded library's version string (loads it)."""
    return _native.library().kvo_version().decode()
