"""kvoffload.Scheduler: the scheduler's handle on an engine's region and row index, over the C
ABI (see kvoffload.client for deadlines, restarts and thread-safety)."""

import ctypes
import threading
from typing import List, Optional

from . import _native
from ._common import (EngineSpec, Geometry, KeyState, KvoffloadError, PreparedStore, Readiness,
                      StatusCode, _client_options, _err_buffer, _Handle, _raise_for)


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

    def readiness(self) -> Readiness:
        """The engine's readiness, from Admin.Stats on the daemon's admin socket (admin.sock
        beside the data socket, within call_timeout_s). The caller must be able to connect to it
        (its group; PERMISSION_DENIED naming it otherwise) and administer the engine (its owner,
        root or the daemon's --admin_group; NOT_FOUND otherwise, as for an engine that is gone)."""
        r = _native.c_readiness()
        err = _err_buffer()
        _raise_for(self._lib.kvo_scheduler_readiness(self._h(), ctypes.byref(r), err, len(err)),
                   err)
        return Readiness(region_epoch=r.region_epoch, num_rows=r.num_rows,
                         rows_not_ready=r.rows_not_ready, region_bytes=r.region_bytes,
                         region_ready_bytes=r.region_ready_bytes,
                         first_ready_seconds=r.first_ready_seconds,
                         fully_ready_seconds=r.fully_ready_seconds)

    def wait_until_ready(self, timeout_s: float) -> None:
        """Returns once every row of the region is registered. Raises KvoffloadError
        DEADLINE_EXCEEDED after timeout_s (>= 0; 0: one look) saying how far it got ("N of M rows
        not ready yet, X of Y region bytes registered"), and readiness()'s errors at once."""
        if timeout_s < 0:
            raise KvoffloadError(StatusCode.INVALID_ARGUMENT,
                                 "timeout_s is %r, want 0 or more" % (timeout_s,))
        err = _err_buffer()
        _raise_for(self._lib.kvo_scheduler_wait_until_ready(
            self._h(), int(round(timeout_s * 1000)), err, len(err)), err)

    def _close_handle(self, handle) -> None:
        self._lib.kvo_scheduler_close(handle)
