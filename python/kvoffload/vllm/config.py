"""kvoffload's EngineSpec and connector settings from a vLLM config (no vLLM import: the
config objects are read by attribute, so this module is tested without vLLM): engine_spec()
from (vllm_config, kv_cache_config) of vLLM 0.20 to 0.25, engine_spec_from_offloading_config()
from the OffloadingConfig of vLLM 0.26 and main 2026-08 (capabilities row spec_constructor).

Every process of one engine (the scheduler and each worker) derives the same EngineSpec from
the same vllm_config; the daemon refuses a process whose spec differs, with both in the message.

kv_connector_extra_config keys (all optional but the budget):

  cpu_bytes_to_use | budget_bytes   host memory for this engine replica on this node (an int,
                                    or a string with a unit: "64GiB", "500GB")
  engine_id                         the region's name (default: kv_transfer_config.engine_id);
                                    a fixed name lets a restarted engine find its cached KV
  socket_path                       kvoffloadd's data socket (default $KVOFFLOAD_SOCKET, else
                                    /run/kvoffload/kvoffload.sock)
  local_world_size                  ranks of this replica on this node (default: world_size /
                                    nnodes for the mp executor, 1 for uni; required for ray and
                                    external_launcher with world_size > 1). A replica must run
                                    on one node (the daemon's index serves one node).
  executor                          override of parallel_config.distributed_executor_backend
  open_timeout_s, call_timeout_s    client deadlines (kvoffload.DEFAULT_*_TIMEOUT_S)
  wait_timeout_s                    a worker's wait(job_ids) logs every this many seconds
                                    while it still waits (default 120; it does not give up)
  retry_window_s                    how long a worker resubmits a job its lost session took
                                    down, once registered again (default 30)
  pending_timeout_s                 a block still being written after this long looks up as a
                                    miss (default 60)
  num_events                        CUDA interprocess events per worker (default 64)
  pool                              share offloaded KV with other engines of the node (README
                                    "Pools"): true = the data-parallel replicas of this engine
                                    share one pool named after its engine_id; a string = that
                                    pool's name (engines of the same model under one name)
  model_identity                    what pool members must agree on; derived under vLLM 0.20
                                    from the model, revision, dtype, quantization, KV-cache
                                    dtype, block size, attention kind and layers; required with
                                    "pool" under vLLM 0.26 and main (their config names no
                                    model)
"""

import dataclasses
import os
import re

from ..client import (DEFAULT_CALL_TIMEOUT_S, DEFAULT_OPEN_TIMEOUT_S, EngineSpec,
                      KvoffloadError, Reason, StatusCode)

DEFAULT_SOCKET = "/run/kvoffload/kvoffload.sock"
ENV_SOCKET = "KVOFFLOAD_SOCKET"

_EXECUTORS = {None: None, "uni": "uni", "mp": "mp", "ray": "ray", "external_launcher": "external",
              "external": "external"}
_UNITS = {"": 1, "b": 1, "k": 10**3, "kb": 10**3, "m": 10**6, "mb": 10**6, "g": 10**9,
          "gb": 10**9, "t": 10**12, "tb": 10**12, "kib": 2**10, "mib": 2**20, "gib": 2**30,
          "tib": 2**40}


@dataclasses.dataclass(frozen=True)
class Settings:
    """How the connector reaches the daemon."""
    socket_path: str
    open_timeout_s: float
    call_timeout_s: float
    wait_timeout_s: float
    num_events: int
    retry_window_s: float = 30.0
    pending_timeout_s: float = 60.0


def config_error(message):
    """A configuration mistake: INVALID_ARGUMENT naming the kv_connector_extra_config key."""
    return KvoffloadError(StatusCode.INVALID_ARGUMENT, "kvoffload.vllm: " + message)


def parse_bytes(value, key):
    """An int, or a string such as "64GiB" / "500 GB" / "1e9"."""
    if isinstance(value, bool):
        raise config_error("%s must be a byte count, got %r" % (key, value))
    if isinstance(value, (int, float)):
        number = value
    else:
        m = re.fullmatch(r"\s*([0-9.eE+]+)\s*([A-Za-z]*)\s*", str(value))
        unit = m.group(2).lower() if m else None
        if not m or unit not in _UNITS:
            raise config_error("%s=%r is not a byte count (e.g. 68719476736 or \"64GiB\")" %
                               (key, value))
        try:
            number = float(m.group(1)) * _UNITS[unit]
        except ValueError:
            raise config_error("%s=%r is not a byte count" % (key, value)) from None
    if number != int(number) or number <= 0:
        raise config_error("%s=%r must be a positive whole number of bytes" % (key, value))
    return int(number)


