"""The baseline kvoffload is measured against: vLLM's own CPU offloading, with the release's real
scheduler-side manager (vllm/v1/kv_offload/cpu/manager.py and its policies, unmodified) and this
harness's stand-in for vLLM's CUDA copy worker (cpu/gpu_worker.py needs CUDA streams): each rank
copies blocks between its KV tensors and a host buffer of the manager's size, synchronously in
submit, and reports the job finished at the next get_finished — where vLLM's CUDA copy of a few
blocks is also done.

Loaded by vLLM's OffloadingSpecFactory from kv_connector_extra_config {"spec_name":
"HarnessCPUSpec", "spec_module_path": "cpu_baseline", "harness_cpu_blocks": N,
"harness_factor": F, "harness_block_bytes": B} (driver.build_configs writes them; N is vLLM's
CPUOffloadingSpec rule: cpu_bytes_to_use // (per-GPU-block bytes x world size x F)).
Interface differences between releases are detected from what the loaded vLLM defines:
OffloadingSpec in kv_offload/spec.py (0.20) or base.py; get_handlers with OffloadingHandler
(up to 0.24) or get_worker with OffloadingWorker (0.25 on); the spec's constructor arguments
are passed through unchanged.
"""

import importlib


def _mod(name):
    try:
        return importlib.import_module(name)
    except ImportError:
        return None


_spec_mod = _mod("vllm.v1.kv_offload.spec")  # 0.20; base.py from 0.21
_base = _mod("vllm.v1.kv_offload.base")
_api = _spec_mod or _base
_mediums = _mod("vllm.v1.kv_offload.mediums")
_cpu_common = _mod("vllm.v1.kv_offload.cpu.common")
_worker_mod = _mod("vllm.v1.kv_offload.worker.worker")
GPULoadStoreSpec = (_mediums or _base).GPULoadStoreSpec
CPULoadStoreSpec = (_cpu_common or _mediums).CPULoadStoreSpec
CPUOffloadingManager = importlib.import_module("vllm.v1.kv_offload.cpu.manager").CPUOffloadingManager
TransferResult = getattr(_worker_mod, "TransferResult", None) or _base.TransferResult
_HandlerBase = getattr(_worker_mod, "OffloadingHandler", object)
_WorkerBase = getattr(_base, "OffloadingWorker", object) if _base else object


class HostCopier:
    """One rank's offloaded blocks: a host buffer [cpu block][sub-block][bytes of one GPU block
    over every canonical tensor]. Copies are done at submit; results wait for get_finished."""

    def __init__(self, kv_caches, num_cpu_blocks, factor):
        import torch
        self.tensors = [t.tensor.view(t.tensor.shape[0], -1).view(torch.uint8)
                        if t.tensor.dtype != torch.uint8 else t.tensor.view(t.tensor.shape[0], -1)
                        for t in kv_caches.tensors]
        self.widths = [t.shape[1] for t in self.tensors]
        self.factor = factor
        self.buf = torch.zeros((max(1, num_cpu_blocks), factor, sum(self.widths)),
                               dtype=torch.uint8)
        self.done = []

    def _pairs(self, gpu_spec, cpu_spec):
        gpu = [int(b) for b in gpu_spec.block_ids]
        cpu = [int(b) for b in cpu_spec.block_ids]
        first = int(gpu_spec.block_indices[0]) if getattr(gpu_spec, "block_indices", None) else 0
        skip = first % self.factor
        for j, g in enumerate(gpu):
            k = skip + j
            yield g, cpu[k // self.factor], k % self.factor

    def copy(self, job_id, gpu_spec, cpu_spec, to_cpu):
        try:
            for g, c, sub in self._pairs(gpu_spec, cpu_spec):
                off = 0
                for t, w in zip(self.tensors, self.widths):
                    if to_cpu:
                        self.buf[c, sub, off:off + w] = t[g]
                    else:
                        t[g] = self.buf[c, sub, off:off + w]
                    off += w
            ok = True
        except Exception:  # noqa: BLE001 - reported as a failed job, as vLLM's worker does
            ok = False
        self.done.append(TransferResult(job_id=job_id, success=ok))
        return True

    def get_finished(self):
        out, self.done = self.done, []
        return out


class _Handler(_HandlerBase):
    def __init__(self, copier, to_cpu):
        self.copier, self.to_cpu = copier, to_cpu
        self.mine = []

    def transfer_async(self, job_id, spec):
        src, dst = spec
        gpu, cpu = (src, dst) if self.to_cpu else (dst, src)
        return self.copier.copy(job_id, gpu, cpu, self.to_cpu)

    def get_finished(self):
        # both handlers share one copier: the store handler reports every finished job
        return self.copier.get_finished() if self.to_cpu else []

    def wait(self, job_ids):
        return None


class _Worker(_WorkerBase):
    def __init__(self, copier):
        self.copier = copier

    def submit_store(self, job_id, src_spec, dst_spec):
        return self.copier.copy(job_id, src_spec, dst_spec, True)

    def submit_load(self, job_id, src_spec, dst_spec):
        return self.copier.copy(job_id, dst_spec, src_spec, False)

    def get_finished(self):
        return self.copier.get_finished()

    def wait(self, job_ids):
        return None


class HarnessCPUSpec(_api.OffloadingSpec):
    def __init__(self, *args, **kw):
        super().__init__(*args, **kw)
        extra = self.extra_config
        self.num_cpu_blocks = int(extra["harness_cpu_blocks"])
        self.factor = int(extra.get("harness_factor", 1))
        self.enable_events = bool(extra.get("harness_events", False))
        self._manager = None
        self._copier = None

    def get_manager(self):
        if self._manager is None:
            self._manager = CPUOffloadingManager(num_blocks=self.num_cpu_blocks,
                                                 enable_events=self.enable_events)
        return self._manager

    def _get_copier(self, kv_caches):
        if self._copier is None:
            self._copier = HostCopier(kv_caches, self.num_cpu_blocks, self.factor)
        return self._copier

    def get_handlers(self, kv_caches, *rest):
        c = self._get_copier(kv_caches)
        yield GPULoadStoreSpec, CPULoadStoreSpec, _Handler(c, True)
        yield CPULoadStoreSpec, GPULoadStoreSpec, _Handler(c, False)

    def get_worker(self, kv_caches):
        return _Worker(self._get_copier(kv_caches))
