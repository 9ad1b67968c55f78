"""The adapter layer: KvoffloadSpec, KvoffloadManager and KvoffloadLoadStoreSpec assembled for
the running vLLM from the capability table (kvoffload.vllm.capabilities), over the one manager
core (core.ManagerCore, with the request-level batching of lookups.RequestLookups) and the one
worker core (core.WorkerCore). The transfers go through one of two small files, by the
"transfers" row: transfer_handlers.py (OffloadingHandlers behind vLLM's own OffloadingWorker,
0.20 to 0.24) or transfer_worker.py (an OffloadingWorker, 0.25 and later).

Importing this module detects the running vLLM (ImportError when the table cannot serve it).
The classes are defined at module level, so that vLLM can pickle them by qualified name
(KvoffloadLoadStoreSpec travels to the worker processes in the connector's metadata).
"""

from ..client import KeyState, KvoffloadError, StatusCode
from . import capabilities, config, core, gen_common, lookups

API = capabilities.running()
CHOICE = API.choice

_ENUM_ANSWERS = CHOICE["lookup_result"] == "enum"
if _ENUM_ANSWERS:
    _MISS = API.LookupResult.MISS
    _ANSWER = {KeyState.HIT: API.LookupResult.HIT,
               KeyState.HIT_PENDING: API.LookupResult.HIT_PENDING}
else:  # lookup -> True (hit), None (ask again in a later step), False (miss)
    _MISS = False
    _ANSWER = {KeyState.HIT: True, KeyState.HIT_PENDING: None}

EVENT_MEDIUM = API.Medium.CPU if CHOICE["event"].endswith("_enum") else "CPU"  # host memory
EVENT_LOCALITY = API.Locality.LOCAL if "locality" in CHOICE["event"] else None


class KvoffloadLoadStoreSpec(gen_common.RowSpecMixin, API.BlockIDsLoadStoreSpec):
    """Rows of the engine's kvoffload region (gen_common.RowSpecMixin)."""

    if CHOICE["spec_medium"] == "medium":
        @staticmethod
        def medium():
            return capabilities.MEDIUM  # routes transfers to kvoffload's handlers


def make_event(keys, removed):
    if EVENT_LOCALITY is not None:
        return API.OffloadingEvent(keys=keys, medium=EVENT_MEDIUM, removed=removed,
                                   locality=EVENT_LOCALITY)
    return API.OffloadingEvent(keys=keys, medium=EVENT_MEDIUM, removed=removed)


def _allows_cpu(req_context):
    tier_filter = getattr(req_context, "load_tier_filter", None)
    if tier_filter is None:
        return True
    try:
        return bool(tier_filter.allows(EVENT_MEDIUM, EVENT_LOCALITY))
    except Exception:  # noqa: BLE001 — a filter we cannot read does not hide the cache
        return True


def _token(req_context):
    """The request a call is about, for the batching of lookups (lookups.RequestLookups)."""
    if CHOICE["request_context"] == "none":
        return None  # 0.20: touch() carries no request; the last touch is the request
    if CHOICE["request_id"] == "req_id":
        return getattr(req_context, "req_id", None)
    return id(req_context)  # 0.21: one ReqContext object per request, no req_id


