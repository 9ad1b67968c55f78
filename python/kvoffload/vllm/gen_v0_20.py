"""The vLLM 0.20 generation (v0.20.2, tag commit bc150f5, 2026-05-07): a thin adapter over
core.ManagerCore and core.WorkerCore.

vLLM 0.20's interface: vllm.v1.kv_offload.{abstract, mediums, spec, worker.worker};
OffloadingSpec(vllm_config, kv_cache_config) with block_size_factor; lookup(key, req_context)
-> bool | None for ONE key; prepare_load/prepare_store(keys, req_context); touch/complete_load/
complete_store(keys[, success]); PrepareStoreOutput(keys_to_store, store_spec, evicted_keys);
OffloadingEvent(keys, medium: str, removed); get_handlers(kv_caches: CanonicalKVCaches) yielding
(src_cls, dst_cls, OffloadingHandler) routed by LoadStoreSpec.medium();
GPULoadStoreSpec(block_ids, group_sizes, block_indices); TransferResult(job_id, success,
transfer_size, transfer_time, transfer_type).
"""

from vllm.v1.kv_offload.abstract import (OffloadingEvent, OffloadingManager,  # noqa: F401
                                         PrepareStoreOutput, ReqContext)
from vllm.v1.kv_offload.mediums import BlockIDsLoadStoreSpec, GPULoadStoreSpec
from vllm.v1.kv_offload.spec import OffloadingSpec
from vllm.v1.kv_offload.worker.worker import OffloadingHandler, TransferResult

from ..client import KeyState, KvoffloadError, StatusCode
from . import config, core, gen_common

GENERATION = "v0.20"
MEDIUM = "KVOFFLOAD"    # LoadStoreSpec.medium() of kvoffload rows: routes transfers to handlers
EVENT_MEDIUM = "CPU"    # the medium of KV events: kvoffload rows are host memory
_STORE_TYPE = ("GPU", MEDIUM)
_LOAD_TYPE = (MEDIUM, "GPU")
_OWN_PENDING_IS_MISS = True  # complete_store waits for the storing request to finish


class KvoffloadLoadStoreSpec(gen_common.RowSpecMixin, BlockIDsLoadStoreSpec):
    """Rows of the engine's kvoffload region (gen_common.RowSpecMixin), routed to the
    kvoffload handlers by medium()."""

    @staticmethod
    def medium():
        return MEDIUM


class KvoffloadManager(OffloadingManager):
    """vLLM 0.20's OffloadingManager over core.ManagerCore.

    lookup() is called once per key, after a touch() of all the request's keys: the first
    lookup of a touched key looks up the rest of the touched keys in one daemon call, and later
    lookups of the same request are answered from that (until any other manager call).

    Admission: vLLM 0.20 calls complete_store only when the storing request finishes, so a key
    this manager prepared for a store and has not completed answers False (recompute now, as
    vLLM's CPU manager does); None (ask again next step) only for a key being written by a
    store that is already committed (its copy in flight, bounded by PENDING_TIMEOUT_S)."""

    def __init__(self, core_):
        self.core = core_
        self._touched = {}   # key -> position in the last touch
        self._touched_keys = []
        self._states = {}    # key -> KeyState, from one batched lookup

    def _forget(self):
        self._states = {}

    @gen_common.never_raises(False)
    def lookup(self, key, req_context=None):
        key = core.as_key(key)
        state = self._states.get(key)
        if state is None:
            pos = self._touched.get(key)
            if pos is not None:
                batch = self._touched_keys[pos:]
                states = self.core.lookup_many(batch, _OWN_PENDING_IS_MISS)
                self._states = dict(zip(batch, states))
                state = self._states.get(key, KeyState.MISS)
            else:
                state = self.core.lookup(key, _OWN_PENDING_IS_MISS)
        if state == KeyState.HIT:
            return True
        if state == KeyState.HIT_PENDING:
            return None  # being written: vLLM asks again in a later step
        return False

    @gen_common.never_raises(lambda: KvoffloadLoadStoreSpec([], failed=True))
    def prepare_load(self, keys, req_context=None):
        self._forget()
        return gen_common.load_spec(self.core, keys, KvoffloadLoadStoreSpec)

    @gen_common.never_raises(None)
    def touch(self, keys):
        keys = core.unique(keys)
        self._touched_keys = keys
        self._touched = {k: i for i, k in enumerate(keys)}
        self._states = {}
        self.core.touch(keys)

    @gen_common.never_raises(None)
    def complete_load(self, keys):
        self._forget()
        self.core.complete_load(keys)

    @gen_common.never_raises(None)
    def prepare_store(self, keys, req_context=None):
        self._forget()
        return gen_common.store_output(self.core, keys, KvoffloadLoadStoreSpec,
                                       PrepareStoreOutput)

    @gen_common.never_raises(None)
    def complete_store(self, keys, success=True):
        self._forget()
        self.core.complete_store(keys, success=success)

    @gen_common.never_raises(list)
    def take_events(self):
        return self.core.take_events()

    @gen_common.never_raises(None)
    def shutdown(self):
        self.core.close()


