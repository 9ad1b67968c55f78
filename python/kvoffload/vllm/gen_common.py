"""What the adapter layer (adapter.py, transfer_handlers.py, transfer_worker.py) shares: the
rows' LoadStoreSpec, the manager's load/store answers, opening the engine, the start-up checks, the worker core's construction, a transfer's
submission and vLLM's load-error path. No vLLM import at module level: vLLM's classes come in
as arguments or as the base class a mixin is combined with."""

import dataclasses
import logging
import os
import sys
import weakref

from ..client import EngineSpec, KvoffloadError, Scheduler, StatusCode
from . import config, core

logger = logging.getLogger("kvoffload.vllm")

CONNECTOR_MODULE = "vllm.distributed.kv_transfer.kv_connector.v1.offloading_connector"


def never_raises(default=None):
    """A vLLM-facing method of the manager or worker: an unexpected exception is logged and
    `default` returned, never raised into vLLM's scheduler or model runner (start-up errors
    are raised by the spec's constructor, get_manager and get_worker/get_handlers instead)."""
    import functools

    def wrap(method):
        @functools.wraps(method)
        def guarded(*args, **kwargs):
            try:
                return method(*args, **kwargs)
            except Exception:  # noqa: BLE001
                logger.exception("kvoffload: %s failed (vLLM goes on without it)",
                                 method.__qualname__)
                return default() if callable(default) else default
        return guarded
    return wrap


def job_nonce():
    """A random non-zero 32-bit nonce of this scheduler process: the daemon's job id of a vLLM
    job is nonce << 32 | job id, unique across restarts of the engine on one region."""
    return int.from_bytes(os.urandom(4), "little") or 1


def with_writer_only(spec, writer_only):
    """The EngineSpec with stores_by_writer_only (DAEMON_API item 4) when asked for."""
    return dataclasses.replace(spec, stores_by_writer_only=True) if writer_only else spec


class RowSpecMixin:
    """Rows of the engine's kvoffload region, mixed in before the running vLLM's
    BlockIDsLoadStoreSpec (block_ids are row numbers), with the region epoch they were planned
    in, the scheduler's job nonce, a store's keys (a worker whose store fails completes them
    with success=False) and `failed` (prepare_load could not pin them). vLLM pickles the specs,
    so adapter.py names its subclass at module level."""

    def __init__(self, rows, region_epoch=0, job_nonce=0, keys=(), failed=False):
        super().__init__(list(rows))
        self.region_epoch = region_epoch
        self.job_nonce = job_nonce
        self.keys = list(keys)
        self.failed = failed


def load_spec(manager_core, keys, spec_cls):
    """prepare_load's answer: the keys' pinned rows, or a failed spec_cls (the worker then
    fails the load)."""
    rows = manager_core.prepare_load(core.unique(keys))
    if rows is None:
        return spec_cls([], manager_core.region_epoch, manager_core.job_nonce, failed=True)
    return spec_cls(rows, manager_core.region_epoch, manager_core.job_nonce)


def store_output(manager_core, keys, spec_cls, output_cls):
    """prepare_store's answer: output_cls (the running vLLM's PrepareStoreOutput), or None when
    nothing is stored."""
    prepared = manager_core.prepare_store(keys)
    if prepared is None:
        return None
    spec = spec_cls(prepared.rows, manager_core.region_epoch, manager_core.job_nonce,
                    keys=manager_core.store_keys(prepared.keys))
    return output_cls(keys_to_store=list(prepared.keys), store_spec=spec,
                      evicted_keys=list(prepared.evicted_keys))


def submit(worker_core, direction, job_id, transfer, spec_cls):
    """Submits vLLM's transfer (src spec, dst spec); one that cannot be planned is submitted
    with a failed spec_cls, so that vLLM hears of it from get_finished, never as an exception.
    Returns True (vLLM's "submitted")."""
    try:
        src, dst = transfer
        gpu, rows = (src, dst) if direction == core.STORE else (dst, src)
        indices = getattr(gpu, "block_indices", None)
        first = int(indices[0]) if indices is not None and len(indices) else 0
        worker_core.submit(direction, job_id, gpu.block_ids, first, rows)
    except Exception:  # noqa: BLE001 — never into vLLM; the job is then reported failed
        logger.exception("kvoffload: %s job %d could not be planned", direction, job_id)
        worker_core.submit(direction, job_id, [], 0, spec_cls([], failed=True))
    return True


def open_scheduler(settings, engine_spec):
    try:
        return Scheduler.open(settings.socket_path, engine_spec,
                              open_timeout_s=settings.open_timeout_s,
                              call_timeout_s=settings.call_timeout_s)
    except KvoffloadError as e:
        raise config.explain(e, engine_spec, settings.socket_path) from None


