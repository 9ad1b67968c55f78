"""The vLLM 2026-08 generation (vLLM main of 2026-08-17, commit 017e9f4): a thin adapter over
core.ManagerCore and core.WorkerCore.

That generation's interface (vllm.v1.kv_offload.{base, config, factory}):
OffloadingSpec(config: OffloadingConfig) with tokens_per_block, blocks_per_chunk,
replicated_layout (the spec's own choice), kv_events_config; get_manager(); get_worker(kv_caches)
-> OffloadingWorker(submit_store(job_id, src: GPULoadStoreSpec, dst), submit_load(job_id, src,
dst: GPULoadStoreSpec), get_finished() -> [TransferResult(job_id, success, transfer_size,
transfer_time)], wait(job_ids), shutdown()); OffloadingManager with req_context on every call:
lookup(key, ctx) -> LookupResult, prepare_load/prepare_store(keys, ctx), touch/complete_load(keys,
ctx), complete_store(keys, ctx, success=True), on_new_request(ctx) -> RequestOffloadingContext,
on_request_finished, on_schedule_end, has_pending_work, reset_cache, get_stats, shutdown;
OffloadingEvent(keys, medium: Medium, removed, locality).

Under vLLM's replicated layout (pure MLA, TP only, mp, one node) only rank 0's worker is ever
called for stores; the engine is opened with stores_by_writer_only so the daemon finishes a
store on rank 0's part alone.
"""

from vllm.v1.kv_offload.base import (BlockIDsLoadStoreSpec, Locality,  # noqa: F401
                                     LookupResult, Medium, OffloadingEvent, OffloadingManager,
                                     OffloadingSpec, OffloadingWorker, OffloadPolicy,
                                     PrepareStoreOutput, RequestOffloadingContext,
                                     TransferResult)

from ..client import KeyState
from . import config, core, gen_common

GENERATION = "2026-08"
EVENT_MEDIUM = Medium.CPU  # kvoffload rows are host memory on this node
EVENT_LOCALITY = Locality.LOCAL


class KvoffloadLoadStoreSpec(gen_common.RowSpecMixin, BlockIDsLoadStoreSpec):
    """Rows of the engine's kvoffload region (gen_common.RowSpecMixin)."""


_LOOKUP = {KeyState.HIT: LookupResult.HIT, KeyState.HIT_PENDING: LookupResult.HIT_PENDING}


def _allows_cpu(req_context):
    tier_filter = getattr(req_context, "load_tier_filter", None)
    if tier_filter is None:
        return True
    try:
        return bool(tier_filter.allows(EVENT_MEDIUM, EVENT_LOCALITY))
    except Exception:  # noqa: BLE001 — a filter we cannot read does not hide the cache
        return True