def _positive(extra, key, default, kind=float):
    value = extra.get(key, default)
    try:
        value = kind(value)
    except (TypeError, ValueError):
        raise config_error("%s=%r is not a number" % (key, value)) from None
    if not value > 0:
        raise config_error("%s=%r must be > 0" % (key, value))
    return value


def settings(extra):
    return Settings(
        socket_path=str(extra.get("socket_path") or os.environ.get(ENV_SOCKET) or
                        DEFAULT_SOCKET),
        open_timeout_s=_positive(extra, "open_timeout_s", DEFAULT_OPEN_TIMEOUT_S),
        call_timeout_s=_positive(extra, "call_timeout_s", DEFAULT_CALL_TIMEOUT_S),
        wait_timeout_s=_positive(extra, "wait_timeout_s", 120.0),
        num_events=_positive(extra, "num_events", 64, int),
        retry_window_s=_positive(extra, "retry_window_s", 30.0),
        pending_timeout_s=_positive(extra, "pending_timeout_s", 60.0))


def _executor(parallel, extra):
    if "executor" in extra:
        name = str(extra["executor"])
    else:
        backend = getattr(parallel, "distributed_executor_backend", None)
        if backend is not None and not isinstance(backend, str):
            name = "external"  # an Executor class: the launcher is not one vLLM knows
        else:
            name = backend
    if name not in _EXECUTORS:
        raise config_error("executor %r is not one of uni, mp, ray, external_launcher" % name)
    executor = _EXECUTORS[name]
    if executor is None:
        executor = "uni" if getattr(parallel, "world_size", 1) == 1 else "mp"
    return executor


def _local_world_size(parallel, extra, executor, world_size):
    if "local_world_size" in extra:
        return _positive(extra, "local_world_size", 1, int)
    if executor == "uni":
        return 1
    if executor == "mp":
        nnodes = int(getattr(parallel, "nnodes", 1) or 1)
        if world_size % nnodes != 0:
            raise config_error("world_size %d is not divisible by nnodes %d; set "
                               "local_world_size" % (world_size, nnodes))
        return world_size // nnodes
    return 0  # ray / external: not known here; the daemon names the rule and the fix below


def _one_group(groups):
    """The only KV cache group: kvoffload offloads models with exactly one."""
    groups = list(groups or ())
    if len(groups) != 1:
        raise KvoffloadError(
            StatusCode.FAILED_PRECONDITION,
            "kvoffload.vllm: the model has %d KV cache groups (hybrid or sliding-window "
            "attention); kvoffload offloads models with exactly one KV cache group" % len(groups))
    return groups[0]


def _budget_key(extra):
    """The extra_config key of the engine's host memory (required)."""
    key = "budget_bytes" if "budget_bytes" in extra else "cpu_bytes_to_use"
    if key not in extra:
        raise config_error(
            "set the host memory for this engine on this node: kv_connector_extra_config "
            "\"cpu_bytes_to_use\" (or \"budget_bytes\"), e.g. 68719476736 or \"64GiB\"; "
            "`kvoffloadctl plan` shows the rows it buys")
    return key


def _check_one_node(local_world_size, world_size):
    if 0 < local_world_size < world_size:
        raise KvoffloadError(
            StatusCode.FAILED_PRECONDITION,
            "kvoffload.vllm: this engine replica spans nodes (%d of its %d ranks on this node); "
            "the connector uses the daemon's index, which serves one node, so a replica must "
            "run on one node (run one replica per node with data parallelism instead)" %
            (local_world_size, world_size))


def _pool_name(extra, engine_id):
    """The pool named by extra_config "pool" ("" = private): true = the engine_id, which every
    data-parallel replica of one vLLM engine shares."""
    value = extra.get("pool", False)
    if value is True or (isinstance(value, str) and value.lower() in ("true", "1", "yes")):
        return engine_id
    if value in (False, None, "") or (isinstance(value, str) and
                                      value.lower() in ("false", "0", "no")):
        return ""
    if not isinstance(value, str) or not re.fullmatch(r"[A-Za-z0-9._-]{1,128}", value):
        raise config_error("pool %r must be true, false or a name of 1..128 of [A-Za-z0-9._-]" %
                           (value,))
    return value


