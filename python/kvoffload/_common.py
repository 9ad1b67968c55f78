"""The types and helpers the Worker and Scheduler handles share (kvoffload.client re-exports
the public ones): status codes and errors, the enums and dataclasses of the C ABI, and the one
conversion of a C call's (code, message) into a KvoffloadError."""

import ctypes
import dataclasses
import enum
from typing import List

from . import _native

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


class Reason:
    """Why the daemon refused a call, beside its code (docs/api.md "Errors"): stable names, to
    decide on instead of the message. KvoffloadError.reason / FinishedJob.reason hold one of
    these, or "" when the error carries none. Mirrors common/refusals.h (test_constants.py)."""
    REGION_EPOCH_MISMATCH = "region_epoch_mismatch"  # the region was dropped or re-created
    ENGINE_NOT_FOUND = "engine_not_found"            # no such engine on this node
    KEY_NOT_IN_INDEX = "key_not_in_index"            # an answer about a key; the engine is there
    SPEC_MISMATCH = "spec_mismatch"                  # the engine exists with another spec
    SPEC_RULE = "spec_rule"                          # metadata["rule"]: which rule of the spec


def code_name(code: int) -> str:
    try:
        return StatusCode(code).name
    except ValueError:
        return "CODE_%d" % code


class KvoffloadError(Exception):
    """A failed kvoffload call: `code` (int, absl/gRPC status code), `name` ('NOT_FOUND'),
    `message` (the daemon's or the library's words, for people), `reason` (a Reason value, or ""
    when the error has none) and `metadata` (the reason's details, a dict of str). Decide on
    code and reason, never on the message."""

    def __init__(self, code: int, message: str, reason: str = "", metadata=None):
        self.code = int(code)
        self.name = code_name(self.code)
        self.message = message
        self.reason = reason
        self.metadata = dict(metadata or {})
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
    # A node-wide pool this replica shares its offloaded KV with (README "Pools"; "" = a
    # private region), and the identity every member must share: whatever changes KV bytes.
    pool: str = ""
    model_identity: str = ""

    def _to_c(self):
        """(c_engine_spec, keepalive) — the struct points into the objects in keepalive.

        Walks _native.SPEC_FIELDS, so that every field of the C struct is filled by its kind.
        """
        c = _native.c_engine_spec()
        keepalive = []
        for name, kind in _native.SPEC_FIELDS:
            value = getattr(self, name)
            if kind == _native.ID:
                value = value.encode()
                keepalive.append(value)
            elif kind == _native.ENUM:
                value = _enum_value(value, _SPEC_ENUMS[name], name)
            elif kind == _native.FLAG:
                value = 1 if value else 0
            elif kind == _native.TIERS:
                value = ",".join(value).encode()
                keepalive.append(value)
            elif kind == _native.IDS:
                if any(not 0 <= int(i) < 1 << 32 for i in value):
                    raise ValueError("%s must be 32-bit unsigned ids, got %r" % (name, value))
                array = (ctypes.c_uint32 * max(1, len(value)))(*value)
                keepalive.append(array)
                setattr(c, "num_" + name, len(value))
                value = ctypes.cast(array, ctypes.POINTER(ctypes.c_uint32))
            setattr(c, name, value)
        return c, keepalive

    def describe(self) -> str:
        """The spec as the daemon will read it, every field ("engine_id=... member_gids=[]"), from
        the library (kvo_engine_spec_describe). Raises KvoffloadError(INVALID_ARGUMENT) for what
        Scheduler.open would refuse before calling the daemon (not the topology)."""
        c, _keepalive = self._to_c()
        out = ctypes.create_string_buffer(_native.ERROR_BYTES)
        err = _err_buffer()
        _raise_for(_native.library().kvo_engine_spec_describe(
            ctypes.byref(c), out, len(out), err, len(err)), err)
        return out.value.decode()


_SPEC_ENUMS = {"executor": EXECUTORS, "attention": ATTENTIONS}


def _enum_value(value, table, what):
    if isinstance(value, int):
        return value
    try:
        return table[str(value).lower()]
    except KeyError:
        raise ValueError("%s %r is not one of %s" % (what, value, sorted(table))) from None


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
class Readiness:
    """How far an engine's region is populated and registered (README "serve while pinning"):
    rows not ready yet are never handed out, so a prepare_store that needs them raises
    RESOURCE_EXHAUSTED until they are."""
    region_epoch: int        # the region these numbers are of
    num_rows: int            # rows online (a pool member: the pool's)
    rows_not_ready: int      # of them, not registered yet
    region_bytes: int
    region_ready_bytes: int  # == region_bytes once fully ready
    first_ready_seconds: float  # from opening the engine to its first ready chunk; -1: not yet
    fully_ready_seconds: float  # ... to its last; -1: not yet

    @property
    def ready(self) -> bool:
        return self.rows_not_ready == 0


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
    reason: str = ""  # the status's Reason, "" when none

    @property
    def live(self) -> bool:
        return self.phase == SessionPhase.LIVE


@dataclasses.dataclass(frozen=True)
class FinishedJob:
    """A job's verdict on this worker's node. `code` is a StatusCode value, `reason` a Reason
    ("" when none: success, or an error without one)."""
    job_id: int
    ok: bool
    code: int
    message: str
    bytes: int
    reason: str = ""

    @property
    def code_name(self) -> str:
        return code_name(self.code)

    def check(self) -> "FinishedJob":
        """Raises KvoffloadError when the job failed; returns self otherwise."""
        if not self.ok:
            raise KvoffloadError(self.code, "job %d: %s" % (self.job_id, self.message),
                                 self.reason)
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
    """Raises the KvoffloadError of a C call that returned `code` with message `err`; call it
    right after that call, on its thread (the reason is the thread's last error)."""
    if code != 0:
        lib = _native.library()
        reason = lib.kvo_last_error_reason().decode("utf-8", "replace")
        lines = lib.kvo_last_error_metadata().decode("utf-8", "replace").splitlines()
        metadata = dict(line.split("=", 1) for line in lines if "=" in line)
        raise KvoffloadError(code, err.value.decode("utf-8", "replace"), reason, metadata)


def _err_buffer():
    return ctypes.create_string_buffer(_native.ERROR_BYTES)


class _Closing:
    """close() on leaving a `with` block and on garbage collection (errors then swallowed)."""

    def close(self) -> None:
        raise NotImplementedError

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass


class _Handle(_Closing):
    """Owns one native handle: close() once, context manager, closed on garbage collection."""

    _handle = None

    def _close_handle(self, handle) -> None:
        raise NotImplementedError

    def close(self) -> None:
        if self._handle is not None:
            handle, self._handle = self._handle, None
            self._close_handle(handle)
