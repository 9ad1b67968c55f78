"""Double of vllm/v1/kv_offload/worker/worker.py (0.22.0): handlers routed by
(src.medium(), dst.medium())."""
from abc import ABC, abstractmethod
from dataclasses import dataclass

from vllm.v1.kv_offload.base import LoadStoreSpec

TransferSpec = tuple[LoadStoreSpec, LoadStoreSpec]
TransferType = tuple[str, str]


@dataclass
class TransferResult:
    job_id: int
    success: bool
    transfer_size: int | None = None
    transfer_time: float | None = None
    transfer_type: TransferType | None = None


class OffloadingHandler(ABC):
    @abstractmethod
    def transfer_async(self, job_id: int, spec: TransferSpec) -> bool:
        pass

    @abstractmethod
    def get_finished(self) -> list[TransferResult]:
        pass

    @abstractmethod
    def wait(self, job_ids: set[int]) -> None:
        pass

    def shutdown(self) -> None:
        return


class OffloadingWorker:
    def __init__(self):
        self.handlers: set[OffloadingHandler] = set()
        self.transfer_type_to_handler: dict[TransferType, OffloadingHandler] = {}

    def register_handler(self, src_cls: type[LoadStoreSpec], dst_cls: type[LoadStoreSpec],
                         handler: OffloadingHandler) -> None:
        transfer_type = (src_cls.medium(), dst_cls.medium())
        assert transfer_type not in self.transfer_type_to_handler
        self.handlers.add(handler)
        self.transfer_type_to_handler[transfer_type] = handler

    def transfer_async(self, job_id: int, spec: TransferSpec) -> bool:
        src, dst = spec
        handler = self.transfer_type_to_handler.get((src.medium(), dst.medium()))
        assert handler is not None
        try:
            return handler.transfer_async(job_id, spec)
        except Exception:
            return False

    def get_finished(self) -> list[TransferResult]:
        finished = []
        for handler in self.handlers:
            finished.extend(handler.get_finished())
        return finished

    def wait(self, job_ids: set[int]) -> None:
        for handler in self.handlers:
            handler.wait(job_ids)

    def shutdown(self) -> None:
        for handler in self.handlers:
            handler.shutdown()
