"""vllm/v1/kv_offload/mediums.py (0.20.2); block_ids is a list here (numpy int64 upstream)."""
from abc import ABC
from collections.abc import Sequence

from vllm.v1.kv_offload.abstract import LoadStoreSpec


class BlockIDsLoadStoreSpec(LoadStoreSpec, ABC):
    def __init__(self, block_ids: list[int]):
        self.block_ids = [int(b) for b in block_ids]

    def __repr__(self) -> str:
        return repr(self.block_ids)


class GPULoadStoreSpec(BlockIDsLoadStoreSpec):
    def __init__(self, block_ids: list[int], group_sizes: Sequence[int],
                 block_indices: Sequence[int] | None = None):
        super().__init__(block_ids)
        assert sum(group_sizes) == len(block_ids)
        assert block_indices is None or len(block_indices) == len(group_sizes)
        self.group_sizes = group_sizes
        self.block_indices = block_indices

    @staticmethod
    def medium() -> str:
        return "GPU"


class CPULoadStoreSpec(BlockIDsLoadStoreSpec):
    @staticmethod
    def medium() -> str:
        return "CPU"
