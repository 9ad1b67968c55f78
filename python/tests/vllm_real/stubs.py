"""Stand-ins for the parts of vLLM the real-source harness does not load.

install(src_root) makes `vllm` importable from an unmodified vLLM source folder
(<src_root>/vllm/..., materialised by prepare.sh from MANIFEST.tsv) without running any vLLM
package __init__: every package directory becomes an empty module whose __path__ is the real
directory, so `import vllm.v1.kv_offload.base` executes exactly the real file. The modules
vLLM's offloading code imports from the rest of vLLM (config, logger, request, scheduler
output, KV cache config, kv_events, ...) are replaced by the small classes below. They are this
project's own code, written against the attribute names the real files use; only the fields
those files read are modelled. numpy and torch are real.
"""

import dataclasses
import enum
import importlib
import logging
import os
import sys
import types
from dataclasses import dataclass, field
from typing import Any, Optional

logger = logging.getLogger("vllm")

STUBBED = []  # names of the modules this file provides (for the run log)


# ---------------------------------------------------------------- logger
class _Logger(logging.LoggerAdapter):
    def process(self, msg, kwargs):
        return msg, kwargs

    def _once(self, level, msg, *args, **kw):
        key = (level, msg)
        if key in _ONCE:
            return
        _ONCE.add(key)
        self.log(level, msg, *args, **kw)

    def warning_once(self, msg, *args, **kw):
        self._once(logging.WARNING, msg, *args)

    def info_once(self, msg, *args, **kw):
        self._once(logging.INFO, msg, *args)

    def debug_once(self, msg, *args, **kw):
        self._once(logging.DEBUG, msg, *args)


_ONCE = set()


def init_logger(name):
    return _Logger(logging.getLogger(name), {})


# ---------------------------------------------------------------- config
@dataclass
class KVTransferConfig:
    kv_connector: str = "OffloadingConnector"
    kv_role: str = "kv_both"
    engine_id: Optional[str] = None
    kv_connector_extra_config: dict = field(default_factory=dict)

    @property
    def is_kv_producer(self):
        return self.kv_role in ("kv_producer", "kv_both")

    @property
    def is_kv_consumer(self):
        return self.kv_role in ("kv_consumer", "kv_both")


@dataclass
class KVEventsConfig:
    enable_kv_cache_events: bool = False


@dataclass
class CacheConfig:
    block_size: int = 16
    enable_prefix_caching: bool = True
    cache_dtype: str = "auto"
    prefix_match_unit: Optional[int] = None


@dataclass
class ParallelConfig:
    tensor_parallel_size: int = 1
    pipeline_parallel_size: int = 1
    prefill_context_parallel_size: int = 1
    decode_context_parallel_size: int = 1
    cp_kv_cache_interleave_size: int = 1
    data_parallel_size: int = 1
    data_parallel_rank: int = 0
    data_parallel_index: int = 0
    data_parallel_rank_local: Optional[int] = None
    distributed_executor_backend: Optional[str] = None
    nnodes: int = 1
    nnodes_within_dp: int = 1
    rank: int = 0

    @property
    def world_size(self):
        return self.tensor_parallel_size * self.pipeline_parallel_size * \
            self.prefill_context_parallel_size


@dataclass
class ModelConfig:
    model: str = "harness/tiny"
    dtype: str = "float16"
    use_mla: bool = False
    total_num_kv_heads: int = 2

    def get_total_num_kv_heads(self):
        return self.total_num_kv_heads


@dataclass
class VllmConfig:
    model_config: ModelConfig = field(default_factory=ModelConfig)
    cache_config: CacheConfig = field(default_factory=CacheConfig)
    parallel_config: ParallelConfig = field(default_factory=ParallelConfig)
    kv_transfer_config: Optional[KVTransferConfig] = None
    kv_events_config: Optional[KVEventsConfig] = None
    speculative_config: Any = None
    use_v2_model_runner: bool = False
    # layer name -> object with get_attn_backend() (read by get_layers_from_vllm_config)
    harness_layers: dict = field(default_factory=dict)


