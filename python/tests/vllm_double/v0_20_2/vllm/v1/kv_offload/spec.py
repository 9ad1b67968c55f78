"""Double of vllm/v1/kv_offload/spec.py (0.20.2): canonical KV caches and OffloadingSpec. The
tensors are whatever the tests pass (kvoffload.HostTensor; torch tensors in vLLM)."""
from abc import ABC, abstractmethod
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from vllm.v1.kv_offload.abstract import LoadStoreSpec, OffloadingManager
from vllm.v1.kv_offload.worker.worker import OffloadingHandler


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


class OffloadingSpec(ABC):
    def __init__(self, vllm_config: "VllmConfig", kv_cache_config: "KVCacheConfig"):  # noqa: F821
        self.vllm_config = vllm_config
        self.kv_cache_config = kv_cache_config
        kv_transfer_config = vllm_config.kv_transfer_config
        assert kv_transfer_config is not None
        self.extra_config = kv_transfer_config.kv_connector_extra_config
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
    def get_handlers(
        self, kv_caches: CanonicalKVCaches
    ) -> Iterator[tuple[type[LoadStoreSpec], type[LoadStoreSpec], OffloadingHandler]]:
        pass