def _model_identity(vllm_config, kv_spec, use_mla, layers):
    """Everything of a vLLM (0.20 to 0.25) config that changes the KV bytes of one block."""
    model = getattr(vllm_config, "model_config", None)
    cache = getattr(vllm_config, "cache_config", None)
    parts = [("model", getattr(model, "model", None)),
             ("revision", getattr(model, "revision", None)),
             ("dtype", getattr(model, "dtype", None)),
             ("quantization", getattr(model, "quantization", None)),
             ("hf_overrides", getattr(model, "hf_overrides", None) or None),
             ("kv_cache_dtype", getattr(cache, "cache_dtype", None)),
             ("block_size", getattr(kv_spec, "block_size", None)),
             ("page_bytes", getattr(kv_spec, "page_size_bytes", None)),
             ("attention", "mla" if use_mla else "mha"),
             ("layers", layers)]
    return " ".join("%s=%s" % (k, v) for k, v in parts)


def with_pool(spec, extra, identity=None):
    """`spec` with extra_config's pool and model identity (unchanged when "pool" is unset)."""
    name = _pool_name(extra, spec.engine_id)
    if not name:
        return spec
    explicit = extra.get("model_identity")
    if explicit is not None:
        identity = str(explicit)
    if not identity:
        raise config_error("a pooled engine needs kv_connector_extra_config \"model_identity\": a "
                           "string naming the model, its revision, dtype and KV-cache dtype, "
                           "equal for every engine of pool %r" % name)
    return dataclasses.replace(spec, pool=name, model_identity=identity)


def engine_spec(vllm_config, kv_cache_config, extra=None, block_size_factor=1):
    """The EngineSpec of this engine replica on this node (DESIGN.md §2)."""
    if extra is None:
        extra = dict(vllm_config.kv_transfer_config.kv_connector_extra_config or {})
    parallel = vllm_config.parallel_config
    kv_spec = _one_group(getattr(kv_cache_config, "kv_cache_groups", None)).kv_cache_spec

    budget_key = _budget_key(extra)

    engine_id = str(extra.get("engine_id") or
                    getattr(vllm_config.kv_transfer_config, "engine_id", None) or "vllm")
    tp = int(getattr(parallel, "tensor_parallel_size", 1))
    pp = int(getattr(parallel, "pipeline_parallel_size", 1))
    pcp = int(getattr(parallel, "prefill_context_parallel_size", 1) or 1)
    dcp = int(getattr(parallel, "decode_context_parallel_size", 1) or 1)
    world_size = int(getattr(parallel, "world_size", tp * pp))
    executor = _executor(parallel, extra)
    tensors = list(getattr(kv_cache_config, "kv_cache_tensors", None) or ())
    if not tensors:
        raise KvoffloadError(StatusCode.FAILED_PRECONDITION,
                             "kvoffload.vllm: the KV cache config has no KV cache tensors")
    num_blocks = int(getattr(kv_cache_config, "num_blocks", 0) or 0)
    if num_blocks <= 0:
        raise KvoffloadError(StatusCode.FAILED_PRECONDITION,
                             "kvoffload.vllm: the KV cache config has no GPU blocks")
    # A worker's bytes per GPU block: every KV cache tensor holds num_blocks blocks of its
    # layers (one layer each, or several in a cross-layer layout).
    worker_bytes_per_block = sum(int(t.size) for t in tensors) // num_blocks
    layers = len(getattr(kv_cache_config.kv_cache_groups[0], "layer_names", None) or tensors)
    local_world_size = _local_world_size(parallel, extra, executor, world_size)
    _check_one_node(local_world_size, world_size)
    model = getattr(vllm_config, "model_config", None)
    use_mla = bool(getattr(model, "use_mla", False))
    spec = EngineSpec(
        engine_id=engine_id,
        dp_rank=int(getattr(parallel, "data_parallel_rank", 0) or 0),
        world_size=world_size,
        local_world_size=local_world_size,
        tp=tp, pp=pp, pcp=pcp, dcp=dcp,
        executor=executor,
        attention="mla" if use_mla else "mha",
        num_kv_groups=1,
        num_layers=layers,
        page_bytes=int(kv_spec.page_size_bytes),
        worker_bytes_per_block=worker_bytes_per_block,
        blocks_per_row=int(block_size_factor),
        budget_bytes=parse_bytes(extra[budget_key], budget_key))
    return with_pool(spec, extra, _model_identity(vllm_config, kv_spec, use_mla, layers))


