"""Double of vllm/v1/kv_offload/base.py (0.25.0, = 0.25.1): the signatures of
vllm_signatures.json; block ids are numpy int64, tensors Any."""
from abc import ABC, abstractmethod
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass, field
from enum import Enum, auto
from typing import Any, ClassVar, NamedTuple, NewType, TypeVar

import numpy as np


OffloadKey = NewType("OffloadKey", bytes)


def make_offload_key(block_hash: bytes, group_idx: int) -> OffloadKey:
    return OffloadKey(block_hash + group_idx.to_bytes(4, "big", signed=False))


def get_offload_block_hash(key: OffloadKey) -> bytes:
    return key[:-4]


def get_offload_group_idx(key: OffloadKey) -> int:
    return int.from_bytes(key[-4:], "big", signed=False)


_T = TypeVar("_T")




@dataclass
class ReqContext:
    req_id: str
    kv_transfer_params: dict[str, Any] | None = None

class LookupResult(Enum):
    MISS = auto()
    HIT = auto()
    HIT_PENDING = auto()
    RETRY = auto()


class OffloadPolicy(Enum):
    BLOCK_LEVEL = "block_level"
    REQUEST_LEVEL = "request_level"


@dataclass
class RequestOffloadingContext:
    policy: OffloadPolicy = OffloadPolicy.BLOCK_LEVEL


class ScheduleEndContext(NamedTuple):
    new_req_ids: Collection[str]
    preempted_req_ids: Collection[str]


class LoadStoreSpec(ABC):
    @staticmethod
    @abstractmethod
    def medium() -> str:
        pass

@dataclass
class PrepareStoreOutput:
    keys_to_store: list[OffloadKey]
    store_spec: LoadStoreSpec
    evicted_keys: list[OffloadKey]


@dataclass
class OffloadingEvent:
    keys: list[OffloadKey]
    medium: str
    removed: bool

@dataclass(frozen=True)
class OffloadingKVEventsConfig:
    enable_kv_cache_events: bool
    self_describing_kv_events: bool


@dataclass(frozen=True)
class OffloadingMetricMetadata:
    documentation: str
    labelnames: tuple[str, ...] = ()


@dataclass(frozen=True)
class OffloadingCounterMetadata(OffloadingMetricMetadata):
    pass


@dataclass(frozen=True)
class OffloadingGaugeMetadata(OffloadingMetricMetadata):
    pass


@dataclass(frozen=True)
class OffloadingHistogramMetadata(OffloadingMetricMetadata):
    buckets: tuple[float, ...] = ()


class OffloadingManager(ABC):
    @abstractmethod
    def lookup(self, key: OffloadKey, req_context: ReqContext) -> LookupResult:
        pass

    @abstractmethod
    def prepare_load(self, keys: Collection[OffloadKey], req_context: ReqContext
                     ) -> LoadStoreSpec:
        pass

    def touch(self, keys: Collection[OffloadKey], req_context: ReqContext):
        return

    def complete_load(self, keys: Collection[OffloadKey], req_context: ReqContext):
        return

    @abstractmethod
    def prepare_store(self, keys: Collection[OffloadKey], req_context: ReqContext
                      ) -> PrepareStoreOutput | None:
        pass

    def complete_store(self, keys: Collection[OffloadKey], req_context: ReqContext,
                       success: bool = True):
        return

    @abstractmethod
    def on_new_request(self, req_context: ReqContext) -> RequestOffloadingContext:
        pass

    def on_request_finished(self, req_context: ReqContext) -> None:
        return

    def take_events(self) -> Iterable[OffloadingEvent]:
        return ()

    def on_schedule_end(self, context: ScheduleEndContext) -> None:
        return

    def has_pending_work(self) -> bool:
        return False

    def reset_cache(self) -> None:
        return

    def get_stats(self) -> "OffloadingConnectorStats | None":  # noqa: F821
        return None

    def shutdown(self) -> None:
        return


