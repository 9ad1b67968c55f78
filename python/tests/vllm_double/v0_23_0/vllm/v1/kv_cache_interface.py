"""The vllm.v1.kv_cache_interface fields kvoffload.vllm reads (0.20.2 names). Upstream,
page_size_bytes is a property computed from the heads and dtype; here it is given."""
from dataclasses import dataclass


@dataclass(frozen=True)
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
    is_eagle_group: bool = False


@dataclass
class KVCacheConfig:
    num_blocks: int
    kv_cache_tensors: list[KVCacheTensor]
    kv_cache_groups: list[KVCacheGroupSpec]