def _event(keys, removed):
    return OffloadingEvent(keys=keys, medium=EVENT_MEDIUM, removed=removed)


class KvoffloadTransferHandler(OffloadingHandler):
    """One direction (store: GPU -> KVOFFLOAD, load: KVOFFLOAD -> GPU) of the worker core."""

    def __init__(self, worker_core, direction):
        self.core = worker_core
        self._direction = direction
        self._type = _STORE_TYPE if direction == core.STORE else _LOAD_TYPE

    def transfer_async(self, job_id, spec):
        return gen_common.submit(self.core, self._direction, job_id, spec,
                                 KvoffloadLoadStoreSpec)

    @gen_common.never_raises(list)
    def get_finished(self):
        return [TransferResult(job_id=f.vllm_id, success=f.ok, transfer_size=f.nbytes,
                               transfer_time=f.seconds, transfer_type=self._type)
                for f in self.core.get_finished(self._direction)]

    @gen_common.never_raises(None)
    def wait(self, job_ids):
        self.core.wait(set(job_ids), self._direction)

    @gen_common.never_raises(None)
    def shutdown(self):
        self.core.close()


def _block_size_factor(spec):
    return int(getattr(spec, "block_size_factor", 1) or 1)


class KvoffloadSpec(OffloadingSpec):
    """OffloadingSpec of vLLM 0.20 over kvoffloadd (docs/vllm.md)."""

    def __init__(self, vllm_config, kv_cache_config):
        super().__init__(vllm_config, kv_cache_config)
        self.settings = config.settings(self.extra_config)
        self.engine_spec = config.engine_spec(vllm_config, kv_cache_config, self.extra_config,
                                              block_size_factor=_block_size_factor(self))
        self._manager = None
        self._worker_core = None

    def get_manager(self):
        if self._manager is None:
            events = getattr(self.vllm_config, "kv_events_config", None)
            enabled = bool(getattr(events, "enable_kv_cache_events", False))
            self._manager = KvoffloadManager(gen_common.manager_core(
                self.settings, self.engine_spec, _event if enabled else None))
        return self._manager

    def get_handlers(self, kv_caches, attn_backends=None):
        if self._worker_core is None:
            if isinstance(kv_caches, dict):
                raise KvoffloadError(
                    StatusCode.FAILED_PRECONDITION,
                    "kvoffload.vllm takes canonical KV caches (vLLM 0.20 get_handlers(kv_caches:"
                    " CanonicalKVCaches)); this vLLM passed a dict of tensors")
            self._worker_core = gen_common.worker_core(
                self.settings, self.engine_spec, config.model_parallel_rank(self.vllm_config),
                kv_caches.tensors, vllm_replicated=False)
        yield GPULoadStoreSpec, KvoffloadLoadStoreSpec, KvoffloadTransferHandler(
            self._worker_core, core.STORE)
        yield KvoffloadLoadStoreSpec, GPULoadStoreSpec, KvoffloadTransferHandler(
            self._worker_core, core.LOAD)
