"""KvoffloadSpec: the OffloadingSpec vLLM's OffloadingConnector loads by name
(kv_connector_extra_config {"spec_name": "KvoffloadSpec", "spec_module_path": "kvoffload.vllm"}).

Scheduler process: get_manager() opens this engine's region on the node's kvoffloadd
(Scheduler.open) and returns a KvoffloadManager. Worker processes: get_handlers(kv_caches)
registers the worker's canonical KV tensors once (Worker.connect_cuda, rank = the vLLM
model-parallel rank) and yields the GPU→kvoffload and kvoffload→GPU handlers.

Both fail at start-up, not in a step, with what to do: no daemon (UNAVAILABLE naming the
socket), no permission (PERMISSION_DENIED naming the group), a topology the daemon refuses (its
`rule ...` text and the extra_config key to set), a budget over the node cap
(RESOURCE_EXHAUSTED, which knob to turn).
"""

import logging
import os

from ..client import KvoffloadError, Scheduler, StatusCode
from . import MEDIUM, PINNED_VLLM_VERSION, config
from ._vllm import BlockIDsLoadStoreSpec, GPULoadStoreSpec, OffloadingSpec

logger = logging.getLogger("kvoffload.vllm")


class KvoffloadLoadStoreSpec(BlockIDsLoadStoreSpec):
    """Rows of the engine's kvoffload region (block_ids are row numbers), with the region epoch
    they were planned in and the scheduler's job nonce (the daemon's job id of a vLLM job is
    job_nonce << 32 | job_id, unique across restarts of the engine on one region). A store's
    spec also names its keys: a worker whose store job failed completes them with
    success=False itself, before vLLM's scheduler hears of the job."""

    def __init__(self, rows, region_epoch=0, job_nonce=0, keys=()):
        super().__init__(list(rows))
        self.region_epoch = region_epoch
        self.job_nonce = job_nonce
        self.keys = list(keys)

    @staticmethod
    def medium():
        return MEDIUM


def _block_size_factor(spec):
    """offloaded block size / GPU block size, whatever the vLLM version calls it."""
    gpu = spec.gpu_block_size
    gpu = gpu[0] if isinstance(gpu, (tuple, list)) else gpu
    factor, rest = divmod(int(spec.offloaded_block_size), int(gpu))
    if rest or factor < 1:
        raise config.config_error("block_size %s is not a multiple of the GPU block size %s" %
                                  (spec.offloaded_block_size, gpu))
    return factor


class KvoffloadSpec(OffloadingSpec):
    """OffloadingSpec of vLLM PINNED_VLLM_VERSION over kvoffloadd (docs/vllm.md)."""

    def __init__(self, vllm_config, kv_cache_config=None):
        if kv_cache_config is None:
            raise KvoffloadError(
                StatusCode.FAILED_PRECONDITION,
                "kvoffload.vllm needs a vLLM whose OffloadingSpec takes the KV cache config "
                "(pinned: vLLM %s)" % PINNED_VLLM_VERSION)
        super().__init__(vllm_config, kv_cache_config)
        self.kv_cache_config = kv_cache_config
        self.settings = config.settings(self.extra_config)
        self.block_size_factor_rows = _block_size_factor(self)
        self.engine_spec = config.engine_spec(vllm_config, kv_cache_config, self.extra_config,
                                              block_size_factor=self.block_size_factor_rows)
        self._scheduler = None
        self._manager = None
        self._session = None

    def _open_scheduler(self):
        try:
            return Scheduler.open(self.settings.socket_path, self.engine_spec,
                                  open_timeout_s=self.settings.open_timeout_s,
                                  call_timeout_s=self.settings.call_timeout_s)
        except KvoffloadError as e:
            raise config.explain(e, self.engine_spec, self.settings.socket_path) from None

    def get_manager(self):
        if self._manager is None:
            from .manager import KvoffloadManager
            self._scheduler = self._open_scheduler()
            g = self._scheduler.geometry
            logger.info("kvoffload: engine %s/%d %s region on %s: %d rows of %d bytes (%s)",
                        self.engine_spec.engine_id, self.engine_spec.dp_rank,
                        "created" if g.created else "joined", self.settings.socket_path,
                        g.num_rows, g.row_bytes, "replicated" if g.replicated else "per rank")
            events = getattr(self.vllm_config, "kv_events_config", None)
            self._manager = KvoffloadManager(
                self._scheduler, block_size=self.offloaded_block_size,
                job_nonce=int.from_bytes(os.urandom(4), "little") or 1,
                enable_events=bool(getattr(events, "enable_kv_cache_events", False)),
                reopen=self._open_scheduler)
        return self._manager

    def get_handlers(self, kv_caches, attn_backends=None):
        if self._session is None:
            from . import handlers
            if isinstance(kv_caches, dict):
                raise KvoffloadError(
                    StatusCode.FAILED_PRECONDITION,
                    "kvoffload.vllm takes canonical KV caches (vLLM %s get_handlers(kv_caches: "
                    "CanonicalKVCaches)); this vLLM passed a dict of tensors" %
                    PINNED_VLLM_VERSION)
            self._session = handlers.connect(self.settings, self.engine_spec,
                                             handlers.model_parallel_rank(self.vllm_config),
                                             kv_caches, open_index=self._open_scheduler)
        yield GPULoadStoreSpec, KvoffloadLoadStoreSpec, self._session.store_handler
        yield KvoffloadLoadStoreSpec, GPULoadStoreSpec, self._session.load_handler