class KvoffloadManager(API.OffloadingManager):
    """vLLM's OffloadingManager over core.ManagerCore. vLLM asks lookup() one key at a time;
    lookups.RequestLookups answers a request's scan from one daemon call once its keys are
    known. Admission (docs/vllm.md): READY answers a hit in the same step; a key this manager
    prepared for a store answers a miss where vLLM completes stores only at the end of the
    storing request (0.20) and, later, until its job is submitted (the next step); then
    pending while its copy is in flight (bounded by PENDING_TIMEOUT_S); never RETRY."""

    def __init__(self, core_):
        self.core = core_
        self.lookups = lookups.RequestLookups(
            core_, own_store_pending_is_miss=CHOICE["request_context"] == "none")

    @gen_common.never_raises(_MISS)
    def lookup(self, key, req_context=None):
        if not _allows_cpu(req_context):
            return _MISS
        state = self.lookups.lookup(_token(req_context), core.as_key(key))
        return _ANSWER.get(state, _MISS)

    @gen_common.never_raises(lambda: KvoffloadLoadStoreSpec([], failed=True))
    def prepare_load(self, keys, req_context=None):
        self.lookups.end_scan()
        return gen_common.load_spec(self.core, keys, KvoffloadLoadStoreSpec)

    @gen_common.never_raises(None)
    def touch(self, keys, req_context=None):
        keys = core.unique(keys)
        self.lookups.touched(_token(req_context), keys)
        self.core.touch(keys)

    @gen_common.never_raises(None)
    def complete_load(self, keys, req_context=None):
        self.lookups.end_scan()
        self.core.complete_load(keys)

    @gen_common.never_raises(None)
    def prepare_store(self, keys, req_context=None):
        self.lookups.end_scan()
        return gen_common.store_output(self.core, keys, KvoffloadLoadStoreSpec,
                                       API.PrepareStoreOutput)

    if CHOICE["request_context"] == "none":
        @gen_common.never_raises(None)
        def complete_store(self, keys, success=True):
            self.lookups.end_scan()
            self.core.complete_store(keys, success=success)
    else:
        @gen_common.never_raises(None)
        def complete_store(self, keys, req_context=None, success=True):
            self.lookups.end_scan()
            self.core.complete_store(keys, success=success)

    if CHOICE["request_policy"] == "block_level":
        def on_new_request(self, req_context):
            return API.RequestOffloadingContext(policy=API.OffloadPolicy.BLOCK_LEVEL)

    @gen_common.never_raises(None)
    def on_request_finished(self, req_context):
        self.lookups.finished(_token(req_context))

    @gen_common.never_raises(None)
    def on_schedule_end(self, context=None):
        self.lookups.end_scan()
        self.core.step_end()

    def has_pending_work(self):
        return False  # nothing of kvoffload's needs a scheduler step to progress

    @gen_common.never_raises(None)
    def reset_cache(self):
        self.lookups.end_scan()
        self.core.reset()

    def get_stats(self):
        return None

    @gen_common.never_raises(list)
    def take_events(self):
        return self.core.take_events()

    @gen_common.never_raises(None)
    def shutdown(self):
        self.core.close()


def _block_size_factor(spec):
    return int(getattr(spec, "block_size_factor", 1) or 1)


class KvoffloadSpec(API.OffloadingSpec):
    """vLLM's OffloadingSpec over kvoffloadd (docs/vllm.md)."""

    if CHOICE["spec_constructor"] == "vllm_config":
        def __init__(self, vllm_config, kv_cache_config):
            super().__init__(vllm_config, kv_cache_config)
            self.replicated_layout = False  # every rank stores in these releases
            self.settings = config.settings(self.extra_config)
            self.engine_spec = config.engine_spec(vllm_config, kv_cache_config,
                                                  self.extra_config,
                                                  block_size_factor=_block_size_factor(self))
            self._manager = None
            self._worker_core = None

        def _rank(self):
            return config.model_parallel_rank(self.vllm_config)
    else:
        def __init__(self, config_):
            super().__init__(config_)
            # vLLM's choice where it makes one (only rank 0 stores under it: its connector
            # worker reads spec.replicated_layout); the daemon is told so and must agree
            # (checked at start-up).
            self.replicated_layout = bool(getattr(config_, "replicated_layout", False))
            self.settings = config.settings(self.extra_config)
            spec = config.engine_spec_from_offloading_config(config_, self.replicated_layout)
            self.engine_spec = gen_common.with_writer_only(spec, self.replicated_layout)
            self._manager = None
            self._worker_core = None

        def _rank(self):
            return int(self.config.parallel.rank)

    def _events_enabled(self):
        if CHOICE["kv_events_config"] == "spec":
            return bool(self.kv_events_config.enable_kv_cache_events)
        events = getattr(self.vllm_config, "kv_events_config", None)
        return bool(getattr(events, "enable_kv_cache_events", False))

    def get_manager(self):
        if self._manager is None:
            self._manager = KvoffloadManager(gen_common.manager_core(
                self.settings, self.engine_spec, make_event if self._events_enabled() else None,
                vllm_replicated=self.replicated_layout))
        return self._manager

    def _core(self, kv_caches):
        if self._worker_core is None:
            if isinstance(kv_caches, dict):
                raise KvoffloadError(
                    StatusCode.FAILED_PRECONDITION,
                    "kvoffload.vllm takes canonical KV caches (CanonicalKVCaches); this vLLM "
                    "passed a dict of tensors")
            self._worker_core = gen_common.worker_core(
                self.settings, self.engine_spec, self._rank(), kv_caches.tensors,
                vllm_replicated=self.replicated_layout)
        return self._worker_core

    if CHOICE["transfers"] == "handlers":
        def get_handlers(self, kv_caches, attn_backends=None):
            from . import transfer_handlers
            return transfer_handlers.handlers(self._core(kv_caches))
    else:
        def get_worker(self, kv_caches):
            from . import transfer_worker
            return transfer_worker.KvoffloadWorker(self._core(kv_caches))
