"""Transfers as an OffloadingWorker (vLLM 0.25 and later: spec.get_worker(kv_caches) ->
OffloadingWorker with submit_store/submit_load(job_id, src_spec, dst_spec)) over the one worker
core."""

from . import core, gen_common
from .adapter import API, KvoffloadLoadStoreSpec


class KvoffloadWorker(API.OffloadingWorker):
    """vLLM's OffloadingWorker over core.WorkerCore."""

    def __init__(self, worker_core):
        self.core = worker_core

    def submit_store(self, job_id, src_spec, dst_spec):
        return gen_common.submit(self.core, core.STORE, job_id, (src_spec, dst_spec),
                                 KvoffloadLoadStoreSpec)

    def submit_load(self, job_id, src_spec, dst_spec):
        return gen_common.submit(self.core, core.LOAD, job_id, (src_spec, dst_spec),
                                 KvoffloadLoadStoreSpec)

    @gen_common.never_raises(list)
    def get_finished(self):
        return [API.TransferResult(job_id=f.vllm_id, success=f.ok, transfer_size=f.nbytes,
                                   transfer_time=f.seconds)
                for f in self.core.get_finished()]

    @gen_common.never_raises(None)
    def wait(self, job_ids):
        self.core.wait(set(job_ids))

    @gen_common.never_raises(None)
    def shutdown(self):
        self.core.close()
