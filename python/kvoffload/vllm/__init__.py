"""kvoffload for vLLM: an OffloadingSpec for vLLM's OffloadingConnector.

An operator enables kvoffload with one flag (README.md, "vLLM"; the same line for every
supported vLLM release):

    vllm serve MODEL --kv-transfer-config '{"kv_connector": "OffloadingConnector",
        "kv_role": "kv_both", "kv_connector_extra_config": {"spec_name": "KvoffloadSpec",
        "spec_module_path": "kvoffload.vllm", "cpu_bytes_to_use": 68719476736}}'

Supported vLLM releases (SUPPORTED_VLLM): 0.20.2, 0.21.0, 0.22.0/0.22.1, 0.23.0, 0.24.0,
0.25.0/0.25.1, 0.26.0 and main 017e9f4/7cfb97e (2026-08). The interface differences between
them are rows of one capability table (kvoffload.vllm.capabilities), detected on the running
vLLM when KvoffloadSpec is first accessed (which vLLM's factory does); kvoffload.vllm.adapter
assembles the spec, the manager and the row spec from them over one manager core and one worker
core (kvoffload.vllm.core). Any vLLM the table cannot serve gets an ImportError naming the
supported releases and the capability probe that failed.

Importing this package never imports vLLM; `kvoffload.vllm.KvoffloadSpec` does. The parts that
need no vLLM: kvoffload.vllm.config (EngineSpec and settings), kvoffload.vllm.core and
kvoffload.vllm.capabilities (the table).
"""

from .capabilities import MEDIUM, SUPPORTED_RELEASES as SUPPORTED_VLLM

PINNED_VLLM_VERSION = ", ".join(SUPPORTED_VLLM)  # what pip_install_test prints

_LAZY = ("KvoffloadSpec", "KvoffloadLoadStoreSpec", "KvoffloadManager")

__all__ = ["MEDIUM", "PINNED_VLLM_VERSION", "SUPPORTED_VLLM", "capabilities_of_running_vllm"] + \
    list(_LAZY)


def capabilities_of_running_vllm():
    """{row name: adapter chosen} for the running vLLM (ImportError when it is not served)."""
    from . import capabilities
    return dict(capabilities.running().choice)


def __getattr__(name):
    """Imports the vLLM-facing classes, assembled for the running vLLM, on first access."""
    if name not in _LAZY:
        raise AttributeError("module %r has no attribute %r" % (__name__, name))
    import importlib
    value = getattr(importlib.import_module(".adapter", __name__), name)
    globals()[name] = value
    return value
