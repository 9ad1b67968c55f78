"""Transfers as OffloadingHandlers (vLLM 0.20 to 0.24: spec.get_handlers(kv_caches) yields
(src class, dst class, handler), and vLLM's own OffloadingWorker routes each transfer by
(src.medium(), dst.medium())): one handler per direction over the one worker core."""

from . import capabilities, core, gen_common
from .adapter import API, CHOICE, KvoffloadLoadStoreSpec

_GPU = API.GPULoadStoreSpec
_TYPES = {core.STORE: (_GPU.medium(), capabilities.MEDIUM),
          core.LOAD: (capabilities.MEDIUM, _GPU.medium())}


class KvoffloadTransferHandler(API.OffloadingHandler):
    """One direction (store: GPU -> KVOFFLOAD, load: KVOFFLOAD -> GPU) of the worker core."""

    def __init__(self, worker_core, direction):
        self.core = worker_core
        self._direction = direction
        self._type = _TYPES[direction]

    def transfer_async(self, job_id, spec):
        return gen_common.submit(self.core, self._direction, job_id, spec,
                                 KvoffloadLoadStoreSpec)

    @gen_common.never_raises(list)
    def get_finished(self):
        extra = {"transfer_type": self._type} if CHOICE["transfer_result"] == "typed" else {}
        return [API.TransferResult(job_id=f.vllm_id, success=f.ok, transfer_size=f.nbytes,
                                   transfer_time=f.seconds, **extra)
                for f in self.core.get_finished(self._direction)]

    @gen_common.never_raises(None)
    def wait(self, job_ids):
        self.core.wait(set(job_ids), self._direction)

    @gen_common.never_raises(None)
    def shutdown(self):
        self.core.close()


def handlers(worker_core):
    """get_handlers' answer: the store and the load handler."""
    return iter([
        (_GPU, KvoffloadLoadStoreSpec, KvoffloadTransferHandler(worker_core, core.STORE)),
        (KvoffloadLoadStoreSpec, _GPU, KvoffloadTransferHandler(worker_core, core.LOAD))])
