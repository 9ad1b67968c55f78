"""The capability table: every way the supported vLLM releases' kv_offload interfaces differ,
one row each, detected on the running vLLM by probing its modules, classes, signatures,
dataclass fields and enum members (never its version string).

Each row has a name, what it probes, and the adapter chosen for each answer (a word the
adapter layer, kvoffload.vllm.adapter, reads from Api.choice). A probe that finds an interface
the plugin cannot serve raises Unsupported, and the first access of kvoffload.vllm.KvoffloadSpec
(vLLM's factory does that at start) raises ImportError naming the supported releases and the
row that failed: never an AttributeError later in vLLM's scheduler.

Adding a release is adding the rows (or the answers of rows) it differs in; docs/vllm.md has
the table of releases by row. Importing this module imports no vLLM; detect() does.
"""

import dataclasses
import importlib
import inspect

# The releases whose kv_offload files were read and are served (docs/vllm.md, README.md).
SUPPORTED_RELEASES = (
    "0.20.2", "0.21.0", "0.22.0", "0.22.1", "0.23.0", "0.24.0", "0.25.0", "0.25.1", "0.26.0",
    "main 017e9f4 (2026-08-17)", "main 7cfb97e (2026-08-20)")

MEDIUM = "KVOFFLOAD"  # LoadStoreSpec.medium() of kvoffload rows where vLLM routes by medium


class Unsupported(Exception):
    """A probe found an interface the plugin cannot serve (its message says what)."""


def _params(func):
    """Parameter names without self; "x=" for one with a default (None: not introspectable)."""
    try:
        sig = inspect.signature(func)
    except (TypeError, ValueError):
        return None
    return [p.name + ("=" if p.default is not p.empty else "")
            for p in sig.parameters.values() if p.name != "self"]


def _fields(cls):
    try:
        return [f.name for f in dataclasses.fields(cls)]
    except TypeError:
        return list(getattr(cls, "_fields", ()))  # NamedTuple


def _need(ok, what):
    if not ok:
        raise Unsupported(what)


class Api:
    """The running vLLM's kv_offload classes (attributes named as in vLLM) and the adapter
    chosen by each row (choice[row name])."""

    def __init__(self):
        self.choice = {}

    def get(self, name):
        return getattr(self, name, None)


def _import(name):
    """The module, None when vLLM has no such module, Unsupported when it has one that does not
    import (a missing dependency of vLLM's, say)."""
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as e:
        if e.name and name.startswith(e.name):
            return None
        raise Unsupported("%s does not import: %s" % (name, e)) from None
    except ImportError as e:
        raise Unsupported("%s does not import: %s" % (name, e)) from None


def _take(api, module, names, required=True):
    for n in names:
        value = getattr(module, n, None) if module is not None else None
        if value is None and required:
            raise Unsupported("%s has no %s" % (module.__name__, n))
        if value is not None:
            setattr(api, n, value)


_CORE_NAMES = ("OffloadingManager", "OffloadingSpec", "PrepareStoreOutput", "OffloadingEvent",
               "ReqContext", "LoadStoreSpec", "BlockIDsLoadStoreSpec", "GPULoadStoreSpec")
_OPTIONAL_NAMES = ("LookupResult", "Medium", "Locality", "OffloadPolicy",
                   "RequestOffloadingContext", "OffloadingWorker", "TransferResult",
                   "OffloadingKVEventsConfig")


# -- the rows --------------------------------------------------------------------------------
# Each: (name, what it probes, function(api) -> the chosen adapter, or raise Unsupported).

def _modules(api):
    base = _import("vllm.v1.kv_offload.base")
    if base is not None and hasattr(base, "OffloadingManager"):
        _take(api, base, _CORE_NAMES)
        _take(api, base, _OPTIONAL_NAMES, required=False)
        worker = _import("vllm.v1.kv_offload.worker.worker")
        if worker is not None:
            _take(api, worker, ("OffloadingHandler", "TransferResult"), required=False)
        api.config_module = _import("vllm.v1.kv_offload.config")
        return "base"
    mods = [_import("vllm.v1.kv_offload." + m) for m in ("abstract", "mediums", "spec",
                                                         "worker.worker")]
    _need(all(m is not None for m in mods),
          "neither vllm.v1.kv_offload.base nor vllm.v1.kv_offload.{abstract, mediums, spec, "
          "worker.worker}")
    abstract, mediums, spec, worker = mods
    _take(api, abstract, ("OffloadingManager", "PrepareStoreOutput", "OffloadingEvent",
                          "ReqContext", "LoadStoreSpec"))
    _take(api, mediums, ("BlockIDsLoadStoreSpec", "GPULoadStoreSpec"))
    _take(api, spec, ("OffloadingSpec",))
    _take(api, worker, ("OffloadingHandler", "TransferResult"))
    api.config_module = None
    return "abstract"


