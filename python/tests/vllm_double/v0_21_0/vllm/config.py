"""The vllm.config fields kvoffload.vllm reads (0.20.2 names; VllmConfig and friends carry many
more upstream)."""
import uuid
from dataclasses import dataclass, field
from typing import Any


@dataclass
class ParallelConfig:
    pipeline_parallel_size: int = 1
    tensor_parallel_size: int = 1
    prefill_context_parallel_size: int = 1
    data_parallel_size: int = 1
    data_parallel_rank: int = 0
    distributed_executor_backend: Any = None
    nnodes: int = 1
    rank: int = 0
    decode_context_parallel_size: int = 1

    @property
    def world_size(self) -> int:
        return (self.pipeline_parallel_size * self.tensor_parallel_size *
                self.prefill_context_parallel_size)


@dataclass
class CacheConfig:
    block_size: int = 16
    enable_prefix_caching: bool = True


@dataclass
class ModelConfig:
    use_mla: bool = False


@dataclass
class KVTransferConfig:
    kv_connector: str | None = None
    engine_id: str | None = field(default_factory=lambda: str(uuid.uuid4()))
    kv_role: str | None = None
    kv_connector_extra_config: dict[str, Any] = field(default_factory=dict)
    kv_load_failure_policy: str = "fail"


@dataclass
class KVEventsConfig:
    enable_kv_cache_events: bool = False


@dataclass
class VllmConfig:
    model_config: ModelConfig = field(default_factory=ModelConfig)
    cache_config: CacheConfig = field(default_factory=CacheConfig)
    parallel_config: ParallelConfig = field(default_factory=ParallelConfig)
    kv_transfer_config: KVTransferConfig | None = None
    kv_events_config: KVEventsConfig | None = None
