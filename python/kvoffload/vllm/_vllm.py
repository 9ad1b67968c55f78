"""The vLLM names kvoffload.vllm depends on, imported in this one place (vLLM is imported here,
so only modules that need it import this one).

Pinned: vLLM 0.20.2 (kvoffload.vllm.PINNED_VLLM_VERSION). Its layout is
vllm.v1.kv_offload.{abstract, mediums, spec, worker.worker}; vLLM 0.21 merged abstract, mediums
and spec into vllm.v1.kv_offload.base with the same classes, which is tried second.
"""

import dataclasses

try:
    from vllm.v1.kv_offload.abstract import (LoadStoreSpec, OffloadingEvent,  # noqa: F401
                                             OffloadingManager, PrepareStoreOutput)
    from vllm.v1.kv_offload.mediums import BlockIDsLoadStoreSpec, GPULoadStoreSpec  # noqa: F401
    from vllm.v1.kv_offload.spec import OffloadingSpec  # noqa: F401
except ImportError as first_error:  # the 0.21+ layout
    try:
        from vllm.v1.kv_offload.base import (BlockIDsLoadStoreSpec,  # noqa: F401
                                             GPULoadStoreSpec, LoadStoreSpec, OffloadingEvent,
                                             OffloadingManager, OffloadingSpec,
                                             PrepareStoreOutput)
    except ImportError:
        raise ImportError(
            "kvoffload.vllm needs vLLM's OffloadingConnector interface (pinned: vLLM %s, "
            "vllm.v1.kv_offload.abstract/spec/mediums): %s" % ("0.20.2", first_error)) from None

from vllm.v1.kv_offload.worker.worker import OffloadingHandler  # noqa: E402,F401

try:
    from vllm.v1.kv_offload.worker.worker import TransferResult  # noqa: F401
except ImportError:  # before 0.18 a result was a (job_id, success) tuple
    TransferResult = None


def transfer_result(job_id, success, size=None, seconds=None, transfer_type=None):
    """A TransferResult of the running vLLM (a dataclass since 0.18, a (job_id, success) tuple
    alias before)."""
    if isinstance(TransferResult, type) and dataclasses.is_dataclass(TransferResult):
        return TransferResult(job_id=job_id, success=success, transfer_size=size,
                              transfer_time=seconds, transfer_type=transfer_type)
    return (job_id, success)
