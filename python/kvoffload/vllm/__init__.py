"""kvoffload for vLLM: an OffloadingSpec for vLLM's OffloadingConnector.

An operator enables kvoffload with one flag (README.md, "vLLM"):

    vllm serve MODEL --kv-transfer-config '{"kv_connector": "OffloadingConnector",
        "kv_role": "kv_both", "kv_connector_extra_config": {"spec_name": "KvoffloadSpec",
        "spec_module_path": "kvoffload.vllm", "cpu_bytes_to_use": 68719476736}}'

vLLM's OffloadingConnector schedules (what to store after a step, what to load for a new
request); KvoffloadSpec gives it a manager backed by kvoffloadd's index for this engine
(scheduler process) and transfer handlers that submit each transfer as a daemon job (worker
processes).

Pinned vLLM interface: PINNED_VLLM_VERSION (the v0.20 line: vllm.v1.kv_offload.{abstract, spec,
mediums, factory, worker.worker}; OffloadingSpec(vllm_config, kv_cache_config);
get_handlers(kv_caches: CanonicalKVCaches)). See docs/vllm.md.

Importing this package never imports vLLM; `kvoffload.vllm.KvoffloadSpec` does (on first use).
The pure-Python parts that need no vLLM are kvoffload.vllm.config (EngineSpec and settings from
a vllm_config).
"""

PINNED_VLLM_VERSION = "0.20.2"
MEDIUM = "KVOFFLOAD"  # LoadStoreSpec.medium() of kvoffload rows

_LAZY = {
    "KvoffloadSpec": "spec",
    "KvoffloadLoadStoreSpec": "spec",
    "KvoffloadManager": "manager",
    "KvoffloadTransferHandler": "handlers",
}

__all__ = ["MEDIUM", "PINNED_VLLM_VERSION"] + sorted(_LAZY)


def __getattr__(name):
    """Imports the vLLM-facing classes (and with them vLLM) on first access."""
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError("module %r has no attribute %r" % (__name__, name))
    import importlib
    value = getattr(importlib.import_module("." + module, __name__), name)
    globals()[name] = value
    return value