def get_layers_from_vllm_config(vllm_config, layer_type=None, layer_names=None):
    layers = vllm_config.harness_layers
    names = layer_names if layer_names is not None else list(layers)
    return {n: layers[n] for n in names if n in layers}


_current_vllm_config = [None]


def get_current_vllm_config():
    return _current_vllm_config[0]


# ---------------------------------------------------------------- KV cache interface
class KVQuantMode(enum.Enum):
    NONE = 0

    @property
    def is_per_token_head(self):
        return False


@dataclass(frozen=True)
class KVCacheSpec:
    block_size: int

    @property
    def page_size_bytes(self):
        raise NotImplementedError


@dataclass(frozen=True)
class AttentionSpec(KVCacheSpec):
    num_kv_heads: int = 1
    head_size: int = 64
    dtype: Any = None  # torch dtype
    page_size_padded: Optional[int] = None
    kv_quant_mode: KVQuantMode = KVQuantMode.NONE
    compress_ratio: int = 1

    @property
    def _elem(self):
        import torch
        return torch.empty((), dtype=self.dtype).element_size()

    @property
    def real_page_size_bytes(self):
        return 2 * self.block_size * self.num_kv_heads * self.head_size * self._elem

    @property
    def page_size_bytes(self):
        return self.page_size_padded or self.real_page_size_bytes

    @property
    def unpadded_page_size_bytes(self):
        return self.real_page_size_bytes


@dataclass(frozen=True)
class FullAttentionSpec(AttentionSpec):
    sliding_window: Optional[int] = None
    attention_chunk_size: Optional[int] = None


@dataclass(frozen=True)
class MLAAttentionSpec(FullAttentionSpec):
    cache_dtype_str: Optional[str] = None

    @property
    def real_page_size_bytes(self):
        return self.block_size * self.num_kv_heads * self.head_size * self._elem


@dataclass(frozen=True)
class SlidingWindowSpec(AttentionSpec):
    sliding_window: int = 0


@dataclass(frozen=True)
class ChunkedLocalAttentionSpec(AttentionSpec):
    attention_chunk_size: int = 0


@dataclass(frozen=True)
class MambaSpec(KVCacheSpec):
    shapes: tuple = ()
    dtypes: tuple = ()
    page_size_padded: Optional[int] = None
    mamba_cache_mode: str = "none"

    @property
    def page_size_bytes(self):
        return self.page_size_padded or 0


@dataclass(frozen=True)
class UniformTypeKVCacheSpecs(KVCacheSpec):
    kv_cache_specs: dict = field(default_factory=dict)


@dataclass
class KVCacheTensor:
    size: int
    shared_by: list
    block_stride: int = 0


@dataclass
class KVCacheGroupSpec:
    layer_names: list
    kv_cache_spec: KVCacheSpec
    is_eagle_group: bool = False


@dataclass
class KVCacheConfig:
    num_blocks: int
    kv_cache_tensors: list
    kv_cache_groups: list


class KVCacheSpecKind(enum.Enum):
    FULL_ATTENTION = "full_attention"
    SLIDING_WINDOW = "sliding_window"
    MLA = "mla"
    OTHER = "other"


def get_kv_cache_spec_kind(spec):
    if isinstance(spec, MLAAttentionSpec):
        return KVCacheSpecKind.MLA
    if isinstance(spec, SlidingWindowSpec):
        return KVCacheSpecKind.SLIDING_WINDOW
    if isinstance(spec, FullAttentionSpec):
        return KVCacheSpecKind.FULL_ATTENTION
    return KVCacheSpecKind.OTHER


def get_kv_cache_spec_sliding_window(spec):
    return getattr(spec, "sliding_window", None)


# kv_cache_utils (2026-08 generation)
def resolve_kv_cache_block_sizes(kv_cache_config, vllm_config):
    bs = vllm_config.cache_config.block_size * \
        vllm_config.parallel_config.decode_context_parallel_size
    if len(kv_cache_config.kv_cache_groups) > 1:
        raise NotImplementedError("harness: one KV cache group only")
    return bs, bs