class KvoffloadManager(OffloadingManager):
    """The 2026-08 generation's OffloadingManager over core.ManagerCore.

    vLLM asks lookup() one key at a time, and touches the request's keys only after its
    lookups. Admission never costs a step: a key not known from a touch is looked up alone and
    answered at once (HIT in the same scheduling step; never RETRY). Once a touch gave the
    request's keys, the next attempt's first lookup looks up all of them from its position in
    one call, and that attempt's later lookups are answered from it. Answers are kept only
    within one attempt (cleared by touch, by every store/load call and at the end of each
    scheduler step), so they are never staler than the daemon's own answer in the same step.
    HIT_PENDING is answered only for a store vLLM has submitted: this generation calls
    complete_store when the store job ends, so a pending key's copy is in flight and bounded
    (PENDING_TIMEOUT_S)."""

    def __init__(self, core_):
        self.core = core_
        self._keys = {}        # req_id -> {key: position}, from the request's last touch
        self._key_lists = {}   # req_id -> [keys], same order
        self._states = {}      # req_id -> {key: KeyState}, this attempt's batched lookup

    def _forget_states(self):
        self._states = {}

    @gen_common.never_raises(LookupResult.MISS)
    def lookup(self, key, req_context):
        if not _allows_cpu(req_context):
            return LookupResult.MISS
        key = core.as_key(key)
        rid = getattr(req_context, "req_id", None)
        states = self._states.get(rid)
        if states is not None and key in states:
            return _LOOKUP.get(states[key], LookupResult.MISS)
        pos = self._keys.get(rid, {}).get(key)
        if pos is not None:
            batch = self._key_lists[rid][pos:]
            states = dict(zip(batch, self.core.lookup_many(batch)))
            self._states[rid] = states
            return _LOOKUP.get(states.get(key), LookupResult.MISS)
        return _LOOKUP.get(self.core.lookup(key), LookupResult.MISS)

    @gen_common.never_raises(lambda: KvoffloadLoadStoreSpec([], failed=True))
    def prepare_load(self, keys, req_context):
        self._forget_states()
        return gen_common.load_spec(self.core, keys, KvoffloadLoadStoreSpec)

    @gen_common.never_raises(None)
    def touch(self, keys, req_context=None):
        keys = core.unique(keys)
        rid = getattr(req_context, "req_id", None)
        if rid is not None:
            self._key_lists[rid] = keys
            self._keys[rid] = {k: i for i, k in enumerate(keys)}
            self._states.pop(rid, None)
        self.core.touch(keys)

    @gen_common.never_raises(None)
    def complete_load(self, keys, req_context=None):
        self._forget_states()
        self.core.complete_load(keys)

    @gen_common.never_raises(None)
    def prepare_store(self, keys, req_context):
        self._forget_states()
        return gen_common.store_output(self.core, keys, KvoffloadLoadStoreSpec,
                                       PrepareStoreOutput)

    @gen_common.never_raises(None)
    def complete_store(self, keys, req_context=None, success=True):
        self._forget_states()
        self.core.complete_store(keys, success=success)

    def on_new_request(self, req_context):
        return RequestOffloadingContext(policy=OffloadPolicy.BLOCK_LEVEL)

    def on_request_finished(self, req_context):
        rid = getattr(req_context, "req_id", None)
        for table in (self._keys, self._key_lists, self._states):
            table.pop(rid, None)

    @gen_common.never_raises(list)
    def take_events(self):
        return self.core.take_events()

    def on_schedule_end(self, context):
        self._states = {}

    def has_pending_work(self):
        return False

    @gen_common.never_raises(None)
    def reset_cache(self):
        self._forget_states()
        self.core.reset()

    def get_stats(self):
        return None

    @gen_common.never_raises(None)
    def shutdown(self):
        self.core.close()


def _event(keys, removed):
    return OffloadingEvent(keys=keys, medium=EVENT_MEDIUM, removed=removed,
                           locality=EVENT_LOCALITY)


class KvoffloadWorker(OffloadingWorker):
    """The 2026-08 generation's OffloadingWorker over core.WorkerCore."""

    def __init__(self, worker_core):
        self.core = worker_core

    def submit_store(self, job_id, src_spec, dst_spec):
        return gen_common.submit(self.core, core.STORE, job_id, (src_spec, dst_spec),
                                 KvoffloadLoadStoreSpec)

    def submit_load(self, job_id, src_spec, dst_spec):
        return gen_common.submit(self.core, core.LOAD, job_id, (src_spec, dst_spec),
                                 KvoffloadLoadStoreSpec)

    @gen_common.never_raises(list)
    def get_finished(self):
        return [TransferResult(job_id=f.vllm_id, success=f.ok, transfer_size=f.nbytes,
                               transfer_time=f.seconds)
                for f in self.core.get_finished()]

    @gen_common.never_raises(None)
    def wait(self, job_ids):
        self.core.wait(set(job_ids))

    @gen_common.never_raises(None)
    def shutdown(self):
        self.core.close()


class KvoffloadSpec(OffloadingSpec):
    """OffloadingSpec of the vLLM 2026-08 generation over kvoffloadd (docs/vllm.md)."""

    def __init__(self, config_):
        super().__init__(config_)
        # vLLM's choice, kept: only rank 0 stores under it (its OffloadingConnectorWorker reads
        # spec.replicated_layout); the daemon is told so and must agree (checked at start-up).
        self.replicated_layout = bool(getattr(config_, "replicated_layout", False))
        self.settings = config.settings(self.extra_config)
        self.engine_spec = gen_common.with_writer_only(
            config.engine_spec_from_offloading_config(config_, self.replicated_layout),
            self.replicated_layout)
        self._manager = None
        self._worker = None

    def get_manager(self):
        if self._manager is None:
            enabled = bool(self.kv_events_config.enable_kv_cache_events)
            self._manager = KvoffloadManager(gen_common.manager_core(
                self.settings, self.engine_spec, _event if enabled else None,
                vllm_replicated=self.replicated_layout))
        return self._manager

    def get_worker(self, kv_caches):
        if self._worker is None:
            self._worker = KvoffloadWorker(gen_common.worker_core(
                self.settings, self.engine_spec, int(self.config.parallel.rank),
                kv_caches.tensors, vllm_replicated=self.replicated_layout))
        return self._worker