def explain(error, spec, socket_path):
    """A KvoffloadError from opening the engine, with what the operator should do."""
    code, message = error.code, error.message
    undeclared = spec.local_world_size == 0 and spec.executor in ("ray", "external")
    # Decided on code + reason (docs/api.md "Errors"), never on the message's words.
    reason, rule_name = error.reason, error.metadata.get("rule", "")
    rule = code in (StatusCode.INVALID_ARGUMENT, StatusCode.FAILED_PRECONDITION) and \
        reason == Reason.SPEC_RULE  # a topology rule of DESIGN.md §2 (common/geometry.h)
    if rule and (rule_name == "local_world_size_divides_world_size" or undeclared):
        fix = ("set kv_connector_extra_config \"local_world_size\" to the number of this "
               "replica's GPUs on each node")
    elif rule:
        fix = ("this topology is not supported by kvoffload (DESIGN.md §2); `kvoffloadctl plan "
               "--world_size=%d --local_world_size=%d --tp=%d --pp=%d ...` reproduces it" %
               (spec.world_size, spec.local_world_size, spec.tp, spec.pp))
    elif code == StatusCode.RESOURCE_EXHAUSTED:
        fix = ("lower kv_connector_extra_config \"cpu_bytes_to_use\" (%d bytes now) or raise "
               "kvoffloadd's --max_region_bytes; `kvoffloadctl stats` shows what other engines "
               "hold" % spec.budget_bytes)
    elif code == StatusCode.FAILED_PRECONDITION and reason == Reason.SPEC_MISMATCH:
        fix = ("another process of engine %r registered a different spec: give each engine its "
               "own kv_connector_extra_config \"engine_id\", or `kvoffloadctl drop %s` the old "
               "one" % (spec.engine_id, spec.engine_id))
    else:
        return error
    return KvoffloadError(code, "%s (kvoffloadd at %s). Fix: %s" % (message, socket_path, fix),
                          reason, error.metadata)


def model_parallel_rank(vllm_config):
    """vLLM 0.20: this worker's rank in [0, world_size) of its engine replica:
    pp_rank × tp + tp_rank (vllm.distributed.parallel_state), else parallel_config.rank."""
    try:
        from vllm.distributed import parallel_state
        tp = parallel_state.get_tensor_model_parallel_world_size()
        tp_rank = parallel_state.get_tensor_model_parallel_rank()
        pp_rank = parallel_state.get_pp_group().rank_in_group
        return pp_rank * tp + tp_rank
    except (ImportError, AssertionError, AttributeError):
        return int(getattr(vllm_config.parallel_config, "rank", 0) or 0)


def engine_spec_from_offloading_config(offloading_config, replicated=False):
    """The EngineSpec of this engine replica on this node from vLLM's (0.26, main)
    OffloadingConfig (the spec sees no vllm_config there). Its parallel config has no executor
    and no node count: the executor is "uni" for one worker, else "mp", unless extra_config
    "executor" says otherwise, and local_world_size is the world size unless extra_config
    "local_world_size" says otherwise (a replica must run on one node).

    replicated: vLLM's replicated_layout (pure MLA, TP only, one node): attention "mla" and
    page_bytes = worker bytes / layers, so the daemon keeps one copy per row exactly when vLLM
    lets only rank 0 store; otherwise "mha" (one copy per rank, every rank stores)."""
    c = offloading_config
    extra = dict(c.extra_config or {})
    group = _one_group(c.groups)
    budget_key = _budget_key(extra)
    wbpb = int(c.worker_kv_bytes_per_block or 0)
    if wbpb <= 0:
        raise KvoffloadError(StatusCode.FAILED_PRECONDITION,
                             "kvoffload.vllm: the KV cache config has no GPU blocks")
    p = c.parallel
    world_size = int(p.world_size)
    if "executor" in extra:
        executor = _EXECUTORS.get(str(extra["executor"]), "?")
        if executor == "?":
            raise config_error("executor %r is not one of uni, mp, ray, external_launcher" %
                               extra["executor"])
    else:
        executor = "uni" if world_size == 1 else "mp"
    if "local_world_size" in extra:
        local_world_size = _positive(extra, "local_world_size", 1, int)
    else:
        local_world_size = 1 if executor == "uni" else (
            world_size if executor == "mp" else 0)
    _check_one_node(local_world_size, world_size)
    layers = len(group.layer_names) or 1
    if wbpb % layers:
        layers = 1
    return with_pool(EngineSpec(
        engine_id=str(extra.get("engine_id") or c.engine_id or "vllm"),
        dp_rank=int(getattr(p, "data_parallel_index", 0) or 0),
        world_size=world_size,
        local_world_size=local_world_size,
        tp=int(p.tp_size), pp=int(p.pp_size), pcp=int(p.pcp_size), dcp=int(p.dcp_size),
        executor=executor,
        attention="mla" if replicated else "mha",
        num_kv_groups=1,
        num_layers=layers,
        page_bytes=wbpb // layers,
        worker_bytes_per_block=wbpb,
        blocks_per_row=int(c.cache.blocks_per_chunk or 1),
        budget_bytes=parse_bytes(extra[budget_key], budget_key)), extra)