def maybe_convert_block_hash(h):
    return h


def resolve_block_hashes(block_hashes, hash_block_size, block_size, **kw):
    if block_size == hash_block_size:
        return block_hashes
    factor = block_size // hash_block_size
    return block_hashes[factor - 1::factor]


# ---------------------------------------------------------------- requests and scheduler I/O
class RequestStatus(enum.IntEnum):
    WAITING = enum.auto()
    WAITING_FOR_FSM = enum.auto()
    WAITING_FOR_REMOTE_KVS = enum.auto()
    RUNNING = enum.auto()
    PREEMPTED = enum.auto()
    FINISHED_STOPPED = enum.auto()
    FINISHED_LENGTH_CAPPED = enum.auto()
    FINISHED_ABORTED = enum.auto()
    FINISHED_IGNORED = enum.auto()
    FINISHED_ERROR = enum.auto()

    @staticmethod
    def is_finished(status):
        return status > RequestStatus.PREEMPTED


class Request:
    """The fields of vllm.v1.request.Request the offloading code reads."""

    def __init__(self, request_id, prompt_token_ids, max_tokens, block_hasher,
                 kv_transfer_params=None):
        self.request_id = request_id
        self.prompt_token_ids = list(prompt_token_ids)
        self._output_token_ids = []
        self.num_prompt_tokens = len(self.prompt_token_ids)
        self.max_tokens = max_tokens
        self.num_computed_tokens = 0
        self.status = RequestStatus.WAITING
        self.kv_transfer_params = kv_transfer_params
        self.skip_reading_prefix_cache = False
        self.lora_request = None
        self.mm_features = []
        self.cache_salt = None
        self.num_preemptions = 0
        self._block_hasher = block_hasher
        self.block_hashes = []
        self.update_block_hashes()

    @property
    def all_token_ids(self):
        return self.prompt_token_ids + self._output_token_ids

    @property
    def output_token_ids(self):
        return self._output_token_ids

    @property
    def num_tokens(self):
        return len(self.prompt_token_ids) + len(self._output_token_ids)

    @property
    def num_output_tokens(self):
        return len(self._output_token_ids)

    def append_output_token_ids(self, token):
        self._output_token_ids.append(token)
        self.update_block_hashes()

    def update_block_hashes(self):
        self.block_hashes.extend(self._block_hasher(self))

    def is_finished(self):
        return RequestStatus.is_finished(self.status)

    def get_finished_reason(self):
        return None


@dataclass
class KVCacheBlock:
    block_id: int
    block_hash: Optional[bytes] = None
    ref_cnt: int = 0
    is_null: bool = False


@dataclass
class KVCacheBlocks:
    blocks: tuple  # per group: list[KVCacheBlock]

    def get_block_ids(self):
        return tuple([b.block_id for b in g] for g in self.blocks)


@dataclass
class NewRequestData:
    req_id: str
    prompt_token_ids: list
    block_ids: tuple
    num_computed_tokens: int


@dataclass
class CachedRequestData:
    req_ids: list = field(default_factory=list)
    resumed_req_ids: set = field(default_factory=set)
    new_token_ids: list = field(default_factory=list)
    all_token_ids: dict = field(default_factory=dict)
    new_block_ids: list = field(default_factory=list)
    num_computed_tokens: list = field(default_factory=list)
    num_output_tokens: list = field(default_factory=list)

    @property
    def num_reqs(self):
        return len(self.req_ids)


@dataclass
class SchedulerOutput:
    scheduled_new_reqs: list
    scheduled_cached_reqs: CachedRequestData
    num_scheduled_tokens: dict
    total_num_scheduled_tokens: int
    finished_req_ids: set
    preempted_req_ids: Optional[set] = None
    scheduled_spec_decode_tokens: dict = field(default_factory=dict)
    # 2026-08: req id -> [(group, block id, boundary)] of partial-tail hand-offs (none here)
    partial_tail_offloads: dict = field(default_factory=dict)
    kv_connector_metadata: Any = None


