"""kvoffload for vLLM: an OffloadingSpec for vLLM's OffloadingConnector.

An operator enables kvoffload with one flag (README.md, "vLLM"; the same line for both
supported vLLM generations):

    vllm serve MODEL --kv-transfer-config '{"kv_connector": "OffloadingConnector",
        "kv_role": "kv_both", "kv_connector_extra_config": {"spec_name": "KvoffloadSpec",
        "spec_module_path": "kvoffload.vllm", "cpu_bytes_to_use": 68719476736}}'

Supported vLLM generations (SUPPORTED_VLLM), chosen by feature detection when KvoffloadSpec is
first accessed (which vLLM's factory does):

  "v0.20"   vLLM 0.20.2 (tag commit bc150f5, 2026-05-07): vllm.v1.kv_offload.{abstract,
            mediums, spec, worker.worker}, OffloadingSpec(vllm_config, kv_cache_config),
            get_handlers(kv_caches) -> OffloadingHandlers        (kvoffload.vllm.gen_v0_20)
  "2026-08" vLLM main of 2026-08-17 (commit 017e9f4): vllm.v1.kv_offload.{base, config},
            OffloadingSpec(OffloadingConfig), get_worker(kv_caches) -> OffloadingWorker
                                                                  (kvoffload.vllm.gen_2026_08)

Both are thin adapters over one manager core and one worker core (kvoffload.vllm.core). Any
other vLLM gets an ImportError naming the supported versions and what was missing.

Importing this package never imports vLLM; `kvoffload.vllm.KvoffloadSpec` does. The parts that
need no vLLM: kvoffload.vllm.config (EngineSpec and settings) and kvoffload.vllm.core.
"""

SUPPORTED_VLLM = (
    ("v0.20", "vLLM 0.20.2 (tag v0.20.2, commit bc150f5, 2026-05-07)"),
    ("2026-08", "vLLM main of 2026-08-17 (commit 017e9f4) to 2026-08-20 (commit 7cfb97e)"),
)
PINNED_VLLM_VERSION = "0.20.2 and main 2026-08-17 (017e9f4)"  # what pip_install_test prints
MEDIUM = "KVOFFLOAD"  # vLLM 0.20: LoadStoreSpec.medium() of kvoffload rows

_LAZY = ("KvoffloadSpec", "KvoffloadLoadStoreSpec", "KvoffloadManager")

__all__ = ["MEDIUM", "PINNED_VLLM_VERSION", "SUPPORTED_VLLM", "generation",
           "generation_module"] + list(_LAZY)

_MODULES = {"v0.20": "gen_v0_20", "2026-08": "gen_2026_08"}


def _supported():
    return "; ".join(text for _, text in SUPPORTED_VLLM)


def _params(func):
    import inspect
    try:
        return [p for p in inspect.signature(func).parameters if p != "self"]
    except (TypeError, ValueError):
        return None


def _fields(cls):
    import dataclasses
    try:
        return {f.name for f in dataclasses.fields(cls)}
    except TypeError:
        return set()


def _check_2026_08():
    """None when the running vLLM has the 2026-08 interface, else what is missing."""
    try:
        from vllm.v1.kv_offload import base, config  # noqa: F401
    except ImportError as e:
        return "no vllm.v1.kv_offload.base/config (%s)" % e
    missing = [n for n in ("OffloadingSpec", "OffloadingManager", "OffloadingWorker",
                           "LookupResult", "Medium", "Locality", "OffloadingEvent",
                           "PrepareStoreOutput", "TransferResult", "BlockIDsLoadStoreSpec",
                           "GPULoadStoreSpec", "RequestOffloadingContext", "OffloadPolicy")
               if not hasattr(base, n)]
    if missing:
        return "vllm.v1.kv_offload.base lacks %s" % ", ".join(missing)
    checks = [
        (_params(base.OffloadingSpec.__init__) == ["config"], "OffloadingSpec(config)"),
        (hasattr(base.OffloadingSpec, "get_worker"), "OffloadingSpec.get_worker"),
        (_params(base.OffloadingManager.lookup) == ["key", "req_context"],
         "OffloadingManager.lookup(key, req_context)"),
        (hasattr(base.OffloadingManager, "on_new_request"), "OffloadingManager.on_new_request"),
        (_params(base.OffloadingWorker.submit_store) == ["job_id", "src_spec", "dst_spec"],
         "OffloadingWorker.submit_store(job_id, src_spec, dst_spec)"),
        ({"keys_to_store", "store_spec", "evicted_keys"} <= _fields(base.PrepareStoreOutput),
         "PrepareStoreOutput(keys_to_store, store_spec, evicted_keys)"),
        ({"keys", "medium", "removed", "locality"} <= _fields(base.OffloadingEvent),
         "OffloadingEvent(keys, medium, removed, locality)"),
        ({"job_id", "success", "transfer_size", "transfer_time"} <=
         _fields(base.TransferResult), "TransferResult(job_id, success, transfer_size, "
         "transfer_time)"),
        ("policy" in _fields(base.RequestOffloadingContext), "RequestOffloadingContext(policy)"),
        (hasattr(base.OffloadPolicy, "BLOCK_LEVEL"),
         "OffloadPolicy.BLOCK_LEVEL (vLLM after the block-to-chunk rename is not supported)"),
        (hasattr(base.Medium, "CPU") and hasattr(base.LookupResult, "HIT_PENDING"),
         "Medium.CPU, LookupResult.HIT_PENDING"),
    ]
    bad = [what for ok, what in checks if not ok]
    return "the 2026-08 interface differs: %s" % ", ".join(bad) if bad else None


