"""vllm/v1/kv_offload/spec.py (0.20.2): OffloadingSpec(vllm_config, kv_cache_config) and the
canonical KV caches get_handlers receives."""
from abc import ABC, abstractmethod
from dataclasses import dataclass
from math import lcm
from typing import Any


@dataclass
class CanonicalKVCacheTensor:
    # shape (num_blocks, ...) upstream (a torch.Tensor); the tests pass kvoffload.HostTensor
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
    def __init__(self, vllm_config, kv_cache_config):
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
        self.offloaded_block_size: int = lcm(*self.gpu_block_size)
        offloaded_block_size = self.extra_config.get("block_size")
        if offloaded_block_size is not None:
            offloaded_block_size_int = int(offloaded_block_size)
            assert all(offloaded_block_size_int % b == 0 for b in self.gpu_block_size)
            self.offloaded_block_size = offloaded_block_size_int
        self.block_size_factors = tuple(
            self.offloaded_block_size // b for b in self.gpu_block_size)

    @abstractmethod
    def get_manager(self):
        pass

    @abstractmethod
    def get_handlers(self, kv_caches: CanonicalKVCaches):
        pass