@dataclass
class KVConnectorOutput:
    finished_sending: Optional[set] = None
    finished_recving: Optional[set] = None
    kv_connector_stats: Any = None
    kv_cache_events: Any = None
    invalid_block_ids: set = field(default_factory=set)
    kv_connector_worker_meta: Any = None
    expected_finished_count: int = 0

    def is_empty(self):
        return not (self.finished_sending or self.finished_recving or
                    self.kv_connector_stats or self.kv_cache_events or self.invalid_block_ids
                    or self.kv_connector_worker_meta)


class ModelRunnerOutput:
    pass


# ---------------------------------------------------------------- kv_events
class KVCacheEvent:
    def __init__(self, **kw):
        self.__dict__.update(kw)

    def __repr__(self):
        return "%s(%s)" % (type(self).__name__, ", ".join(
            "%s=%r" % kv for kv in sorted(self.__dict__.items())))


class BlockStored(KVCacheEvent):
    pass


class BlockRemoved(KVCacheEvent):
    pass


class AllBlocksCleared(KVCacheEvent):
    pass


class KVConnectorKVEvents:
    pass


MEDIUM_GPU = "GPU"
MEDIUM_CPU = "CPU"
MEDIUM_STORAGE = "STORAGE"


# ---------------------------------------------------------------- connector metrics
@dataclass
class KVConnectorStats:
    data: dict = field(default_factory=dict)

    def reset(self):
        self.data = {}

    def aggregate(self, other):
        return self

    def reduce(self):
        return {}

    def is_empty(self):
        return not self.data


class KVConnectorPromMetrics:
    def __init__(self, vllm_config, metric_types, labelnames, per_engine_labelvalues):
        self._vllm_config = vllm_config

    def observe(self, transfer_stats_data, engine_idx=0):
        pass


class PromMetric:
    pass


PromMetricT = Any


# ---------------------------------------------------------------- parallel state
class _Group:
    def __init__(self, rank, size):
        self.rank_in_group = rank
        self.world_size = size


class _ParallelState:
    tp_rank = 0
    tp_size = 1
    pp_rank = 0
    pp_size = 1


PARALLEL = _ParallelState()


def get_tensor_model_parallel_world_size():
    return PARALLEL.tp_size


def get_tensor_model_parallel_rank():
    return PARALLEL.tp_rank


def get_pp_group():
    return _Group(PARALLEL.pp_rank, PARALLEL.pp_size)


def get_tp_group():
    return _Group(PARALLEL.tp_rank, PARALLEL.tp_size)


def get_world_group():
    return _Group(PARALLEL.pp_rank * PARALLEL.tp_size + PARALLEL.tp_rank,
                  PARALLEL.tp_size * PARALLEL.pp_size)


# ---------------------------------------------------------------- attention backends
class AttentionBackend:
    """Stand-in for vllm.v1.attention.backend.AttentionBackend (class methods only)."""

    @staticmethod
    def get_kv_cache_shape(num_blocks, block_size, num_kv_heads, head_size, cache_dtype_str="auto"):
        raise NotImplementedError

    @staticmethod
    def get_kv_cache_stride_order(include_num_layers_dimension=False):
        raise NotImplementedError


class FlashAttnLikeBackend(AttentionBackend):
    """(2, num_blocks, block_size, heads, head) per layer, as FlashAttention."""

    @staticmethod
    def get_kv_cache_shape(num_blocks, block_size, num_kv_heads, head_size, cache_dtype_str="auto"):
        return (2, num_blocks, block_size, num_kv_heads, head_size)

    @staticmethod
    def get_kv_cache_stride_order(include_num_layers_dimension=False):
        # logical (layers, 2, blocks, bs, h, d) -> physical blocks first
        if include_num_layers_dimension:
            return (2, 0, 1, 3, 4, 5)
        return (0, 1, 2, 3, 4)