def _check_v0_20():
    """None when the running vLLM has the 0.20 interface, else what is missing."""
    try:
        from vllm.v1.kv_offload import abstract, mediums, spec  # noqa: F401
        from vllm.v1.kv_offload.worker import worker
    except ImportError as e:
        return "no vllm.v1.kv_offload.abstract/mediums/spec/worker.worker (%s)" % e
    missing = [n for n in ("OffloadingManager", "OffloadingEvent", "PrepareStoreOutput",
                           "ReqContext") if not hasattr(abstract, n)]
    missing += [n for n in ("BlockIDsLoadStoreSpec", "GPULoadStoreSpec")
                if not hasattr(mediums, n)]
    missing += [n for n in ("OffloadingHandler", "TransferResult") if not hasattr(worker, n)]
    if not hasattr(spec, "OffloadingSpec"):
        missing.append("OffloadingSpec")
    if missing:
        return "the 0.20 modules lack %s" % ", ".join(missing)
    checks = [
        (_params(spec.OffloadingSpec.__init__) == ["vllm_config", "kv_cache_config"],
         "OffloadingSpec(vllm_config, kv_cache_config)"),
        (_params(abstract.OffloadingManager.lookup) == ["key", "req_context"],
         "OffloadingManager.lookup(key, req_context)"),
        (_params(abstract.OffloadingManager.prepare_store) == ["keys", "req_context"],
         "OffloadingManager.prepare_store(keys, req_context)"),
        (_params(mediums.GPULoadStoreSpec.__init__) == ["block_ids", "group_sizes",
                                                        "block_indices"],
         "GPULoadStoreSpec(block_ids, group_sizes, block_indices)"),
        ({"keys_to_store", "store_spec", "evicted_keys"} <= _fields(abstract.PrepareStoreOutput),
         "PrepareStoreOutput(keys_to_store, store_spec, evicted_keys)"),
        ({"keys", "medium", "removed"} <= _fields(abstract.OffloadingEvent),
         "OffloadingEvent(keys, medium, removed)"),
        ({"job_id", "success", "transfer_size", "transfer_time", "transfer_type"} <=
         _fields(worker.TransferResult), "TransferResult(..., transfer_type)"),
    ]
    bad = [what for ok, what in checks if not ok]
    return "the 0.20 interface differs: %s" % ", ".join(bad) if bad else None


_GENERATION = None


def generation():
    """"2026-08" or "v0.20": the running vLLM's generation (ImportError for any other)."""
    global _GENERATION
    if _GENERATION is None:
        try:
            import vllm  # noqa: F401
        except ImportError as e:
            raise ImportError("kvoffload.vllm needs vLLM (supported: %s): %s" %
                              (_supported(), e)) from None
        why_not_new = _check_2026_08()
        if why_not_new is None:
            _GENERATION = "2026-08"
        else:
            why_not_old = _check_v0_20()
            if why_not_old is not None:
                import vllm
                raise ImportError(
                    "kvoffload.vllm supports %s; this vLLM (%s) matches neither: 2026-08: %s; "
                    "0.20: %s" % (_supported(), getattr(vllm, "__version__", "unknown version"),
                                  why_not_new, why_not_old))
            _GENERATION = "v0.20"
    return _GENERATION


def generation_module():
    import importlib
    return importlib.import_module("." + _MODULES[generation()], __name__)


def __getattr__(name):
    """Imports the vLLM-facing classes of the running vLLM's generation on first access."""
    if name not in _LAZY:
        raise AttributeError("module %r has no attribute %r" % (__name__, name))
    value = getattr(generation_module(), name)
    globals()[name] = value
    return value
