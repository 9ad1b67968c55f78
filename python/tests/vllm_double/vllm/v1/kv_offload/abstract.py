"""vllm/v1/kv_offload/abstract.py (0.20.2): the scheduler-side manager interface."""
from abc import ABC, abstractmethod
from collections.abc import Iterable
from dataclasses import dataclass

from vllm.v1.core.kv_cache_utils import BlockHash


class LoadStoreSpec(ABC):
    @staticmethod
    @abstractmethod
    def medium() -> str:
        pass


@dataclass
class PrepareStoreOutput:
    block_hashes_to_store: list[BlockHash]
    store_spec: LoadStoreSpec
    block_hashes_evicted: list[BlockHash]


@dataclass
class OffloadingEvent:
    block_hashes: list[BlockHash]
    block_size: int
    medium: str
    # True if blocks are removed, False if stored
    removed: bool


class OffloadingManager(ABC):
    @abstractmethod
    def lookup(self, block_hashes: Iterable[BlockHash]) -> int | None:
        pass

    @abstractmethod
    def prepare_load(self, block_hashes: Iterable[BlockHash]) -> LoadStoreSpec:
        pass

    def touch(self, block_hashes: Iterable[BlockHash]):
        return

    def complete_load(self, block_hashes: Iterable[BlockHash]):
        return

    @abstractmethod
    def prepare_store(self, block_hashes: Iterable[BlockHash]) -> PrepareStoreOutput | None:
        pass

    def complete_store(self, block_hashes: Iterable[BlockHash], success: bool = True):
        return

    def take_events(self) -> Iterable[OffloadingEvent]:
        return ()