class BlocksFirstBackend(AttentionBackend):
    """(num_blocks, 2, block_size, heads, head) per layer (FlashInfer-like, blocks first)."""

    @staticmethod
    def get_kv_cache_shape(num_blocks, block_size, num_kv_heads, head_size, cache_dtype_str="auto"):
        return (num_blocks, 2, block_size, num_kv_heads, head_size)

    @staticmethod
    def get_kv_cache_stride_order(include_num_layers_dimension=False):
        if include_num_layers_dimension:
            return (1, 0, 2, 3, 4, 5)
        return (0, 1, 2, 3, 4)


class AttentionMetadata:
    pass


class AttentionLayerBase:
    pass


class ForwardContext:
    pass


class _Platform:
    device_type = "cpu"
    dispatch_key = "CPU"

    def is_cuda(self):
        return False

    def is_cuda_alike(self):
        return False

    def is_rocm(self):
        return False

    def is_pin_memory_available(self):
        return False


def get_kv_cache_layout():
    return "HND"


# ---------------------------------------------------------------- installation
def _yield_req_data(scheduler_output):
    """(req_id, new_block_ids per group or None, resumed-from-preemption) for every request
    scheduled this step: new requests, then the cached ones (vLLM's kv_connector.utils)."""
    for r in scheduler_output.scheduled_new_reqs:
        yield r.req_id, r.block_ids, False
    cached = scheduler_output.scheduled_cached_reqs
    for i, req_id in enumerate(cached.req_ids):
        yield req_id, cached.new_block_ids[i], req_id in cached.resumed_req_ids


def _module(name, **attrs):
    m = types.ModuleType(name)
    m.__dict__.update(attrs)
    m.__harness_stub__ = True
    sys.modules[name] = m
    STUBBED.append(name)
    return m


def _package(name, path):
    m = types.ModuleType(name)
    m.__path__ = [path]
    m.__package__ = name
    m.__file__ = None
    sys.modules[name] = m
    return m