def _spec_constructor(api):
    p = _params(api.OffloadingSpec.__init__)
    if p == ["vllm_config", "kv_cache_config"]:
        return "vllm_config"
    if p == ["config"]:
        cfg = api.config_module
        _need(cfg is not None and hasattr(cfg, "OffloadingConfig"),
              "OffloadingSpec(config) without vllm.v1.kv_offload.config.OffloadingConfig")
        fields = set(_fields(cfg.OffloadingConfig))
        want = {"groups", "worker_kv_bytes_per_block", "enable_kv_cache_events", "extra_config",
                "engine_id", "cache", "parallel"}
        _need(want <= fields, "OffloadingConfig lacks %s" % ", ".join(sorted(want - fields)))
        api.OffloadingConfig = cfg.OffloadingConfig
        return "offloading_config"
    raise Unsupported("OffloadingSpec.__init__(%s): neither (vllm_config, kv_cache_config) nor "
                      "(config)" % ", ".join(p or ["?"]))


def _transfers(api):
    spec = api.OffloadingSpec
    w = api.get("OffloadingWorker")
    if hasattr(spec, "get_worker") and w is not None and hasattr(w, "submit_store"):
        for m, want in (("submit_store", ["job_id", "src_spec", "dst_spec"]),
                        ("submit_load", ["job_id", "src_spec", "dst_spec"]),
                        ("get_finished", []), ("wait", ["job_ids"])):
            _need(_params(getattr(w, m, None)) == want,
                  "OffloadingWorker.%s(%s)" % (m, ", ".join(want)))
        return "worker"
    h = api.get("OffloadingHandler")
    if hasattr(spec, "get_handlers") and h is not None:
        for m, want in (("transfer_async", ["job_id", "spec"]), ("get_finished", []),
                        ("wait", ["job_ids"])):
            _need(_params(getattr(h, m, None)) == want,
                  "OffloadingHandler.%s(%s)" % (m, ", ".join(want)))
        return "handlers"
    raise Unsupported("OffloadingSpec has neither get_worker (OffloadingWorker.submit_store/"
                      "submit_load) nor get_handlers (OffloadingHandler.transfer_async)")


def _spec_medium(api):
    if hasattr(api.LoadStoreSpec, "medium"):
        return "medium"
    _need(api.choice["transfers"] != "handlers",
          "handlers routed by medium, but LoadStoreSpec has no medium()")
    return "none"


def _transfer_result(api):
    tr = api.get("TransferResult")
    _need(tr is not None, "no TransferResult")
    fields = _fields(tr)
    want = ["job_id", "success", "transfer_size", "transfer_time"]
    _need(fields[:4] == want, "TransferResult(%s), not (%s[, transfer_type])" % (
        ", ".join(fields), ", ".join(want)))
    if fields == want + ["transfer_type"]:
        return "typed"
    _need(fields == want, "TransferResult has fields %s" % ", ".join(fields[4:]))
    return "plain"


def _lookup_result(api):
    m = api.OffloadingManager
    _need(_params(m.lookup) == ["key", "req_context"],
          "OffloadingManager.lookup(key, req_context)")
    for name in ("prepare_load", "prepare_store"):
        _need(_params(getattr(m, name)) == ["keys", "req_context"],
              "OffloadingManager.%s(keys, req_context)" % name)
    lr = api.get("LookupResult")
    if lr is None:
        return "bool"   # True / None (ask again) / False
    members = set(getattr(lr, "__members__", {}))
    _need({"MISS", "HIT", "HIT_PENDING"} <= members,
          "LookupResult lacks %s" % ", ".join(sorted({"MISS", "HIT", "HIT_PENDING"} - members)))
    return "enum"


def _request_context(api):
    m = api.OffloadingManager
    touch, cl, cs = _params(m.touch), _params(m.complete_load), _params(m.complete_store)
    if touch == ["keys"] and cl == ["keys"] and cs == ["keys", "success="]:
        return "none"   # 0.20: complete_store when the storing request finishes
    if touch == ["keys", "req_context"] and cl == ["keys", "req_context"] and \
            cs == ["keys", "req_context", "success="]:
        return "every_call"  # complete_store when each store job finishes
    raise Unsupported("OffloadingManager.touch(%s), complete_load(%s), complete_store(%s)" % (
        ", ".join(touch or []), ", ".join(cl or []), ", ".join(cs or [])))


def _request_id(api):
    return "req_id" if "req_id" in _fields(api.ReqContext) else "object"