def check_replicated(daemon_replicated, vllm_replicated, engine_spec, who):
    """vLLM's layout choice and the daemon's must agree where it matters: when vLLM lets only
    rank 0 store (replicated), the daemon must keep one copy per row."""
    if vllm_replicated and not daemon_replicated:
        raise KvoffloadError(
            StatusCode.FAILED_PRECONDITION,
            "kvoffload.vllm: vLLM chose the replicated (MLA) layout — only rank 0 stores — but "
            "kvoffloadd keeps one copy per rank for engine %r (%s): the other ranks' copies would "
            "never be written. Check that every rank of the replica is on this node "
            "(kv_connector_extra_config \"local_world_size\") and that all processes run the "
            "same kvoffload" % (engine_spec.engine_id, who))
    if daemon_replicated and not vllm_replicated:
        logger.info("kvoffload: kvoffloadd keeps one copy per row (MLA) for engine %r; every rank "
                    "submits its stores and rank 0's bytes are written", engine_spec.engine_id)


def log_region(engine_spec, settings, geometry):
    logger.info("kvoffload: engine %s/%d %s region on %s: %d rows of %d bytes (%s)",
                engine_spec.engine_id, engine_spec.dp_rank,
                "created" if geometry.created else "joined", settings.socket_path,
                geometry.num_rows, geometry.row_bytes,
                "replicated" if geometry.replicated else "per rank")


def manager_core(settings, engine_spec, make_event, vllm_replicated=None):
    """The ManagerCore of the scheduler process. vllm_replicated: vLLM's layout choice, checked
    against the daemon's (None: vLLM makes none)."""
    scheduler = open_scheduler(settings, engine_spec)
    if vllm_replicated is not None:
        try:
            check_replicated(scheduler.geometry.replicated, vllm_replicated, engine_spec,
                             "the scheduler")
        except Exception:
            scheduler.close()
            raise
    log_region(engine_spec, settings, scheduler.geometry)
    return core.ManagerCore(scheduler, job_nonce(), make_event=make_event,
                            pending_timeout_s=settings.pending_timeout_s)


def worker_core(settings, engine_spec, mp_rank, canonical_tensors, vllm_replicated):
    """The WorkerCore of this worker process (registered with the daemon)."""
    tensors = list(canonical_tensors)

    def dial():
        worker, events = core.register(settings, engine_spec, mp_rank, tensors)
        info = worker.info
        logger.info("kvoffload: worker mp_rank %d registered (slot %d of %d, %d rows)", mp_rank,
                    info.slot, info.num_copies, info.num_rows)
        return worker, events

    def open_index():
        return Scheduler.open(settings.socket_path, engine_spec,
                              open_timeout_s=settings.open_timeout_s,
                              call_timeout_s=settings.call_timeout_s)

    try:
        wc = core.WorkerCore(dial, open_index, settings.wait_timeout_s, settings.retry_window_s)
    except KvoffloadError as e:
        raise config.explain(e, engine_spec, settings.socket_path) from None
    try:
        check_replicated(wc.worker.info.replicated, vllm_replicated, engine_spec,
                         "worker mp_rank %d" % mp_rank)
    except KvoffloadError:
        wc.close()
        raise
    install_load_error_path(wc)
    return wc


# -- vLLM's load-error path ---------------------------------------------------------------------
#
# vLLM's scheduler recomputes (kv_load_failure_policy "recompute") or fails (the default, "fail")
# the requests whose GPU blocks a connector reports in get_block_ids_with_load_errors(), read by
# the model runner right after get_finished(). The OffloadingConnector of every supported
# release inherits the base class's empty answer, so kvoffload adds one to the class: the GPU
# blocks of this process's failed loads, unioned with whatever the base returns.

_CORES = weakref.WeakSet()


def _load_error_blocks(connector):
    out = set()
    for wc in list(_CORES):
        out |= wc.take_load_error_blocks()
    return out


def install_load_error_path(wc):
    """Wires wc's failed loads to vLLM's load-error path; sets wc.load_errors_wired."""
    module = sys.modules.get(CONNECTOR_MODULE)
    cls = getattr(module, "OffloadingConnector", None) if module is not None else None
    if cls is None:
        logger.warning("kvoffload: %s is not loaded, so a failed load cannot be reported to "
                       "vLLM's load-error path; such a load is reported failed (vLLM stops)",
                       CONNECTOR_MODULE)
        return False
    current = getattr(cls, "get_block_ids_with_load_errors", None)
    if not getattr(current, "_kvoffload", False):
        if "get_block_ids_with_load_errors" in cls.__dict__:
            inherited = current
        else:
            inherited = None
            for base in cls.__mro__[1:]:
                if "get_block_ids_with_load_errors" in base.__dict__:
                    inherited = base.__dict__["get_block_ids_with_load_errors"]
                    break

        def get_block_ids_with_load_errors(self):
            out = set(inherited(self) or ()) if inherited is not None else set()
            return out | _load_error_blocks(self)

        get_block_ids_with_load_errors._kvoffload = True
        cls.get_block_ids_with_load_errors = get_block_ids_with_load_errors
    _CORES.add(wc)
    wc.load_errors_wired = True
    return True