class BlockIDsLoadStoreSpec(LoadStoreSpec, ABC):
    def __init__(self, block_ids: list[int]):
        self.block_ids = np.array(block_ids, dtype=np.int64)

    def __repr__(self) -> str:
        return repr(self.block_ids)


class GPULoadStoreSpec(BlockIDsLoadStoreSpec):
    def __init__(self, block_ids: list[int], group_sizes: Sequence[int],
                 block_indices: Sequence[int]):
        super().__init__(block_ids)
        assert sum(group_sizes) == len(block_ids)
        assert len(block_indices) == len(group_sizes)
        self.group_sizes: Sequence[int] = group_sizes
        self.block_indices: Sequence[int] = block_indices

    @staticmethod
    def medium() -> str:
        return "GPU"

@dataclass
class CanonicalKVCacheTensor:
    tensor: Any
    page_size_bytes: int


@dataclass
class CanonicalKVCacheRef:
    tensor_idx: int
    page_size_bytes: int

@dataclass
class CanonicalKVCaches:
    tensors: list[CanonicalKVCacheTensor]
    group_data_refs: list[list[CanonicalKVCacheRef]]


@dataclass
class TransferResult:
    job_id: int
    success: bool
    transfer_size: int | None = None
    transfer_time: float | None = None


class OffloadingWorker(ABC):
    @abstractmethod
    def submit_store(self, job_id: int, src_spec: GPULoadStoreSpec, dst_spec: LoadStoreSpec
                     ) -> bool:
        """Async GPU -> offloaded medium."""

    @abstractmethod
    def submit_load(self, job_id: int, src_spec: LoadStoreSpec, dst_spec: GPULoadStoreSpec
                    ) -> bool:
        """Async offloaded medium -> GPU."""

    @abstractmethod
    def get_finished(self) -> list[TransferResult]: ...

    @abstractmethod
    def wait(self, job_ids: set[int]) -> None: ...

    def shutdown(self) -> None:
        return


class OffloadingSpec(ABC):
    @classmethod
    def build_metric_definitions(cls, extra_config: dict[str, Any]
                                 ) -> dict[str, "OffloadingMetricMetadata"]:
        return {}

    def __init__(self, vllm_config: "VllmConfig", kv_cache_config: "KVCacheConfig"):  # noqa: F821
        self.vllm_config = vllm_config
        self.kv_cache_config = kv_cache_config
        kv_transfer_config = vllm_config.kv_transfer_config
        assert kv_transfer_config is not None
        self.extra_config = kv_transfer_config.kv_connector_extra_config
        kv_events_config = vllm_config.kv_events_config
        self.kv_events_config = OffloadingKVEventsConfig(
            enable_kv_cache_events=(kv_events_config is not None and
                                    kv_events_config.enable_kv_cache_events),
            self_describing_kv_events=bool(
                self.extra_config.get("self_describing_kv_events", False)))
        self.offload_prompt_only: bool = bool(self.extra_config.get("offload_prompt_only", True))
        self.hash_block_size = vllm_config.cache_config.block_size
        self.gpu_block_size: tuple[int, ...] = tuple(
            group.kv_cache_spec.block_size for group in kv_cache_config.kv_cache_groups)
        for block_size in self.gpu_block_size:
            assert block_size % self.hash_block_size == 0
        self.block_size_factor: int = 1
        offloaded_block_size = self.extra_config.get("block_size")
        if offloaded_block_size is not None:
            sizes = set(self.gpu_block_size)
            assert len(sizes) == 1
            gpu_block_size = sizes.pop()
            assert int(offloaded_block_size) % gpu_block_size == 0
            self.block_size_factor = int(offloaded_block_size) // gpu_block_size

    @abstractmethod
    def get_manager(self) -> OffloadingManager:
        pass

    @abstractmethod
    def get_worker(self, kv_caches: CanonicalKVCaches) -> OffloadingWorker:
        pass
