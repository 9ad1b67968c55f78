"""The fields of vllm.config that kvoffload.vllm reads (names as upstream, 0.20.2)."""
import uuid
from dataclasses import dataclass, field
from typing import Any


@dataclass
class ParallelConfig:
    tensor_parallel_size: int = 1
    pipeline_parallel_size: int = 1
    prefill_context_parallel_size: int = 1
    decode_context_parallel_size: int = 1
    data_parallel_size: int = 1
    data_parallel_rank: int = 0
    nnodes: int = 1
    distributed_executor_backend: Any = None
    rank: int = 0

    @property
    def world_size(self) -> int:
        return (self.pipeline_parallel_size * self.tensor_parallel_size *
                self.prefill_context_parallel_size)


@dataclass
class CacheConfig:
    block_size: int = 16


@dataclass
class ModelConfig:
    use_mla: bool = False


@dataclass
class KVTransferConfig:
    kv_connector: str = "OffloadingConnector"
    kv_role: str = "kv_both"
    engine_id: str = field(default_factory=lambda: str(uuid.uuid4()))
    kv_connector_extra_config: dict = field(default_factory=dict)


@dataclass
class KVEventsConfig:
    enable_kv_cache_events: bool = False


@dataclass
class VllmConfig:
    parallel_config: ParallelConfig = field(default_factory=ParallelConfig)
    cache_config: CacheConfig = field(default_factory=CacheConfig)
    model_config: ModelConfig = field(default_factory=ModelConfig)
    kv_transfer_config: KVTransferConfig = field(default_factory=KVTransferConfig)
    kv_events_config: KVEventsConfig = field(default_factory=KVEventsConfig)
