"""The fields of vllm.v1.kv_cache_interface that kvoffload.vllm reads (0.20.2)."""
from dataclasses import dataclass


@dataclass
class FullAttentionSpec:
    block_size: int
    page_size_bytes: int


@dataclass
class KVCacheTensor:
    size: int
    shared_by: list[str]


@dataclass
class KVCacheGroupSpec:
    layer_names: list[str]
    kv_cache_spec: FullAttentionSpec


@dataclass
class KVCacheConfig:
    num_blocks: int
    kv_cache_tensors: list[KVCacheTensor]
    kv_cache_groups: list[KVCacheGroupSpec]