def _cdiv(a, b):
    return -(a // -b)


def install(src_root):
    """Makes `vllm` importable from src_root (a folder holding vllm/...); returns the real
    vLLM modules' directory. Idempotent per process."""
    vllm_dir = os.path.join(os.path.abspath(src_root), "vllm")
    if not os.path.isdir(vllm_dir):
        raise FileNotFoundError("no vllm/ under %s (run prepare.sh)" % src_root)
    if "vllm" in sys.modules:
        if getattr(sys.modules["vllm"], "__path__", [None])[0] != vllm_dir:
            raise RuntimeError("another vllm is already imported in this process")
        return vllm_dir
    # Every package directory of the real tree: an empty module, so no __init__.py runs.
    for dirpath, dirnames, filenames in os.walk(vllm_dir):
        rel = os.path.relpath(dirpath, os.path.dirname(vllm_dir))
        _package(rel.replace(os.sep, "."), dirpath)
    # Packages the stubs live in that the folder may not have.
    for name in ("vllm.v1", "vllm.v1.core", "vllm.v1.core.sched", "vllm.v1.attention",
                 "vllm.v1.attention.backends", "vllm.distributed",
                 "vllm.distributed.kv_transfer", "vllm.distributed.kv_transfer.kv_connector",
                 "vllm.distributed.kv_transfer.kv_connector.v1", "vllm.utils",
                 "vllm.model_executor", "vllm.model_executor.layers"):
        if name not in sys.modules:
            _package(name, os.path.join(os.path.dirname(vllm_dir), *name.split(".")))

    g = globals()
    _module("vllm.logger", init_logger=init_logger)
    _module("vllm.config", VllmConfig=VllmConfig, KVTransferConfig=KVTransferConfig,
            get_layers_from_vllm_config=get_layers_from_vllm_config,
            get_current_vllm_config=get_current_vllm_config)
    _module("vllm.v1.kv_cache_interface", **{n: g[n] for n in (
        "KVCacheSpec", "AttentionSpec", "FullAttentionSpec", "MLAAttentionSpec",
        "SlidingWindowSpec", "ChunkedLocalAttentionSpec", "MambaSpec",
        "UniformTypeKVCacheSpecs", "KVCacheTensor", "KVCacheGroupSpec", "KVCacheConfig",
        "get_kv_cache_spec_kind", "get_kv_cache_spec_sliding_window")})
    _module("vllm.v1.core.kv_cache_utils", BlockHash=bytes,
            resolve_kv_cache_block_sizes=resolve_kv_cache_block_sizes,
            maybe_convert_block_hash=maybe_convert_block_hash,
            resolve_block_hashes=resolve_block_hashes)
    _module("vllm.v1.core.kv_cache_manager", KVCacheBlocks=KVCacheBlocks)
    _module("vllm.v1.core.sched.output", SchedulerOutput=SchedulerOutput,
            NewRequestData=NewRequestData, CachedRequestData=CachedRequestData)
    _module("vllm.v1.request", Request=Request, RequestStatus=RequestStatus)
    _module("vllm.v1.outputs", KVConnectorOutput=KVConnectorOutput,
            ModelRunnerOutput=ModelRunnerOutput)
    _module("vllm.distributed.kv_events", KVCacheEvent=KVCacheEvent, BlockStored=BlockStored,
            BlockRemoved=BlockRemoved, AllBlocksCleared=AllBlocksCleared,
            KVConnectorKVEvents=KVConnectorKVEvents, MEDIUM_GPU=MEDIUM_GPU,
            MEDIUM_CPU=MEDIUM_CPU, MEDIUM_STORAGE=MEDIUM_STORAGE)
    _module("vllm.distributed.kv_transfer.kv_connector.utils", yield_req_data=_yield_req_data)
    _module("vllm.distributed.kv_transfer.kv_connector.v1.metrics",
            KVConnectorStats=KVConnectorStats, KVConnectorPromMetrics=KVConnectorPromMetrics,
            PromMetric=PromMetric, PromMetricT=PromMetricT)
    _module("vllm.distributed.parallel_state", **{n: g[n] for n in (
        "get_tensor_model_parallel_world_size", "get_tensor_model_parallel_rank",
        "get_pp_group", "get_tp_group", "get_world_group")})
    sys.modules["vllm.distributed"].parallel_state = sys.modules["vllm.distributed.parallel_state"]
    _module("vllm.forward_context", ForwardContext=ForwardContext)
    _module("vllm.v1.attention.backend", AttentionBackend=AttentionBackend,
            AttentionMetadata=AttentionMetadata)
    _module("vllm.v1.attention.backends.utils", get_kv_cache_layout=get_kv_cache_layout)
    _module("vllm.model_executor.layers.attention_layer_base",
            AttentionLayerBase=AttentionLayerBase)
    _module("vllm.platforms", current_platform=_Platform())
    if not os.path.exists(os.path.join(vllm_dir, "utils", "math_utils.py")):
        _module("vllm.utils.math_utils", cdiv=_cdiv)

    # The connector package's __init__ re-exports base.py's classes; base.py itself is real.
    base = importlib.import_module("vllm.distributed.kv_transfer.kv_connector.v1.base")
    v1 = sys.modules["vllm.distributed.kv_transfer.kv_connector.v1"]
    for n in ("KVConnectorBase_V1", "KVConnectorRole", "SupportsHMA"):
        if hasattr(base, n):
            setattr(v1, n, getattr(base, n))
    return vllm_dir


def real_modules(vllm_dir):
    """(module name, file) of every module executed from the real source folder."""
    out = []
    for name, m in sorted(sys.modules.items()):
        f = getattr(m, "__file__", None)
        if f and os.path.abspath(f).startswith(vllm_dir + os.sep):
            out.append((name, os.path.relpath(f, os.path.dirname(vllm_dir))))
    return out
