"""Double of vllm/v1/kv_offload/abstract.py (0.20.2): OffloadKey helpers, ReqContext and the
scheduler-side OffloadingManager interface."""
from abc import ABC, abstractmethod
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, NewType

OffloadKey = NewType("OffloadKey", bytes)


def make_offload_key(block_hash: bytes, group_idx: int) -> OffloadKey:
    return OffloadKey(block_hash + group_idx.to_bytes(4, "big", signed=False))


def get_offload_block_hash(key: OffloadKey) -> bytes:
    return key[:-4]


def get_offload_group_idx(key: OffloadKey) -> int:
    return int.from_bytes(key[-4:], "big", signed=False)


@dataclass
class ReqContext:
    kv_transfer_params: dict[str, Any] | None = None


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


class OffloadingManager(ABC):
    @abstractmethod
    def lookup(self, key: OffloadKey, req_context: ReqContext) -> bool | None:
        pass

    @abstractmethod
    def prepare_load(self, keys: Iterable[OffloadKey], req_context: ReqContext) -> LoadStoreSpec:
        pass

    def touch(self, keys: Iterable[OffloadKey]):
        return

    def complete_load(self, keys: Iterable[OffloadKey]):
        return

    @abstractmethod
    def prepare_store(self, keys: Iterable[OffloadKey],
                      req_context: ReqContext) -> PrepareStoreOutput | None:
        pass

    def complete_store(self, keys: Iterable[OffloadKey], success: bool = True):
        return

    def take_events(self) -> Iterable[OffloadingEvent]:
        return ()

    def shutdown(self) -> None:
        return