def _request_policy(api):
    m = api.OffloadingManager
    if not hasattr(m, "on_new_request"):
        return "none"
    policy, ctx = api.get("OffloadPolicy"), api.get("RequestOffloadingContext")
    _need(policy is not None and ctx is not None,
          "on_new_request without OffloadPolicy/RequestOffloadingContext")
    _need(hasattr(policy, "BLOCK_LEVEL"),
          "OffloadPolicy has no BLOCK_LEVEL (members %s): vLLM after the block-to-chunk rename "
          "(CHUNK_LEVEL) is not supported" % ", ".join(getattr(policy, "__members__", {})))
    _need("policy" in _fields(ctx), "RequestOffloadingContext(policy)")
    return "block_level"


def _schedule_end(api):
    m = api.OffloadingManager
    if not hasattr(m, "on_schedule_end"):
        return "none"
    p = _params(m.on_schedule_end)
    _need(p in ([], ["context"]), "on_schedule_end(%s)" % ", ".join(p or []))
    return "context" if p else "plain"


def _event(api):
    fields = _fields(api.OffloadingEvent)
    if fields == ["keys", "medium", "removed"]:
        kind = "medium"
    elif fields == ["keys", "medium", "removed", "locality"]:
        _need(hasattr(api.get("Locality"), "LOCAL"), "OffloadingEvent.locality without "
              "Locality.LOCAL")
        kind = "medium_locality"
    else:
        raise Unsupported("OffloadingEvent(%s)" % ", ".join(fields))
    medium = api.get("Medium")
    if medium is not None:
        _need(hasattr(medium, "CPU"), "Medium has no CPU")
        return kind + "_enum"
    return kind + "_str"


def _kv_events_config(api):
    return "spec" if api.get("OffloadingKVEventsConfig") is not None else "vllm_config"


def _replicated_layout(api):
    cfg = api.get("OffloadingConfig")
    if cfg is not None and "replicated_layout" in _fields(cfg):
        return "vllm_chooses"   # only rank 0 stores under vLLM's replicated (MLA) layout
    return "every_rank_stores"


def _store_output(api):
    fields = _fields(api.PrepareStoreOutput)
    _need(fields == ["keys_to_store", "store_spec", "evicted_keys"],
          "PrepareStoreOutput(%s)" % ", ".join(fields))
    _need(_params(api.BlockIDsLoadStoreSpec.__init__) == ["block_ids"],
          "BlockIDsLoadStoreSpec(block_ids)")
    return "plain"


def _manager_extras(api):
    m = api.OffloadingManager
    have = [n for n in ("reset_cache", "has_pending_work", "get_stats", "on_request_finished")
            if hasattr(m, n)]
    return "+".join(have) or "none"


ROWS = (
    ("modules", "vllm.v1.kv_offload.base, else abstract/mediums/spec/worker.worker",
     _modules),
    ("spec_constructor", "OffloadingSpec.__init__ parameters", _spec_constructor),
    ("transfers", "OffloadingSpec.get_worker + OffloadingWorker.submit_*, or get_handlers + "
     "OffloadingHandler.transfer_async", _transfers),
    ("spec_medium", "LoadStoreSpec.medium()", _spec_medium),
    ("transfer_result", "TransferResult fields", _transfer_result),
    ("lookup_result", "LookupResult enum (else lookup -> bool | None)", _lookup_result),
    ("request_context", "touch/complete_load/complete_store parameters", _request_context),
    ("request_id", "ReqContext.req_id field", _request_id),
    ("request_policy", "OffloadingManager.on_new_request, OffloadPolicy members",
     _request_policy),
    ("schedule_end", "OffloadingManager.on_schedule_end parameters", _schedule_end),
    ("event", "OffloadingEvent fields, Medium enum", _event),
    ("kv_events_config", "OffloadingKVEventsConfig (spec.kv_events_config)", _kv_events_config),
    ("replicated_layout", "OffloadingConfig.replicated_layout field", _replicated_layout),
    ("store_output", "PrepareStoreOutput fields, BlockIDsLoadStoreSpec(block_ids)",
     _store_output),
    ("manager_extras", "reset_cache, has_pending_work, get_stats, on_request_finished",
     _manager_extras),
)


def supported_text():
    return "vLLM " + ", ".join(SUPPORTED_RELEASES)


def detect():
    """The running vLLM's Api, or ImportError naming the supported releases and the row whose
    probe failed."""
    try:
        import vllm
    except ImportError as e:
        raise ImportError("kvoffload.vllm needs vLLM (supported: %s): %s" %
                          (supported_text(), e)) from None
    api = Api()
    for name, what, probe in ROWS:
        try:
            api.choice[name] = probe(api)
        except Unsupported as e:
            raise ImportError(
                "kvoffload.vllm supports %s (docs/vllm.md); this vLLM (%s) fails the capability "
                "probe %r (%s): %s" % (supported_text(), getattr(vllm, "__version__", "unknown "
                                                                  "version"), name, what, e)
            ) from None
    return api


_API = None


def running():
    """detect() once per process."""
    global _API
    if _API is None:
        _API = detect()
    return _API
