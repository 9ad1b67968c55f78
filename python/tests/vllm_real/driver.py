#!/usr/bin/env python3
"""Real-source harness: vLLM's own OffloadingConnector (scheduler and worker sides, unmodified
files of a given vLLM generation) driving kvoffload.vllm.KvoffloadSpec against a real kvoffloadd.

    PYTHONPATH=python KVOFFLOAD_DAEMON=... KVOFFLOAD_LIB=... \
        python3 python/tests/vllm_real/driver.py --src /work/vllm-src --gen v0_20_2 [--cuda]

--src holds one folder per generation (v0_20_2/, main_2026_08/, main_7cfb97e/), each made by
prepare.sh from MANIFEST.tsv. The scheduler side runs in this process (a small vLLM-like
engine: block pool with prefix cache, waiting/running queues, preemption, the connector calls
in vLLM's order); each TP rank's worker side runs in its own process (spawned), receiving the
pickled SchedulerOutput as vLLM's multiprocessing executor does, with KV memory in
kvoffload.host memfds (torch CPU tensors over them) or, with --cuda, CUDA tensors. The "model"
writes each full block's KV as a pseudo-random function of (block hash, rank), so every block
the connector loads is checked byte for byte on every rank. Exceptions that leave a connector
call are counted (the plugin raised, or vLLM's own code raised on what the plugin returned) —
in vLLM each of them kills the engine.

Prints one line per scenario and ends with "N passed, N failed".
"""

import argparse
import collections
import dataclasses
import hashlib
import multiprocessing
import os
import pickle
import shutil
import subprocess
import sys
import tempfile
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(os.path.dirname(HERE)))
sys.path.insert(0, HERE)
if os.path.join(REPO, "python") not in sys.path:
    sys.path.insert(1, os.path.join(REPO, "python"))

import stubs  # noqa: E402

# vLLM releases, oldest first, then the two main snapshots (MANIFEST.tsv has each one's files).
# v0_22_1 and v0_25_1 are byte-identical to v0_22_0 and v0_25_0 for every file listed.
GENERATIONS = ("v0_20_2", "v0_21_0", "v0_22_0", "v0_22_1", "v0_23_0", "v0_24_0", "v0_25_0",
               "v0_25_1", "v0_26_0", "main_2026_08", "main_7cfb97e")
CONNECTOR_MOD = "vllm.distributed.kv_transfer.kv_connector.v1.offloading_connector"


# ---------------------------------------------------------------------------- configuration
@dataclasses.dataclass
class Cfg:
    gen: str
    src: str
    engine_id: str
    socket_path: str
    world: int = 1
    layout: str = "cross"  # cross | per_layer
    device: str = "cpu"
    num_blocks: int = 64  # GPU blocks per worker (block 0 is vLLM's null block)
    num_layers: int = 4
    block_size: int = 16
    num_kv_heads: int = 2
    head_size: int = 32
    offload_block_size: int = 0  # extra_config block_size (0: not set)
    budget_bytes: int = 8 << 20
    events: bool = False
    use_mla: bool = False
    kv_load_failure_policy: str = "fail"  # vLLM's default
    spec: str = "kvoffload"  # kvoffload | cpu (vLLM's own CPU manager, cpu_baseline.py)
    forward_s: float = 0.0  # the forward pass's time (a real one takes milliseconds)
    extra: dict = dataclasses.field(default_factory=dict)

    @property
    def page_bytes(self):  # per layer, fp16 K and V (MLA: one latent)
        kv = 1 if self.use_mla else 2
        return kv * self.block_size * self.num_kv_heads * self.head_size * 2

    @property
    def block_bytes(self):  # one GPU block, all layers, one worker
        return self.page_bytes * self.num_layers


def layer_names(cfg):
    return ["model.layers.%d.self_attn.attn" % i for i in range(cfg.num_layers)]


def build_configs(cfg, rank):
    """(VllmConfig, KVCacheConfig) as vLLM builds them for this topology and rank."""
    import torch
    S = stubs
    extra = {"spec_name": "KvoffloadSpec", "spec_module_path": "kvoffload.vllm",
             "cpu_bytes_to_use": cfg.budget_bytes, "socket_path": cfg.socket_path}
    if cfg.offload_block_size:
        extra["block_size"] = cfg.offload_block_size
    if cfg.spec == "cpu":
        factor = max(1, (cfg.offload_block_size or cfg.block_size) // cfg.block_size)
        extra = {"spec_name": "HarnessCPUSpec", "spec_module_path": "cpu_baseline",
                 "cpu_bytes_to_use": cfg.budget_bytes, "harness_factor": factor,
                 "harness_events": cfg.events,  # vLLM's CPUOffloadingSpec rule:
                 "harness_cpu_blocks": cfg.budget_bytes // (cfg.block_bytes * cfg.world * factor)}
        if cfg.offload_block_size:
            extra["block_size"] = cfg.offload_block_size
    extra.update(cfg.extra)
    par = S.ParallelConfig(tensor_parallel_size=cfg.world, rank=rank,
                           distributed_executor_backend="mp" if cfg.world > 1 else "uni")
    vc = S.VllmConfig(
        model_config=S.ModelConfig(use_mla=cfg.use_mla,
                                   total_num_kv_heads=cfg.num_kv_heads * cfg.world),
        cache_config=S.CacheConfig(block_size=cfg.block_size),
        parallel_config=par,
        kv_transfer_config=S.KVTransferConfig(engine_id=cfg.engine_id,
                                              kv_connector_extra_config=extra),
        kv_events_config=S.KVEventsConfig(enable_kv_cache_events=cfg.events))
    names = layer_names(cfg)
    backend = backend_for(cfg)
    vc.harness_layers = {n: _Layer(backend) for n in names}
    spec_cls = S.MLAAttentionSpec if cfg.use_mla else S.FullAttentionSpec
    kv_spec = spec_cls(block_size=cfg.block_size, num_kv_heads=1 if cfg.use_mla else cfg.num_kv_heads,
                       head_size=cfg.head_size * (cfg.num_kv_heads if cfg.use_mla else 1),
                       dtype=torch.float16)
    assert kv_spec.page_size_bytes == cfg.page_bytes, (kv_spec.page_size_bytes, cfg.page_bytes)
    kcc = S.KVCacheConfig(
        num_blocks=cfg.num_blocks,
        kv_cache_tensors=[S.KVCacheTensor(size=cfg.num_blocks * cfg.page_bytes, shared_by=[n])
                          for n in names],
        kv_cache_groups=[S.KVCacheGroupSpec(layer_names=list(names), kv_cache_spec=kv_spec)])
    return vc, kcc


class _Layer:
    def __init__(self, backend):
        self._backend = backend

    def get_attn_backend(self):
        return self._backend


def backend_for(cfg):
    # 0.20 splits FlashAttention's (2, num_blocks, ...) per-layer layout into K and V tensors;
    # the 2026-08 generation registers per-layer tensors blocks-first (HND, one page a block).
    if cfg.layout == "per_layer" and cfg.gen == "v0_20_2" and not cfg.use_mla:
        return stubs.FlashAttnLikeBackend
    return stubs.BlocksFirstBackend


def load_vllm(src, gen):
    """Installs the stubs over <src>/<gen> and imports the real connector module."""
    import importlib
    vllm_dir = stubs.install(os.path.join(src, gen))
    import torch
    if not hasattr(torch.Tensor, "untyped_storage"):  # torch < 2.0 (Debian 12): same object
        torch.Tensor.untyped_storage = torch.Tensor._storage
    return importlib.import_module(CONNECTOR_MOD), vllm_dir


# ---------------------------------------------------------------------------- exceptions
class Calls:
    """Runs connector entry points the way vLLM does, recording what escapes them."""

    def __init__(self, vllm_dir, where):
        self.vllm_dir = vllm_dir
        self.where = where
        self.errors = []  # dicts: where, call, origin, text

    STUB_NAMES = None

    def origin(self, tb, exc=None):
        if Calls.STUB_NAMES is None:
            Calls.STUB_NAMES = {n for n, v in vars(stubs).items() if isinstance(v, type)}
        if isinstance(exc, (AttributeError, TypeError, NameError, ImportError)):
            msg = str(exc)
            if any("'%s'" % n in msg for n in Calls.STUB_NAMES) or "vllm." in msg:
                # vLLM's code asked a harness stand-in for something it does not model
                frames = traceback.extract_tb(tb)
                if not any(os.sep + "kvoffload" + os.sep in f.filename and "vllm_real" not in f.filename
                           for f in frames):
                    return "harness"
        frames = traceback.extract_tb(tb)
        for f in reversed(frames):
            fn = os.path.abspath(f.filename)
            if os.sep + "kvoffload" + os.sep in fn and "vllm_real" not in fn:
                return "plugin"
            if fn.startswith(self.vllm_dir + os.sep):
                return "vllm"
        return "harness"

    def __call__(self, name, fn, *args, default=None, **kw):
        try:
            return fn(*args, **kw)
        except BaseException as e:  # noqa: B902 — vLLM would die here; we record and go on
            if isinstance(e, KeyboardInterrupt):
                raise
            self.errors.append({"where": self.where, "call": name,
                                "origin": self.origin(e.__traceback__, e),
                                "text": "".join(traceback.format_exception(type(e), e,
                                                                           e.__traceback__))})
            return default


# ---------------------------------------------------------------------------- KV content
_CONTENT = collections.OrderedDict()


def content(key, rank, nbytes):
    """The KV bytes the "model" computes for a full block with this hash on this rank."""
    import numpy as np
    k = (key, rank, nbytes)
    c = _CONTENT.get(k)
    if c is None:
        seed = int.from_bytes(hashlib.blake2b(key + b"/%d" % rank, digest_size=8).digest(),
                              "little")
        c = np.random.default_rng(seed).integers(0, 256, nbytes, dtype=np.uint8)
        _CONTENT[k] = c
        if len(_CONTENT) > 4096:
            _CONTENT.popitem(last=False)
    return c


GARBAGE = 0xEE


# ---------------------------------------------------------------------------- worker process
class KVMemory:
    """This worker's KV cache: one tensor per KVCacheTensor (per layer) or one cross-layer
    tensor, on the host (memfd) or on CUDA; raw byte access per GPU block."""

    def __init__(self, cfg):
        import torch
        self.cfg = cfg
        self.allocs = []  # HostAllocations (kept alive as long as the tensors)
        nb, L, page = cfg.num_blocks, cfg.num_layers, cfg.page_bytes
        dev = "cuda" if cfg.device == "cuda" else "cpu"

        def raw(nbytes):
            if dev == "cuda":
                return torch.zeros(nbytes, dtype=torch.uint8, device="cuda")
            from kvoffload.host import HostAllocation
            a = HostAllocation(nbytes, name="kvo-harness")
            self.allocs.append(a)
            return torch.frombuffer(a.buf, dtype=torch.uint8, count=nbytes)

        kv = 1 if cfg.use_mla else 2
        inner = (cfg.block_size, 1 if cfg.use_mla else cfg.num_kv_heads,
                 cfg.head_size * (cfg.num_kv_heads if cfg.use_mla else 1))
        if cfg.layout == "cross":
            r = raw(nb * L * page)
            self.raws = [r]
            # physical (blocks, layers, [2,] bs, h, d); logical (layers, blocks, ...)
            shape = (nb, L) + ((kv,) if not cfg.use_mla else ()) + inner
            t = r.view(torch.float16).view(shape)
            self.cross = t.transpose(0, 1)
            self.slices = lambda b: [(0, b * L * page, L * page)]
        else:
            self.raws = [raw(nb * page) for _ in range(L)]
            self.per_layer = {}
            fa = backend_for(cfg) is stubs.FlashAttnLikeBackend
            for i, n in enumerate(layer_names(cfg)):
                if fa:
                    shape = (2, nb) + inner
                elif cfg.use_mla:
                    shape = (nb,) + inner
                else:
                    shape = (nb, 2) + inner
                self.per_layer[n] = self.raws[i].view(torch.float16).view(shape)
            half = page // 2
            if fa:
                self.slices = lambda b: [s for l in range(L) for s in
                                         ((l, b * half, half), (l, nb * half + b * half, half))]
            else:
                self.slices = lambda b: [(l, b * page, page) for l in range(L)]

    def write(self, block, data):
        import torch
        pos = 0
        for t, off, n in self.slices(block):
            chunk = data[pos:pos + n]
            if self.cfg.device == "cuda":
                self.raws[t][off:off + n].copy_(torch.from_numpy(chunk).to("cuda", non_blocking=False))
            else:
                self.raws[t][off:off + n].numpy()[:] = chunk
            pos += n

    def fill(self, block, byte):
        for t, off, n in self.slices(block):
            self.raws[t][off:off + n].fill_(byte)

    def read(self, block):
        import numpy as np
        parts = []
        for t, off, n in self.slices(block):
            x = self.raws[t][off:off + n]
            parts.append(x.cpu().numpy() if self.cfg.device == "cuda" else x.numpy().copy())
        return np.concatenate(parts)


def worker_main(conn, cfg, rank):
    """One TP rank's worker side: vLLM's real OffloadingConnector(role=WORKER)."""
    import logging
    logging.basicConfig(level=logging.WARNING, format="[w%d] %%(levelname)s %%(name)s: %%(message)s" % rank)
    logging.getLogger("vllm").setLevel(logging.ERROR)
    out = {"errors": []}
    try:
        mod, vllm_dir = load_vllm(cfg.src, cfg.gen)
        stubs.PARALLEL.tp_rank, stubs.PARALLEL.tp_size = rank, cfg.world
        base = sys.modules["vllm.distributed.kv_transfer.kv_connector.v1.base"]
        calls = Calls(vllm_dir, "worker%d" % rank)
        vc, kcc = build_configs(cfg, rank)
        if cfg.device == "cuda":
            import torch
            torch.cuda.set_device(rank % torch.cuda.device_count())
        mem = KVMemory(cfg)
        connector = calls("OffloadingConnector(WORKER)", mod.OffloadingConnector, vc,
                          base.KVConnectorRole.WORKER, kcc)
        if connector is not None:
            if cfg.layout == "cross":
                calls("register_cross_layers_kv_cache", connector.register_cross_layers_kv_cache,
                      mem.cross, backend_for(cfg))
            else:
                calls("register_kv_caches", connector.register_kv_caches, dict(mem.per_layer))
        out["errors"] = calls.errors
        out["ok"] = connector is not None
    except BaseException:
        out = {"ok": False, "errors": [{"where": "worker%d" % rank, "call": "start",
                                        "origin": "harness", "text": traceback.format_exc()}]}
        conn.send(out)
        return
    conn.send(out)
    fwd = stubs.ForwardContext()
    crank = 0 if cfg.use_mla else rank  # MLA: every rank holds the same latent KV
    while True:
        msg = conn.recv()
        op = msg[0]
        calls.errors = []
        if op == "step":
            _, so_bytes, garbage, writes = msg
            so = calls("unpickle SchedulerOutput", pickle.loads, so_bytes)
            res = {"finished_sending": set(), "finished_recving": set(), "worker_meta": None,
                   "invalid": set()}
            if so is not None and connector is not None:
                meta = so.kv_connector_metadata
                calls("handle_preemptions", connector.handle_preemptions, meta)
                for b in garbage:  # blocks the scheduler just allocated for loads
                    mem.fill(b, GARBAGE)
                calls("bind_connector_metadata", connector.bind_connector_metadata, meta)
                calls("start_load_kv", connector.start_load_kv, fwd)
                for b, key, tag in writes:  # the forward pass
                    mem.write(b, content(key if key is not None else tag, crank, cfg.block_bytes))
                if cfg.forward_s:
                    time.sleep(cfg.forward_s)
                if cfg.device == "cuda":
                    pass  # writes are on the current stream, which the store's event follows
                calls("wait_for_save", connector.wait_for_save)
                fin = calls("get_finished", connector.get_finished, so.finished_req_ids,
                            default=(None, None))
                res["finished_sending"] = set(fin[0] or ())
                res["finished_recving"] = set(fin[1] or ())
                res["invalid"] = set(calls("get_block_ids_with_load_errors",
                                           connector.get_block_ids_with_load_errors,
                                           default=set()) or ())
                calls("get_kv_connector_stats", connector.get_kv_connector_stats)
                if hasattr(connector, "get_kv_connector_kv_cache_events"):  # the runner mixin
                    calls("get_kv_connector_kv_cache_events",
                          connector.get_kv_connector_kv_cache_events)
                if hasattr(connector, "build_connector_worker_meta"):
                    wm = calls("build_connector_worker_meta",
                               connector.build_connector_worker_meta)
                    res["worker_meta"] = calls("pickle worker meta", pickle.dumps, wm)
                calls("clear_connector_metadata", connector.clear_connector_metadata)
            res["errors"] = calls.errors
            conn.send(res)
        elif op == "verify":
            if cfg.device == "cuda":
                import torch
                torch.cuda.synchronize()
            bad = []
            for b, key in msg[1]:
                got = mem.read(b)
                exp = content(key, crank, cfg.block_bytes)
                if not (got == exp).all():
                    bad.append((b, int((got != exp).sum())))
            conn.send({"bad": bad, "errors": []})
        elif op == "shutdown":
            if connector is not None:
                calls("shutdown", connector.shutdown)
            conn.send({"errors": calls.errors})
            return
        elif op == "exit":
            return


class WorkerProc:
    def __init__(self, ctx, cfg, rank):
        self.rank = rank
        self.parent, child = ctx.Pipe()
        self.proc = ctx.Process(target=worker_main, args=(child, cfg, rank), daemon=True)
        self.proc.start()
        child.close()

    def send(self, msg):
        self.parent.send(msg)

    def recv(self, timeout=180):
        if not self.parent.poll(timeout):
            raise TimeoutError("worker %d gave no answer in %d s" % (self.rank, timeout))
        return self.parent.recv()

    def stop(self):
        try:
            self.parent.send(("exit",))
        except (BrokenPipeError, OSError):
            pass
        self.proc.join(10)
        if self.proc.is_alive():
            self.proc.kill()
            self.proc.join()


# ---------------------------------------------------------------------------- daemon
class Daemon:
    """kvoffloadd on a temporary runtime dir (host backend, or auto with --cuda)."""

    def __init__(self, backend="host", extra=()):
        self.binary = os.environ.get("KVOFFLOAD_DAEMON", "/work/stable/kvoffloadd")
        self.dir = tempfile.mkdtemp(prefix="kvo-real-", dir="/tmp")
        self.args = [self.binary, "--backend=" + backend, "--runtime_dir=" + self.dir,
                     "--metrics_address=", "--max_region_bytes=512MiB", "--populate_threads=1",
                     "--host_copy_threads=2", "--log_level=warn", "--job_timeout_s=5"] + list(extra)
        self.log = open(os.path.join(self.dir, "daemon.log"), "ab")
        self.start()

    @property
    def socket(self):
        return os.path.join(self.dir, "kvoffload.sock")

    def start(self):
        self.proc = subprocess.Popen(self.args, stdin=subprocess.DEVNULL, stdout=self.log,
                                     stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 20
        while not (os.path.exists(self.socket) and
                   os.path.exists(os.path.join(self.dir, "admin.sock"))):
            if self.proc.poll() is not None:
                raise RuntimeError("kvoffloadd exited at start: %s" % self.tail())
            if time.monotonic() > deadline:
                raise RuntimeError("kvoffloadd did not create its sockets in 20 s")
            time.sleep(0.01)

    def end(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def restart(self):
        self.end()
        for n in ("kvoffload.sock", "admin.sock"):
            try:
                os.unlink(os.path.join(self.dir, n))
            except FileNotFoundError:
                pass
        self.start()

    def tail(self, n=2000):
        self.log.flush()
        try:
            with open(os.path.join(self.dir, "daemon.log"), "rb") as f:
                return f.read()[-n:].decode(errors="replace")
        except OSError:
            return ""

    def ctl(self, *args):
        ctl = os.environ.get("KVOFFLOAD_CTL", os.path.join(REPO, "bazel-bin/client/ctl/kvoffloadctl"))
        if not os.access(ctl, os.X_OK):
            return None
        r = subprocess.run([ctl, "--runtime_dir=" + self.dir] + list(args), capture_output=True,
                           text=True, timeout=20)
        return r.stdout + r.stderr

    def stop(self):
        self.end()
        self.log.close()
        shutil.rmtree(self.dir, ignore_errors=True)


# ---------------------------------------------------------------------------- the engine
class ConnectorDown(Exception):
    """vLLM failed at start-up: the rest of the scenario cannot run."""


class Engine:
    """The scheduler side of one vLLM engine replica, calling the real connector as vLLM's
    v1 Scheduler does, and its TP workers (one process each)."""

    def __init__(self, cfg, ctx, report):
        self.cfg = cfg
        self.report = report
        self.mod, self.vllm_dir = load_vllm(cfg.src, cfg.gen)
        self.base = sys.modules["vllm.distributed.kv_transfer.kv_connector.v1.base"]
        self.calls = Calls(self.vllm_dir, "scheduler")
        self.vc, self.kcc = build_configs(cfg, 0)
        self.workers = [WorkerProc(ctx, cfg, r) for r in range(cfg.world)]
        self.conn = self.calls("OffloadingConnector(SCHEDULER)", self.mod.OffloadingConnector,
                               self.vc, self.base.KVConnectorRole.SCHEDULER, self.kcc)
        for w in self.workers:
            r = w.recv()
            report.errors.extend(r["errors"])
        self.hma = isinstance(self.conn, self.base.SupportsHMA) if hasattr(self.base, "SupportsHMA") else False
        bs = cfg.block_size
        self.bs = bs
        # block pool: 0 is the null block
        self.ref = [0] * cfg.num_blocks
        self.hash_of = [None] * cfg.num_blocks
        self.free = collections.OrderedDict((b, None) for b in range(1, cfg.num_blocks))
        self.cached = {}  # block hash -> block id (GPU prefix cache)
        self.known = {}  # block id -> hash its content must equal (computed or loaded)
        self.reqs = {}
        self.blocks = {}  # req id -> [block ids]
        self.waiting = collections.deque()
        self.running = []
        self.ever_scheduled = set()
        self.recv_done = set()
        self.delayed_free = set()
        self.finished_pending = set()  # finished_req_ids for the next SchedulerOutput
        self.force_preempt = set()
        self.hooks = collections.defaultdict(list)
        self.load_info = {}  # req id -> [(block id, hash)] expected after its load
        self.hits = {}  # req id -> [(local tokens, external tokens)] per lookup
        self.failed_recving = set()
        self.delayed_recv = set()
        self.reuse_seen = 0
        self.policy = cfg.kv_load_failure_policy
        self.events = []
        self.stepno = 0
        self.arrived = {}  # req id -> stepno when added (its first chance is step arrived + 1)
        self.admitted = {}  # req id -> (stepno, local, external tokens) of its first allocation
        self.started = {}  # req id -> stepno it was first scheduled to compute
        self.wm_cls = None
        self.alive = self.conn is not None
        if self.conn is None:
            report.errors.extend(self.calls.errors)
            for w in self.workers:
                w.stop()
            raise ConnectorDown("vLLM could not construct the scheduler-side OffloadingConnector "
                                "(see the exception above); scenario not run")

    # -- requests
    def block_hasher(self, req):
        out = []
        toks = req.all_token_ids
        n = len(req.block_hashes)
        parent = req.block_hashes[-1] if req.block_hashes else b"\x00" * 32
        while (n + 1) * self.bs <= len(toks):
            chunk = toks[n * self.bs:(n + 1) * self.bs]
            parent = hashlib.sha256(parent + b"".join(t.to_bytes(4, "little") for t in chunk)).digest()
            out.append(parent)
            n += 1
        return out

    def add_request(self, rid, prompt, max_tokens=2, params=None):
        req = stubs.Request(rid, prompt, max_tokens, self.block_hasher, kv_transfer_params=params)
        self.reqs[rid] = req
        self.blocks[rid] = []
        self.waiting.append(req)
        self.arrived[rid] = self.stepno
        if hasattr(self.conn, "on_new_request"):
            self.calls("on_new_request", self.conn.on_new_request, req)
        return req

    # -- block pool
    def _alloc(self, n):
        if len(self.free) < n:
            return None
        out = []
        for _ in range(n):
            b, _ = self.free.popitem(last=False)
            h = self.hash_of[b]
            if h is not None:
                self.reuse_seen += 1
            if h is not None and self.cached.get(h) == b:
                del self.cached[h]
            self.hash_of[b] = None
            self.known.pop(b, None)
            self.ref[b] = 1
            out.append(b)
        return out

    def _free_blocks(self, blocks):
        for b in reversed(blocks):
            self.ref[b] -= 1
            if self.ref[b] == 0:
                self.free[b] = None

    def _cache_block(self, b, h):
        self.hash_of[b] = h
        self.known[b] = h
        self.cached.setdefault(h, b)

    def drop_gpu_cache(self, keep=(), in_use=False):
        """GPU memory pressure (as if other requests evicted them): forget every cached block
        hash except `keep`; in_use: also unshare blocks running requests hold."""
        for h, b in list(self.cached.items()):
            if h in keep:
                continue
            if in_use and self.ref[b] > 0:
                del self.cached[h]
                continue
            if self.ref[b] == 0:
                del self.cached[h]
                self.hash_of[b] = None
                self.known.pop(b, None)

    def _computed_blocks(self, req):
        out = []
        limit = (req.num_tokens - 1) // self.bs
        for h in req.block_hashes[:limit]:
            b = self.cached.get(h)
            if b is None:
                break
            out.append(b)
        return out

    def _kvblocks(self, rid):
        S = stubs
        return S.KVCacheBlocks(blocks=([S.KVCacheBlock(b, self.hash_of[b], self.ref[b])
                                        for b in self.blocks[rid]],))

    # -- scheduling (vLLM v1 Scheduler.schedule, reduced)
    def _preempt(self, req, preempted):
        self._free_blocks(self.blocks[req.request_id])
        self.blocks[req.request_id] = []
        req.status = stubs.RequestStatus.PREEMPTED
        req.num_computed_tokens = 0
        req.num_preemptions += 1
        self.running.remove(req)
        self.waiting.appendleft(req)
        preempted.add(req.request_id)

    def schedule(self):
        S = stubs
        new_reqs, cached, nst, preempted = [], S.CachedRequestData(), {}, set()
        garbage = []
        for rid in list(self.force_preempt):
            req = self.reqs[rid]
            if req in self.running:
                self._preempt(req, preempted)
        self.force_preempt.clear()
        i = 0
        while i < len(self.running):  # vLLM: preempt from the tail, never one already scheduled
            req = self.running[i]
            rid = req.request_id
            n = req.num_tokens - req.num_computed_tokens
            need = -(-(req.num_computed_tokens + n) // self.bs) - len(self.blocks[rid])
            new = []
            if need > 0:
                new = self._alloc(need)
                while new is None:
                    victim = self.running[-1]
                    self._preempt(victim, preempted)
                    if victim is req:
                        break
                    new = self._alloc(need)
                if new is None:  # req preempted itself
                    continue
                self.blocks[rid].extend(new)
            cached.req_ids.append(rid)
            cached.new_block_ids.append((list(new),) if new else None)
            cached.num_computed_tokens.append(req.num_computed_tokens)
            nst[rid] = n
            i += 1
        if not preempted:
            for req in list(self.waiting):
                rid = req.request_id
                ext, load_async, computed = 0, False, []
                if req.status == S.RequestStatus.WAITING_FOR_REMOTE_KVS:
                    if rid not in self.recv_done:
                        continue
                    self.recv_done.discard(rid)
                    self._update_waiting_for_remote_kv(req)
                    req.status = (S.RequestStatus.PREEMPTED if req.num_preemptions
                                  else S.RequestStatus.WAITING)
                if req.num_computed_tokens == 0:
                    computed = self._computed_blocks(req)
                    local = len(computed) * self.bs
                    r = self.calls("get_num_new_matched_tokens", self.conn.get_num_new_matched_tokens,
                                   req, local, default=(0, False))
                    ext, load_async = r
                    if ext is None:
                        continue
                    ext = ext or 0
                    self.hits.setdefault(rid, []).append((local, ext))
                    fresh = True
                    self.blocks[rid] = []
                else:  # its async load finished
                    local = req.num_computed_tokens
                    fresh = False
                num_computed = local + ext if fresh else req.num_computed_tokens
                total = num_computed if load_async else req.num_tokens
                have = len(computed) if fresh else len(self.blocks[rid])
                need = max(0, -(-total // self.bs) - have)
                if len(self.free) - sum(1 for b in computed if self.ref[b] == 0) < need:
                    break  # vLLM: the waiting queue stops at the first request that does not fit
                if fresh:
                    for b in computed:
                        if self.ref[b] == 0:
                            del self.free[b]
                        self.ref[b] += 1
                    self.blocks[rid] = list(computed)
                new = self._alloc(need) if need else []
                self.blocks[rid].extend(new)
                if fresh:
                    self.admitted.setdefault(rid, (self.stepno, local, ext))
                    self.calls("update_state_after_alloc", self.conn.update_state_after_alloc,
                               req, self._kvblocks(rid), ext)
                self.waiting.remove(req)
                if load_async:
                    req.status = S.RequestStatus.WAITING_FOR_REMOTE_KVS
                    self.waiting.appendleft(req)
                    req.num_computed_tokens = num_computed
                    nloc = len(computed)
                    self.load_info[rid] = [(b, req.block_hashes[i]) for i, b in
                                           enumerate(self.blocks[rid]) if i >= nloc]
                    garbage.extend(b for b, _ in self.load_info[rid])
                    continue
                resumed = req.status == S.RequestStatus.PREEMPTED
                req.num_computed_tokens = num_computed
                req.status = S.RequestStatus.RUNNING
                self.running.append(req)
                n = req.num_tokens - req.num_computed_tokens
                nst[rid] = n
                self.started.setdefault(rid, self.stepno)
                if resumed:
                    cached.req_ids.append(rid)
                    cached.resumed_req_ids.add(rid)
                    cached.new_block_ids.append((list(self.blocks[rid]),))
                    cached.num_computed_tokens.append(req.num_computed_tokens)
                else:
                    new_reqs.append(S.NewRequestData(rid, list(req.prompt_token_ids),
                                                     (list(self.blocks[rid]),),
                                                     req.num_computed_tokens))
                self.ever_scheduled.add(rid)
        so = S.SchedulerOutput(scheduled_new_reqs=new_reqs, scheduled_cached_reqs=cached,
                               num_scheduled_tokens=nst,
                               total_num_scheduled_tokens=sum(nst.values()),
                               finished_req_ids=set(self.finished_pending),
                               preempted_req_ids=preempted)
        self.finished_pending = set()
        return so, garbage

    def _writes(self, so):
        """(block, hash or None, tag) the forward pass writes: every block touched by this
        step's tokens; full blocks get their hash's content."""
        out = []
        for rid, n in so.num_scheduled_tokens.items():
            req = self.reqs[rid]
            c0 = req.num_computed_tokens  # before _update_after_schedule
            for i in range(c0 // self.bs, -(-(c0 + n) // self.bs)):
                b = self.blocks[rid][i]
                if (i + 1) * self.bs <= c0 + n and i < len(req.block_hashes):
                    out.append((b, req.block_hashes[i], None))
                else:
                    out.append((b, None, b"partial/%s/%d/%d" % (rid.encode(), i, c0 + n)))
        return out

    def step(self):
        self.stepno += 1
        so, garbage = self.schedule()
        writes = self._writes(so)
        meta = self.calls("build_connector_meta", self.conn.build_connector_meta, so)
        so.kv_connector_metadata = meta
        for f in self.hooks.pop("after_build_meta", []):
            f(self, so)
        so_bytes = self.calls("pickle SchedulerOutput", pickle.dumps, so)
        for rid, n in so.num_scheduled_tokens.items():  # _update_after_schedule
            self.reqs[rid].num_computed_tokens += n
        if so_bytes is None:
            return so
        for w in self.workers:
            w.send(("step", so_bytes, garbage, writes))
        outs = []
        for w in self.workers:
            r = w.recv()
            self.report.errors.extend(r["errors"])
            outs.append(r)
        for b, h, _ in writes:
            if h is not None:
                self._cache_block(b, h)
            else:
                self.known.pop(b, None)
        self.update_from_output(so, outs)
        # Scheduler.make_stats: the scheduler side's connector stats every step
        self.calls("get_kv_connector_stats", self.conn.get_kv_connector_stats)
        return so

    def _aggregate(self, outs):
        world = len(outs)
        fs, fr = collections.Counter(), collections.Counter()
        for o in outs:
            fs.update(o["finished_sending"])
            fr.update(o["finished_recving"])
        self._fs_pending = getattr(self, "_fs_pending", collections.Counter())
        self._fr_pending = getattr(self, "_fr_pending", collections.Counter())
        self._fs_pending.update(fs)
        self._fr_pending.update(fr)
        done_s = {r for r, c in self._fs_pending.items() if c >= world}
        done_r = {r for r, c in self._fr_pending.items() if c >= world}
        for r in done_s:
            del self._fs_pending[r]
        for r in done_r:
            del self._fr_pending[r]
        wm = None
        for o in outs:
            if o.get("worker_meta"):
                m = pickle.loads(o["worker_meta"])
                if m is None:
                    continue
                wm = m if wm is None else wm.aggregate(m)
        invalid = set().union(*(o["invalid"] for o in outs))
        return done_s, done_r, wm, invalid

    def update_from_output(self, so, outs):
        """vLLM's Scheduler.update_from_output, in its order: invalid blocks, sampled tokens and
        stops, requests failed by a KV load (policy "fail"), then the connector's output
        (_update_from_kv_xfer_finished: update_connector_output, finished_recving,
        finished_sending), then the connector's KV events."""
        S = stubs
        fs, fr, wm, invalid = self._aggregate(outs)
        failed = self._handle_invalid_blocks(invalid, so.num_scheduled_tokens) if invalid else []
        skip = {r.request_id for r in failed}
        for rid, n in so.num_scheduled_tokens.items():
            req = self.reqs[rid]
            if rid in skip or req.status != S.RequestStatus.RUNNING or \
                    req.num_computed_tokens < req.num_tokens:
                continue
            tok = int.from_bytes(hashlib.sha256(b"%s/%d" % (rid.encode(), req.num_tokens)).digest()[:2], "little")
            req.append_output_token_ids(tok)
            if req.num_output_tokens >= req.max_tokens:
                self.finish(req)
        if self.policy == "fail":
            for req in failed:
                if not req.is_finished():
                    if req in self.waiting:
                        self.waiting.remove(req)
                    self.finish(req, S.RequestStatus.FINISHED_ERROR)
        out = S.KVConnectorOutput(finished_sending=fs or None, finished_recving=fr or None,
                                  kv_connector_worker_meta=wm, invalid_block_ids=invalid)
        self.calls("update_connector_output", self.conn.update_connector_output, out)
        for rid in fr:
            req = self.reqs[rid]
            if req.is_finished():  # finished (aborted, failed) while loading: blocks go now
                if rid in self.delayed_recv:
                    self.delayed_recv.discard(rid)
                    self._free_blocks(self.blocks[rid])
                    self.blocks[rid] = []
                continue
            self.recv_done.add(rid)
            self.verify_load(rid)
        for rid in fs:
            if rid in self.delayed_free:
                self.delayed_free.discard(rid)
                self._free_blocks(self.blocks[rid])
                self.blocks[rid] = []
        self.events.extend(self.calls("take_events", lambda: list(self.conn.take_events()),
                                      default=[]) or [])

    def finish(self, req, status=None):
        """Scheduler.finish_requests / _free_request: the connector's request_finished may
        delay the free (until finished_sending); a request still loading keeps its blocks until
        its load is reported (finished_recving)."""
        S = stubs
        loading = (req.status == S.RequestStatus.WAITING_FOR_REMOTE_KVS and
                   req.request_id not in self.recv_done)
        self.recv_done.discard(req.request_id)
        self.failed_recving.discard(req.request_id)
        req.status = status or S.RequestStatus.FINISHED_LENGTH_CAPPED
        if req in self.running:
            self.running.remove(req)
        if req in self.waiting:
            self.waiting.remove(req)
        rid = req.request_id
        if self.hma:
            r = self.calls("request_finished_all_groups", self.conn.request_finished_all_groups,
                           req, (list(self.blocks[rid]),), default=(False, None))
        else:
            r = self.calls("request_finished", self.conn.request_finished, req,
                           list(self.blocks[rid]), default=(False, None))
        delay = bool(r and r[0])
        if delay:
            self.delayed_free.add(rid)
        if loading:
            self.delayed_recv.add(rid)
        if not delay and not loading:
            self._free_blocks(self.blocks[rid])
            self.blocks[rid] = []
        self.finished_pending.add(rid)

    def abort(self, rid):
        self.finish(self.reqs[rid], stubs.RequestStatus.FINISHED_ABORTED)

    def _update_waiting_for_remote_kv(self, req):
        """vLLM: cache the blocks that loaded (all, or those before the first invalid one);
        a request left with nothing computed frees its blocks and asks again."""
        rid = req.request_id
        valid = req.num_computed_tokens // self.bs
        for i, (b, h) in enumerate(self.load_info.pop(rid, ())):
            if (self.blocks[rid].index(b) if b in self.blocks[rid] else valid) < valid:
                self._cache_block(b, h)
        if rid in self.failed_recving:
            self.failed_recving.discard(rid)
            if not req.num_computed_tokens:
                self._free_blocks(self.blocks[rid])
                self.blocks[rid] = []
        elif req.num_computed_tokens == req.num_tokens:
            req.num_computed_tokens -= 1

    def _handle_invalid_blocks(self, invalid, nst):
        """vLLM's Scheduler._handle_invalid_blocks: truncate each affected request's computed
        tokens at its first invalid block; policy "fail" (vLLM's default) finishes them with
        FINISHED_ERROR, "recompute" computes those blocks again."""
        S = stubs
        affected = []
        for req in list(self.waiting) + list(self.running):
            async_ = req.status == S.RequestStatus.WAITING_FOR_REMOTE_KVS
            if not async_ and req not in self.running:
                continue
            rid = req.request_id
            ncomp = req.num_computed_tokens - nst.get(rid, 0)
            for idx, b in enumerate(self.blocks[rid][:-(-ncomp // self.bs)]):
                if b in invalid:
                    req.num_computed_tokens = idx * self.bs
                    affected.append(req)
                    if async_:
                        self.failed_recving.add(rid)
                    for bb in self.blocks[rid][idx:]:
                        self.known.pop(bb, None)
                    break
        self.report.note("invalid_block_ids %s: requests %s %s" % (
            sorted(invalid), [r.request_id for r in affected],
            "finished with FINISHED_ERROR (kv_load_failure_policy=fail)" if self.policy == "fail"
            else "recompute them (kv_load_failure_policy=recompute)"))
        self.report.failed_requests += len(affected) if self.policy == "fail" else 0
        return affected

    def verify_load(self, rid):
        req = self.reqs[rid]
        if req.is_finished():
            return
        valid = req.num_computed_tokens // self.bs  # blocks vLLM will use (not reported invalid)
        exp = [(b, h) for b, h in self.load_info.get(rid, [])
               if b in self.blocks[rid] and self.blocks[rid].index(b) < valid]
        if not exp:
            return
        self.report.loads += 1
        self.report.loaded_blocks += len(exp)
        self.verify(exp, "load of %s" % rid)

    def verify(self, pairs, what):
        for w in self.workers:
            w.send(("verify", list(pairs)))
        for w in self.workers:
            r = w.recv()
            for b, n in r["bad"]:
                self.report.wrong_blocks += 1
                self.report.wrong_bytes += n
                self.report.note("WRONG BYTES rank %d block %d (%d bytes differ) in %s" %
                                 (w.rank, b, n, what))

    def selfcheck(self):
        """The harness's own control: a block checked against the wrong hash must be caught."""
        pairs = sorted(self.known.items())[:1]
        if not pairs:
            return True
        for w in self.workers:
            w.send(("verify", [(pairs[0][0], b"not-this-block")]))
        return all(w.recv()["bad"] for w in self.workers)

    def verify_all(self, what="final sweep"):
        pairs = sorted(self.known.items())
        if pairs:
            self.verify(pairs, what)

    def idle(self):
        return not self.waiting and not self.running and not self.delayed_free and \
            not self.delayed_recv

    def run(self, max_steps=200, until=None):
        for _ in range(max_steps):
            if until is not None and until(self):
                return True
            if until is None and self.idle() and self.stepno > 0 and not self._pending_jobs():
                return True
            self.step()
        return False

    def _pending_jobs(self):
        if hasattr(self.conn, "has_pending_push_work"):  # 0.24 on: Scheduler.has_requests
            return bool(self.calls("has_pending_push_work", self.conn.has_pending_push_work,
                                   default=False))
        cs = getattr(self.conn, "connector_scheduler", None)
        if cs is None:
            return False
        if hasattr(cs, "has_pending_push_work"):
            return cs.has_pending_push_work()
        return bool(getattr(cs, "_reqs_being_stored", None)) or bool(getattr(cs, "_reqs_being_loaded", None))

    def settle(self, steps=3, sleep=0.05):
        """Empty steps so that finished transfers are collected (vLLM keeps stepping while a
        connector has work)."""
        for _ in range(steps):
            time.sleep(sleep)
            self.step()

    def drain(self, timeout=20):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self.step()
            if self.idle() and not self._pending_jobs():
                self.settle(2)
                return True
            time.sleep(0.02)
        return False

    def lookup_keys(self, req):
        """The manager's lookup of each of req's offload keys (what vLLM would see)."""
        mgr = self.conn.connector_scheduler.manager
        abstract = (sys.modules.get("vllm.v1.kv_offload.abstract") or
                    sys.modules["vllm.v1.kv_offload.base"])
        fields = {f.name for f in dataclasses.fields(abstract.ReqContext)}
        ctx = abstract.ReqContext(**({"req_id": req.request_id} if "req_id" in fields else {}))
        factor = max(1, (self.cfg.offload_block_size or self.bs) // self.bs)
        out = []
        for h in req.block_hashes[factor - 1::factor]:
            key = abstract.make_offload_key(h, 0)
            r = self.calls("manager.lookup", mgr.lookup, key, ctx)
            out.append(r)
        return out

    def shutdown(self):
        for w in self.workers:
            try:
                w.send(("shutdown",))
            except (BrokenPipeError, OSError):
                pass
        for w in self.workers:
            try:
                r = w.recv(60)
                self.report.errors.extend(r["errors"])
            except (TimeoutError, EOFError, OSError) as e:
                self.report.note("worker %d shutdown: %r" % (w.rank, e))
        if self.conn is not None:
            self.calls("shutdown", self.conn.shutdown)
        for w in self.workers:
            w.proc.join(20)
            if w.proc.is_alive():
                self.report.note("worker %d still alive 20 s after shutdown" % w.rank)
                w.stop()

    def close(self):
        self.report.errors.extend(self.calls.errors)
        self.calls.errors = []
        for w in self.workers:
            if w.proc.is_alive():
                w.stop()


# ---------------------------------------------------------------------------- reporting
class Report:
    def __init__(self, name):
        self.name = name
        self.errors = []
        self.checks = []
        self.notes = []
        self.wrong_blocks = 0
        self.wrong_bytes = 0
        self.loads = 0
        self.loaded_blocks = 0
        self.failed_requests = 0

    def check(self, what, ok, detail=""):
        self.checks.append((what, bool(ok), detail))
        return ok

    def note(self, s):
        self.notes.append(s)

    @property
    def exceptions(self):
        return [e for e in self.errors if e["origin"] in ("plugin", "vllm")]

    @property
    def passed(self):
        return (not self.errors and self.wrong_bytes == 0 and
                all(ok for _, ok, _ in self.checks))


def prompt(seed, n):
    return [int.from_bytes(hashlib.sha256(b"%d/%d" % (seed, i)).digest()[:2], "little") % 30000 + 100
            for i in range(n)]


# ---------------------------------------------------------------------------- scenarios
class Run:
    def __init__(self, gen, src, daemon, device, ctx):
        self.gen, self.src, self.daemon, self.device, self.ctx = gen, src, daemon, device, ctx
        self.n = 0

    def engine(self, rep, name, **kw):
        self.n += 1
        cfg = Cfg(gen=self.gen, src=self.src, socket_path=self.daemon.socket, device=self.device,
                  engine_id="%s-%s-%d-%d" % (name, self.gen, os.getpid(), self.n), **kw)
        e = Engine(cfg, self.ctx, rep)
        rep.engines.append(e)
        return e


def _hit(e, rid, i=0):
    h = e.hits.get(rid, [])
    return h[i] if len(h) > i else (None, None)


def sc_store_hit_load(run, rep, **kw):
    """store → GPU cache dropped → the same prompt hits every full block → loaded byte-exact."""
    e = run.engine(rep, "store-hit", **kw)
    P = prompt(1, 5 * 16 + 5)
    e.add_request("a", P, max_tokens=3)
    rep.check("a drained", e.drain())
    e.drop_gpu_cache()
    e.add_request("b", P, max_tokens=2)
    rep.check("b drained", e.drain())
    local, ext = _hit(e, "b")
    rep.check("b: 80 tokens from kvoffload, 0 local", (local, ext) == (0, 80),
              "local=%s external=%s" % (local, ext))
    rep.check("b's load verified", rep.loads == 1 and rep.loaded_blocks == 5,
              "loads=%d blocks=%d" % (rep.loads, rep.loaded_blocks))
    e.verify_all()
    rep.check("harness control: a wrong block is detected", e.selfcheck())
    e.shutdown()


def sc_tp2(run, rep):
    sc_store_hit_load(run, rep, world=2)


def sc_per_layer(run, rep):
    sc_store_hit_load(run, rep, layout="per_layer")


def sc_partial_prefix(run, rep):
    """b shares a's first 3 blocks; the GPU still holds block 0: 16 local + 32 loaded."""
    e = run.engine(rep, "partial")
    P = prompt(2, 6 * 16 + 5)
    e.add_request("a", P, max_tokens=2)
    rep.check("a drained", e.drain())
    a = e.reqs["a"]
    e.drop_gpu_cache(keep={a.block_hashes[0]})
    Q = P[:48] + prompt(3, 40)
    e.add_request("b", Q, max_tokens=2)
    rep.check("b drained", e.drain())
    local, ext = _hit(e, "b")
    rep.check("b: 16 local + 32 from kvoffload", (local, ext) == (16, 32),
              "local=%s external=%s" % (local, ext))
    rep.check("b's load verified", rep.loads == 1 and rep.loaded_blocks == 2,
              "loads=%d blocks=%d" % (rep.loads, rep.loaded_blocks))
    # and the diverging tail was stored as its own blocks: c = Q again, GPU dropped
    e.drop_gpu_cache()
    e.add_request("c", Q, max_tokens=2)
    rep.check("c drained", e.drain())
    local, ext = _hit(e, "c")
    rep.check("c: all 5 full blocks of Q from kvoffload", (local, ext) == (0, 80),
              "local=%s external=%s" % (local, ext))
    e.verify_all()
    e.shutdown()


def sc_mid_block(run, rep, **kw):
    """extra_config block_size 64 (4 GPU blocks a row); the GPU holds blocks 0-1, so vLLM asks
    for a load starting at GPU block 2, inside row 0."""
    e = run.engine(rep, "midblock", offload_block_size=64, **kw)
    P = prompt(4, 8 * 16 + 3)
    e.add_request("a", P, max_tokens=2)
    rep.check("a drained", e.drain())
    a = e.reqs["a"]
    # aligned first: nothing on the GPU, two whole rows
    e.drop_gpu_cache()
    e.add_request("b", P, max_tokens=2)
    rep.check("b drained", e.drain())
    local, ext = _hit(e, "b")
    rep.check("b: 128 tokens (2 rows) from kvoffload", (local, ext) == (0, 128),
              "local=%s external=%s" % (local, ext))
    e.drop_gpu_cache(keep=set(a.block_hashes[:2]))
    e.add_request("c", P, max_tokens=2)
    rep.check("c drained", e.drain())
    local, ext = _hit(e, "c")
    rep.check("c: 32 local + 96 from kvoffload (load starts at block 2 of row 0)",
              (local, ext) == (32, 96), "local=%s external=%s" % (local, ext))
    rep.check("both loads verified", rep.loads == 2 and rep.loaded_blocks == 8 + 6,
              "loads=%d blocks=%d" % (rep.loads, rep.loaded_blocks))
    e.verify_all()
    e.shutdown()


def _event_hashes(e, cls_name):
    out = []
    for ev in e.events:
        if type(ev).__name__ == cls_name:
            out.extend(ev.block_hashes)
    return out


def sc_kv_events(run, rep):
    """KV events on: stored blocks announced once, evicted ones removed; media as vLLM's."""
    e = run.engine(rep, "events", events=True, budget_bytes=8 * (16 << 10))  # 8 rows
    A = prompt(5, 5 * 16 + 5)
    B = prompt(6, 5 * 16 + 5)
    e.add_request("a", A, max_tokens=2)
    rep.check("a drained", e.drain())
    a = e.reqs["a"]
    stored = _event_hashes(e, "BlockStored")
    rep.check("BlockStored for a's 5 blocks", sorted(stored) == sorted(a.block_hashes[:5]),
              "%d stored hashes" % len(stored))
    e.add_request("b", B, max_tokens=2)
    rep.check("b drained", e.drain())
    b = e.reqs["b"]
    stored = _event_hashes(e, "BlockStored")
    removed = _event_hashes(e, "BlockRemoved")
    rep.check("BlockStored for b's 5 blocks too", set(b.block_hashes[:5]) <= set(stored),
              "%d stored hashes" % len(stored))
    rep.check("2 of a's blocks removed (8 rows for 10 blocks)",
              len(removed) == 2 and set(removed) <= set(a.block_hashes[:5]),
              "removed %d" % len(removed))
    hits = e.lookup_keys(a)
    rep.note("a's keys after b: %s" % hits)
    media = sorted({repr(getattr(ev, "medium", None)) for ev in e.events})
    rep.note("event media: %s" % media)
    rep.check("event media are vLLM's CPU medium", all(m in ("'CPU'",) for m in media), str(media))
    e.shutdown()


def sc_preemption(run, rep, **kw):
    """a is preempted the step after its prefill (its store deferred, not yet submitted: 0.20
    completes it in build_connector_meta before any worker submitted it); x, scheduled first,
    reuses 5 of a's freed blocks; a resumes with 2 blocks still on the GPU and loads the other 4
    full blocks from kvoffload, byte-exact."""
    e = run.engine(rep, "preempt", num_blocks=16, **kw)
    A = prompt(7, 6 * 16 + 5)   # 7 blocks
    X = prompt(8, 12 * 16 + 5)  # 13 blocks
    e.add_request("a", A, max_tokens=4)
    e.step()  # a's prefill: store planned, deferred to the next step
    e.force_preempt.add("a")
    x = e.add_request("x", X, max_tokens=2)
    e.step()  # a preempted
    e.waiting.remove(x)
    e.waiting.appendleft(x)  # x first (as with a higher priority)
    rep.check("drained", e.drain(30))
    rep.note("a's lookups (local, external): %s; preempted %d time(s)" %
             (e.hits.get("a"), e.reqs["a"].num_preemptions))
    local, ext = _hit(e, "a", 1)
    rep.check("a, resumed, loads the 4 blocks it lost from kvoffload", (local, ext) == (32, 64),
              "resume lookup local=%s external=%s, loads=%d blocks=%d" % (
                  local, ext, rep.loads, rep.loaded_blocks))
    # and a fresh request with a's prompt hits what a stored
    e.drop_gpu_cache()
    e.add_request("a2", A, max_tokens=2)
    rep.check("a2 drained", e.drain())
    local, ext = _hit(e, "a2")
    rep.check("a2: 96 tokens from kvoffload", (local, ext) == (0, 96),
              "local=%s external=%s" % (local, ext))
    e.verify_all()
    e.shutdown()


def _has_loads(meta):
    return bool(getattr(meta, "reqs_to_load", None) or getattr(meta, "load_jobs", None))


def _has_stores(meta):
    return bool(getattr(meta, "reqs_to_store", None) or getattr(meta, "store_jobs", None))


def sc_daemon_restart_recompute(run, rep):
    sc_daemon_restart(run, rep, kv_load_failure_policy="recompute")


def sc_daemon_restart(run, rep, **kw):
    """The daemon restarts (1) between steps, (2) after vLLM planned a load and before the
    workers submit it, (3) after vLLM planned a store and before the workers submit it."""
    e = run.engine(rep, "restart", **kw)
    A = prompt(9, 5 * 16 + 5)
    e.add_request("a", A, max_tokens=2)
    rep.check("a drained", e.drain())
    run.daemon.restart()
    e.drop_gpu_cache()
    # (1) serve on; hits come back once the engine re-opened and b stored again
    deadline = time.monotonic() + 20
    i = 0
    got = None
    while time.monotonic() < deadline:
        i += 1
        rid = "b%d" % i
        e.drop_gpu_cache()
        e.add_request(rid, A, max_tokens=2)
        e.drain()
        local, ext = _hit(e, rid)
        if ext:
            got = (i, ext)
            break
        time.sleep(0.5)
    rep.check("(1) hits again after a restart, within 20 s", got is not None and got[1] == 80,
              "request #%s hit %s tokens" % got if got else "no hit")
    # (2) restart between planning a load and submitting it
    e.drop_gpu_cache()
    hooked = []

    def restart_if_load(eng, so):
        if _has_loads(so.kv_connector_metadata):
            hooked.append(eng.stepno)
            run.daemon.restart()
        else:
            eng.hooks["after_build_meta"].append(restart_if_load)
    e.hooks["after_build_meta"].append(restart_if_load)
    e.add_request("c", A, max_tokens=2)
    rep.check("(2) c drained", e.drain(30))
    rep.check("(2) restart hit a planned load", bool(hooked), str(hooked))
    rep.note("(2) c: local/ext = %s" % (_hit(e, "c"),))
    time.sleep(1)
    # (3) restart between planning a store and submitting it
    B = prompt(10, 5 * 16 + 5)
    hooked3 = []

    def restart_if_store(eng, so):
        if _has_stores(so.kv_connector_metadata):
            hooked3.append(eng.stepno)
            run.daemon.restart()
        else:
            eng.hooks["after_build_meta"].append(restart_if_store)
    e.hooks["after_build_meta"].append(restart_if_store)
    e.add_request("d", B, max_tokens=2)
    rep.check("(3) d drained", e.drain(30))
    rep.check("(3) restart hit a planned store", bool(hooked3), str(hooked3))
    time.sleep(1)
    e.drop_gpu_cache()
    e.add_request("d2", B, max_tokens=2)
    rep.check("(3) d2 drained", e.drain(30))
    rep.note("(3) d2 after the lost store: local/ext = %s" % (_hit(e, "d2"),))
    e.verify_all()
    e.shutdown()


def sc_budget_refusal(run, rep):
    """A region of 3 rows: a 6-block request cannot be stored (the daemon refuses, vLLM is told
    nothing was stored), nothing is served for it; a 2-block one is stored and hit."""
    e = run.engine(rep, "budget", budget_bytes=3 * (16 << 10))
    A = prompt(11, 6 * 16 + 5)
    C = prompt(12, 2 * 16 + 5)
    e.add_request("a", A, max_tokens=3)
    rep.check("a drained", e.drain())
    e.drop_gpu_cache()
    e.add_request("a2", A, max_tokens=2)
    rep.check("a2 drained", e.drain())
    local, ext = _hit(e, "a2")
    rep.note("a2 (a's prompt, after a refused store): local=%s ext=%s" % (local, ext))
    rep.check("a2: no more than the 3 rows the region has", (ext or 0) <= 48, str(ext))
    e.drop_gpu_cache()
    e.add_request("c", C, max_tokens=2)
    rep.check("c drained", e.drain())
    e.drop_gpu_cache()
    e.add_request("c2", C, max_tokens=2)
    rep.check("c2 drained", e.drain())
    local, ext = _hit(e, "c2")
    rep.check("c2: 32 tokens from kvoffload", (local, ext) == (0, 32),
              "local=%s external=%s" % (local, ext))
    e.verify_all()
    e.shutdown()


def _prefix_closed(states):
    """True when the cached keys of a prefix are a head of it (no miss before a hit)."""
    hit = [s in (True,) or getattr(s, "name", None) == "HIT" for s in states]
    seen_miss = False
    for h in hit:
        if not h:
            seen_miss = True
        elif seen_miss:
            return False
    return True


def sc_lru(run, rep):
    """12 rows; A, B, C of 4 blocks fill them; A is hit again (most recent); D of 2 blocks
    evicts 2 rows: B's tail, never a head. Six prompt seeds."""
    bad = []
    for seed in range(6):
        e = run.engine(rep, "lru%d" % seed, budget_bytes=12 * (16 << 10))
        ps = {n: prompt(100 + 10 * seed + i, 4 * 16 + 5) for i, n in enumerate("ABCD")}
        ps["D"] = prompt(100 + 10 * seed + 3, 2 * 16 + 5)
        for n in "ABC":
            e.add_request(n, ps[n], max_tokens=2)
            e.drain()
        e.drop_gpu_cache()
        e.add_request("A2", ps["A"], max_tokens=2)
        e.drain()
        e.add_request("D", ps["D"], max_tokens=2)
        e.drain()
        st = {n: e.lookup_keys(e.reqs[n]) for n in "ABCD"}
        names = {n: ["H" if (s is True or getattr(s, "name", "") == "HIT") else "-" for s in v]
                 for n, v in st.items()}
        rep.note("seed %d: %s" % (seed, " ".join("%s=%s" % (n, "".join(v)) for n, v in sorted(names.items()))))
        closed = all(_prefix_closed(v) for v in st.values())
        expect = names == {"A": list("HHHH"), "B": list("HH--"), "C": list("HHHH"), "D": list("HH")}
        if not closed:
            bad.append("seed %d: a prefix lost its head while its tail is cached" % seed)
        elif not expect:
            bad.append("seed %d: not B's tail evicted" % seed)
        e.verify_all()
        e.shutdown()
        e.close()
        rep.engines.remove(e)
    rep.check("no prefix made unreachable while its tail is cached; B's tail evicted (6 seeds)",
              not bad, "; ".join(bad))


def sc_shutdown(run, rep):
    """Traffic, then vLLM's shutdown on every side: no exception, workers exit, the daemon has
    no session of the engine left."""
    e = run.engine(rep, "shutdown", world=2)
    P = prompt(13, 3 * 16 + 5)
    e.add_request("a", P, max_tokens=2)
    e.drain()
    e.drop_gpu_cache()
    e.add_request("b", P, max_tokens=2)
    e.step()  # b's load in flight at shutdown
    e.shutdown()
    rep.check("worker processes exited", all(not w.proc.is_alive() for w in e.workers))
    time.sleep(0.5)
    out = run.daemon.ctl("engines")
    if out is None:
        rep.note("kvoffloadctl not found (KVOFFLOAD_CTL): daemon-side check skipped")
    else:
        line = [l for l in out.splitlines() if e.cfg.engine_id in l]
        rep.note("kvoffloadctl engines: %s" % (line or out.strip()[:300]))


def sc_block_reuse(run, rep):
    """A finished request's blocks are given to the next request in the very step its last
    store is planned (2026-08: freed at once, fenced by jobs_to_flush; 0.20: held until the
    store finished): what kvoffload stored must still be a's bytes."""
    e = run.engine(rep, "reuse", num_blocks=12)
    A = prompt(20, 6 * 16 + 5)   # 7 blocks
    X = prompt(21, 9 * 16 + 5)   # 10 blocks: needs a's
    e.add_request("a", A, max_tokens=1)
    e.add_request("x", X, max_tokens=2)
    rep.check("drained", e.drain(30))
    reused = e.reuse_seen
    rep.note("x was given %d of a's blocks" % reused)
    e.drop_gpu_cache()
    e.add_request("a2", A, max_tokens=2)
    rep.check("a2 drained", e.drain())
    local, ext = _hit(e, "a2")
    rep.check("a2: a's 96 tokens from kvoffload, byte-exact", (local, ext) == (0, 96),
              "local=%s external=%s" % (local, ext))
    e.verify_all()
    e.shutdown()


def sc_pending_lookup(run, rep):
    """b (a's prompt) is looked up while a's store is still in flight: pending rows are never
    served as a hit before the copy is done (0.20: miss or retry; 2026-08: HIT_PENDING)."""
    e = run.engine(rep, "pending")
    A = prompt(22, 5 * 16 + 5)
    e.add_request("a", A, max_tokens=6)
    e.step()  # a's prefill; its store goes out at the start of the next step
    st = e.lookup_keys(e.reqs["a"])
    names = sorted({getattr(x, "name", repr(x)) for x in st})
    rep.note("manager.lookup of a's 5 keys, store planned but not yet submitted: %s" % names)
    # 0.20 completes the store only when a finishes: a miss (recompute at once, as vLLM's CPU
    # manager answers); later generations complete it when its job ends: pending (bounded:
    # None up to 0.24, HIT_PENDING from 0.25) or a miss, never a hit.
    if "vllm.v1.kv_offload.abstract" in sys.modules:  # 0.20
        want = {"False"}
    elif hasattr(sys.modules["vllm.v1.kv_offload.base"], "LookupResult"):
        want = {"HIT_PENDING", "MISS"}
    else:
        want = {"None", "False"}
    rep.check("rows being written look up as one of %s, never as a hit" % sorted(want),
              bool(names) and set(names) <= want, str(names))
    cpu = _cpu_answer(run, rep, A)
    if cpu is not None:
        rep.note("vLLM's CPU manager on the same trace answers: %s" % cpu)
    e.drop_gpu_cache(in_use=True)
    e.add_request("b", A, max_tokens=2)
    rep.check("drained", e.drain(30))
    rep.note("b's lookups (local, external): %s" % e.hits.get("b"))
    e.verify_all()
    e.shutdown()


def _cpu_answer(run, rep, A):
    """What vLLM's own CPU manager answers in sc_pending_lookup's situation (None: this
    generation has no CPU manager files)."""
    e = run.engine(rep, "pending-cpu", spec="cpu")
    e.add_request("a", A, max_tokens=6)
    e.step()
    names = sorted({getattr(x, "name", repr(x)) for x in e.lookup_keys(e.reqs["a"])})
    e.drain(30)
    e.shutdown()
    return names


def sc_shared_prefix_running(run, rep):
    """b shares the prompt of a, which is still running (a long decode) with its store
    prepared: b is admitted at once (a hit, or a recompute), never held until a finishes.
    vLLM's own CPU manager on the same steps is noted. Steps take a 5 ms forward pass, as in
    admission_steps: a store in flight may answer pending, and a real step gives it that time."""
    cpu = _shared_prefix_running(run, rep, "cpu")
    if cpu is not None:
        rep.note("vLLM's CPU manager on the same steps: b admitted in step %s, lookups %s" % cpu)
    _shared_prefix_running(run, rep, "kvoffload")


def _shared_prefix_running(run, rep, spec):
    sub = Report("cpu") if spec == "cpu" else rep  # the baseline's checks are not the target
    sub.engines = rep.engines
    e = run.engine(sub, "sharedrun-" + spec, spec=spec, forward_s=ADMISSION_FORWARD_S)
    A = prompt(24, 5 * 16 + 5)
    e.add_request("a", A, max_tokens=200)
    for _ in range(3):
        e.step()  # a's prefill, its store planned and submitted, decoding
    e.drop_gpu_cache(in_use=True)
    e.add_request("b", A, max_tokens=2)
    arrival = e.stepno
    admitted = None
    for _ in range(50):
        e.step()
        if e.hits.get("b"):  # the connector answered (not deferred) and vLLM allocated for b
            admitted = e.stepno - arrival
            break
    a_running = e.reqs["a"] in e.running
    if spec == "cpu":
        e.abort("a")  # its 200 decode steps measure nothing here
        e.drain(60)
        e.verify_all()
        e.shutdown()
        rep.errors.extend(sub.errors)
        rep.wrong_bytes += sub.wrong_bytes
        return admitted, e.hits.get("b")
    rep.note("b admitted (blocks allocated, hit or recompute) in step %s after its arrival; "
             "a still running: %s; b's lookups (local, external): %s" % (
                 admitted, a_running, e.hits.get("b")))
    rep.check("b admitted in the first step after its arrival", admitted == 1, str(admitted))
    rep.check("a had not finished when b was admitted", a_running)
    if a_running:
        e.abort("a")  # its remaining decode steps measure nothing here
    rep.check("drained", e.drain(60))
    e.verify_all()
    e.shutdown()
    return None


# The forward pass in admission_steps: 5 ms (a small model's decode step; a prefill takes
# longer). Without it a load submitted at start_load_kv is polled at get_finished microseconds
# later, which no real step does, and "run" would measure the harness, not the copy.
ADMISSION_FORWARD_S = 0.005


def _admission_trace(e, tick):
    """The trace of sc_admission_steps; returns the requests it measures."""
    A = prompt(50, 5 * 16 + 5)
    C = prompt(51, 6 * 16 + 5)
    def settle():
        for _ in range(200):
            if e.idle() and not e._pending_jobs():
                break
            tick()
        for _ in range(2):
            tick()
    e.add_request("a", A, max_tokens=3)
    settle()
    e.drop_gpu_cache()
    e.add_request("b", A, max_tokens=2)  # every key READY: a hit, admitted at once
    e.add_request("c", C, max_tokens=40)
    for _ in range(3):
        tick()  # c's prefill, its store planned and submitted, c decoding
    e.drop_gpu_cache(in_use=True)
    e.add_request("d", C, max_tokens=2)  # shares running c's prefix, c's store in flight/done
    for _ in range(3):
        tick()
    e.drop_gpu_cache()
    e.add_request("e1", A, max_tokens=2)  # two requests for one stored prefix in one step
    e.add_request("e2", A, max_tokens=2)
    settle()
    e.drop_gpu_cache()
    e.add_request("g", A[:48] + prompt(52, 40), max_tokens=2)  # 3 blocks of A, a new tail
    settle()  # c finishes too: its store complete in every generation
    e.drop_gpu_cache()
    e.add_request("h", C, max_tokens=2)
    settle()
    return ["b", "d", "e1", "e2", "g", "h"]


def sc_admission_steps(run, rep):
    """The same trace on vLLM's own CPU offloading (the release's cpu/manager.py) and on
    kvoffload: per request, the scheduling steps from its arrival to its admission (vLLM
    allocated its blocks with the connector's answer: 1 = the first step after arrival) and to
    its first computing step (after a load). Target: kvoffload's admission == vLLM's on every
    request."""
    got = {}
    for spec in ("cpu", "kvoffload"):
        try:
            e = run.engine(rep, "admit-" + spec, spec=spec, forward_s=ADMISSION_FORWARD_S)
        except ConnectorDown as ex:
            rep.note("%s: %s" % (spec, ex))
            got[spec] = collections.defaultdict(lambda: (None, None, None, None))
            continue

        def tick(e=e):
            e.step()
            time.sleep(0.02)
        rids = _admission_trace(e, tick)
        got[spec] = {}
        for rid in rids:
            st, local, ext = e.admitted.get(rid, (None, None, None))
            got[spec][rid] = (None if st is None else st - e.arrived[rid],
                              None if rid not in e.started else e.started[rid] - e.arrived[rid],
                              local, ext)
        e.verify_all()
        e.shutdown()
    rows = []
    for rid in list(got["cpu"]):
        c, k = got["cpu"][rid], got["kvoffload"][rid]
        rows.append("%s: vLLM CPU admit %s run %s (local %s, ext %s) | kvoffload admit %s run %s "
                    "(local %s, ext %s)" % ((rid,) + c + k))
        rep.note("ADMISSION " + rows[-1])
    same = [rid for rid in got["cpu"] if got["cpu"][rid][0] == got["kvoffload"][rid][0]]
    rep.check("every request admitted by kvoffload in as many steps as by vLLM's CPU manager",
              len(same) == len(got["cpu"]),
              "differ: %s" % [r for r in got["cpu"] if r not in same])
    rep.check("every request admitted (both)", all(v[0] is not None for g in got.values()
                                                   for v in g.values()))
    hits = [rid for rid in got["cpu"] if got["cpu"][rid][3]]
    rep.check("vLLM's CPU manager hits on the trace (the measurement's coverage)",
              len(hits) >= 3, str(hits))


def sc_reset_cache(run, rep):
    """vLLM's reset_prefix_cache(reset_connector=True) calls the connector's reset_cache (0.22
    on): no exception, and afterwards kvoffload serves what vLLM's own CPU manager serves on the
    same trace (a hit or a miss, never wrong bytes)."""
    got = {}
    for spec in ("cpu", "kvoffload"):
        e = run.engine(rep, "reset-" + spec, spec=spec)
        if not hasattr(e.conn, "reset_cache"):
            rep.note("this generation's connector has no reset_cache: not called")
            e.shutdown()
            return
        A = prompt(60, 5 * 16 + 5)
        e.add_request("a", A, max_tokens=2)
        rep.check("%s: a drained" % spec, e.drain())
        r = e.calls("reset_cache", e.conn.reset_cache)
        e.drop_gpu_cache()
        e.add_request("b", A, max_tokens=2)
        rep.check("%s: b drained" % spec, e.drain())
        e.add_request("c", prompt(61, 3 * 16 + 5), max_tokens=2)  # still stores afterwards
        rep.check("%s: c drained" % spec, e.drain())
        e.drop_gpu_cache()
        e.add_request("c2", prompt(61, 3 * 16 + 5), max_tokens=2)
        rep.check("%s: c2 drained" % spec, e.drain())
        got[spec] = (r, _hit(e, "b"), _hit(e, "c2"))
        rep.note("%s: reset_cache() -> %r; b (a's prompt after the reset): %s; c2: %s" % (
            (spec,) + got[spec]))
        e.verify_all()
        e.shutdown()
    rep.check("b and c2 served as vLLM's CPU manager serves them after a reset",
              got["cpu"][1:] == got["kvoffload"][1:], str(got))


def sc_huge_request(run, rep):
    """One request of 66,000 blocks (> 65,536 keys in one index call: store, touch, complete,
    lookup, load), tiny pages; stored, then hit and loaded byte-exact."""
    nblk = 66000
    e = run.engine(rep, "huge", num_blocks=nblk + 8, num_layers=1, num_kv_heads=2, head_size=32,
                   budget_bytes=(nblk + 64) * 4096)  # 4 KiB pages: the daemon's row granule
    P = prompt(23, nblk * 16 + 3)
    e.add_request("a", P, max_tokens=1)
    rep.check("a drained", e.drain(300))
    e.drop_gpu_cache()
    e.add_request("b", P, max_tokens=1)
    rep.check("b drained", e.drain(300))
    local, ext = _hit(e, "b")
    rep.check("b: all %d blocks from kvoffload" % nblk, (local, ext) == (0, nblk * 16),
              "local=%s external=%s" % (local, ext))
    e.shutdown()


def sc_mla_tp2(run, rep):
    """MLA with TP2 (replicated layout: one copy; 2026-08 lets only rank 0 store): stored once,
    loaded byte-exact by both ranks."""
    sc_store_hit_load(run, rep, world=2, use_mla=True)


def sc_stalled_daemon(run, rep):
    """The daemon stops answering (SIGSTOP) while a preempted request's store is flushed
    (handle_preemptions → wait) and while the scheduler plans: wait_timeout_s / call_timeout_s
    2 s. Nothing may raise into vLLM and nothing wrong may be served once it answers again."""
    e = run.engine(rep, "stall", num_blocks=16,
                   extra={"wait_timeout_s": 2, "call_timeout_s": 2, "open_timeout_s": 2})
    A = prompt(30, 6 * 16 + 5)
    e.add_request("a", A, max_tokens=4)
    e.step()  # a's prefill; its store is deferred to the next step
    e.force_preempt.add("a")
    import signal
    import threading
    stall_s = 12.0
    run.daemon.proc.send_signal(signal.SIGSTOP)
    resume = threading.Timer(stall_s, run.daemon.proc.send_signal, (signal.SIGCONT,))
    resume.start()  # the daemon answers again after 12 s, whatever the engine is doing
    t0 = time.monotonic()
    try:
        e.step()  # a preempted: the workers submit its store and wait for it
        t1 = time.monotonic()
        e.step()
    finally:
        resume.join()
    rep.note("the daemon was stopped for %.0f s; the preemption step took %.1f s, the next "
             "%.1f s" % (stall_s, t1 - t0, time.monotonic() - t1))
    rep.check("drained after the daemon answers again", e.drain(60))
    rep.note("a's lookups (local, external): %s" % e.hits.get("a"))
    st = e.lookup_keys(e.reqs["a"])
    rep.note("a's keys after the stall: %s" % [getattr(x, "name", x) for x in st])
    e.drop_gpu_cache()
    e.add_request("a2", A, max_tokens=2)
    ok = e.drain(60)
    rep.check("a2 (a's prompt) is served within 60 s: hit, or computed after a miss", ok,
              "" if ok else "a2 still waiting: every lookup deferred it (%s)" %
              [getattr(x, "name", x) for x in e.lookup_keys(e.reqs["a"])])
    rep.note("a2: local/ext = %s" % (_hit(e, "a2"),))
    e.verify_all()
    e.shutdown()


def sc_decode_blocks(run, rep):
    """Blocks filled by decoding: 0.20 stores them too (the next turn hits prompt + output);
    2026-08 stores prompt blocks only (offload_prompt_only, its default)."""
    e = run.engine(rep, "decode")
    P = prompt(40, 5 * 16 + 5)
    a = e.add_request("a", P, max_tokens=30)  # 85 + 30 tokens: blocks 5 and 6 filled by decode
    rep.check("a drained", e.drain())
    e.drop_gpu_cache()
    turn2 = list(a.all_token_ids) + prompt(41, 10)
    e.add_request("b", turn2, max_tokens=2)
    rep.check("b drained", e.drain())
    local, ext = _hit(e, "b")
    cs_cfg = getattr(e.conn.connector_scheduler, "config", None)
    # vLLM's offload_prompt_only (0.23 on: the spec's, default true); before it, every full block
    prompt_only = bool(getattr(cs_cfg, "offload_prompt_only", False))
    want = 80 if prompt_only else 112
    rep.check("b: %d tokens from kvoffload" % want, (local, ext) == (0, want),
              "local=%s external=%s" % (local, ext))
    e.verify_all()
    e.shutdown()


def sc_concurrent_loads(run, rep):
    """b and c (the same stored prompt) arrive together: one loads, the other waits for those
    blocks (vLLM's blocks-being-loaded rule), then both run; bytes checked."""
    e = run.engine(rep, "concurrent")
    P = prompt(42, 5 * 16 + 5)
    e.add_request("a", P, max_tokens=2)
    rep.check("a drained", e.drain())
    e.drop_gpu_cache()
    e.add_request("b", P, max_tokens=2)
    e.add_request("c", P, max_tokens=2)
    rep.check("b, c drained", e.drain())
    rep.note("b: %s, c: %s" % (e.hits.get("b"), e.hits.get("c")))
    rep.check("b loaded 80 tokens", _hit(e, "b") == (0, 80), str(_hit(e, "b")))
    e.verify_all()
    e.shutdown()


def sc_abort_during_load(run, rep):
    """b is aborted while its load is in flight: its blocks are kept until the load is
    reported, then freed; the next request still hits and loads byte-exact."""
    e = run.engine(rep, "abort", num_blocks=24)
    P = prompt(43, 5 * 16 + 5)
    e.add_request("a", P, max_tokens=2)
    rep.check("a drained", e.drain())
    e.drop_gpu_cache()
    e.add_request("b", P, max_tokens=2)
    e.step()  # b's load planned and submitted
    e.abort("b")
    e.add_request("x", prompt(44, 12 * 16 + 5), max_tokens=2)  # wants the freed blocks
    rep.check("drained", e.drain())
    e.drop_gpu_cache()
    e.add_request("c", P, max_tokens=2)
    rep.check("c drained", e.drain())
    rep.check("c: 80 tokens from kvoffload", _hit(e, "c") == (0, 80), str(_hit(e, "c")))
    e.verify_all()
    e.shutdown()


def sc_tp2_mid_block(run, rep):
    sc_mid_block(run, rep, world=2)


def sc_tp2_preemption(run, rep):
    sc_preemption(run, rep, world=2)


def sc_tp2_per_layer(run, rep):
    sc_store_hit_load(run, rep, world=2, layout="per_layer")


def sc_stress(run, rep, world=1, seed=1, steps=300, restarts=1):
    """Random traffic: 8 prompt families sharing prefixes, arrivals, random lengths, forced
    preemptions, GPU prefix cache drops, rows of 2 GPU blocks (loads starting mid-row), a tight
    GPU pool and region (evictions), daemon restarts (policy recompute). Every load verified on
    every rank; every request must finish."""
    import random
    rnd = random.Random(seed)
    e = run.engine(rep, "stress%d" % seed, world=world, num_blocks=48, offload_block_size=32,
                   budget_bytes=40 * 2 * (16 << 10), kv_load_failure_policy="recompute")
    fams = [prompt(1000 + seed * 10 + i, 16 * 12) for i in range(8)]
    n = 0
    restart_at = set(rnd.sample(range(50, steps - 50), restarts)) if restarts else set()
    for step in range(steps):
        if rnd.random() < 0.35 and len(e.waiting) + len(e.running) < 6:
            f = rnd.randrange(8)
            base = fams[f][:rnd.choice([32, 48, 64, 96, 128, 192])]
            p = base + prompt(5000 + seed * 1000 + n, rnd.randrange(1, 40))
            e.add_request("r%d" % n, p, max_tokens=rnd.randrange(1, 12))
            n += 1
        if e.running and rnd.random() < 0.05:
            e.force_preempt.add(rnd.choice(e.running).request_id)
        if rnd.random() < 0.1:
            e.drop_gpu_cache()
        if step in restart_at:
            run.daemon.restart()
        e.step()
    ok = e.drain(120)
    unfinished = [r for r in e.reqs.values() if not r.is_finished()]
    rep.check("every request finished (%d requests, %d steps)" % (n, e.stepno),
              ok and not unfinished, "unfinished: %s" % [r.request_id for r in unfinished][:10])
    hits = sum(1 for v in e.hits.values() for (_, x) in v if x)
    rep.note("%d lookups with an offloaded hit, %d loads verified (%d blocks), %d GPU blocks "
             "reused" % (hits, rep.loads, rep.loaded_blocks, e.reuse_seen))
    rep.check("loads happened (the harness's coverage check)", rep.loads >= 3, str(rep.loads))
    e.verify_all()
    e.shutdown()


def sc_stress_tp2(run, rep):
    sc_stress(run, rep, world=2, seed=2)


def sc_stress_many(run, rep):
    """sc_stress for 10 more seeds (odd seeds TP 2), each on a fresh engine."""
    for seed in range(10, 20):
        sub = Report("stress seed %d" % seed)
        sub.engines = []
        try:
            sc_stress(run, sub, world=2 if seed % 2 else 1, seed=seed, steps=200)
        except ConnectorDown as ex:
            sub.note(str(ex))
            sub.check("vLLM starts", False)
        finally:
            for e in sub.engines:
                e.close()
        rep.errors.extend(sub.errors)
        rep.wrong_bytes += sub.wrong_bytes
        rep.wrong_blocks += sub.wrong_blocks
        rep.loads += sub.loads
        rep.loaded_blocks += sub.loaded_blocks
        rep.failed_requests += sub.failed_requests
        for what, ok, detail in sub.checks:
            rep.check("seed %d: %s" % (seed, what), ok, detail if not ok else "")
        rep.notes.extend("seed %d: %s" % (seed, n) for n in sub.notes)


# ---------------------------------------------------------------------------- the disk tier
TIER_ROW_BYTES = 64 << 10  # >= every row here (16 KiB a GPU block and rank, TP 2: 32 KiB)


class TierDaemon(Daemon):
    """kvoffloadd with a disk tier in a temporary directory (on /tmp: O_DIRECT needs a real
    file system, not tmpfs); its tier counters from Admin.Stats (python/tests/admin_stats.py)."""

    def __init__(self, backend):
        self.tier_dir = tempfile.mkdtemp(prefix="kvo-real-tier-", dir="/tmp")
        super().__init__(backend, extra=[
            "--disk_tier_path=" + self.tier_dir, "--disk_tier_bytes=64MiB",
            "--disk_tier_row_bytes=%d" % TIER_ROW_BYTES,
            # a loaded 2-core machine must not turn a promotion into a miss
            "--tier_promote_timeout_ms=5000"])

    def disk(self):
        if os.path.dirname(HERE) not in sys.path:
            sys.path.append(os.path.dirname(HERE))  # python/tests
        import admin_stats
        return admin_stats.tier_stats(self.dir, "disk")

    def wait_spilled(self, n, timeout=20):
        """Polls Admin.Stats until n rows were spilled (each READY row is written once): a row
        being spilled is not evictable, and these regions have a handful of rows."""
        deadline = time.monotonic() + timeout
        while True:
            d = self.disk()
            if d["spills_ok"] >= n or time.monotonic() > deadline:
                return d
            time.sleep(0.005)

    def stop(self):
        super().stop()
        shutil.rmtree(self.tier_dir, ignore_errors=True)


def _tier_run(run, rep):
    d = TierDaemon("auto" if run.device == "cuda" else "host")
    rep.tier_daemons = getattr(rep, "tier_daemons", []) + [d]
    return Run(run.gen, run.src, d, run.device, run.ctx), d


_TIER_KEYS = ("spills_ok", "spills_failed", "lookup_tier_hits", "promotions_started",
              "promotions_ok", "promotions_failed", "promotions_timed_out", "read_corrupt")


def _tier_note(d):
    return ", ".join("%s %s" % (k, d[k]) for k in _TIER_KEYS)


def _store_prompts(e, d, rep, prompts, tag):
    """Runs one request per prompt (5 full blocks each), each stored and spilled before the
    next, the GPU prefix cache dropped in between (the region evicts by LRU)."""
    for i, p in enumerate(prompts):
        e.drop_gpu_cache()
        e.add_request("%s%d" % (tag, i), p, max_tokens=2)
        rep.check("%s%d drained" % (tag, i), e.drain())
        e.settle(2)
        s = d.wait_spilled(e.stored_rows + 5)
        ok = s["spills_ok"] == e.stored_rows + 5
        rep.check("%s%d's 5 rows spilled" % (tag, i), ok, "" if ok else _tier_note(s))
        e.stored_rows += 5


def _check_promoted_load(rep, e, rid, after, loads0, blocks0, tag, tier):
    """Checks that request rid (a's 5-block prompt again) was served by `tier`: all 80 tokens
    loaded (none recomputed), one load of 5 blocks verified on every rank since (loads0,
    blocks0), and the tier's Admin.Stats `after` counts 5 promotions and 5 tier lookup hits
    (every row came from the tier), none failed, timed out or corrupt."""
    local, ext = _hit(e, rid)
    adm = e.admitted.get(rid)
    rep.note("%s: %s admitted %s step(s) after its arrival; lookups (local, external): %s;"
             " %s: %s" % (tag, rid, None if adm is None else adm[0] - e.arrived[rid],
                          e.hits.get(rid), tier, _tier_note(after)))
    rep.check("%s: a's 80 tokens loaded from kvoffload, none recomputed" % tag,
              (local, ext) == (0, 80), "local=%s external=%s" % (local, ext))
    rep.check("%s: one load of 5 blocks verified on every rank" % tag,
              (rep.loads - loads0, rep.loaded_blocks - blocks0) == (1, 5),
              "loads=%d blocks=%d" % (rep.loads - loads0, rep.loaded_blocks - blocks0))
    rep.check("%s: all 5 rows promoted from the %s tier (promotions_ok 5)" % (tag, tier),
              after["promotions_ok"] == 5 and after["lookup_tier_hits"] == 5,
              _tier_note(after))
    rep.check("%s: no failed, timed-out or corrupt promotion" % tag,
              after["promotions_failed"] == after["promotions_timed_out"] ==
              after["read_corrupt"] == 0, _tier_note(after))


def sc_disk_tier(run, rep):
    """The daemon with a disk tier and a region of 8 rows: a's 5-block prefix is stored (and
    spilled), then b and c (5 blocks each) evict all of it from DRAM; a's prompt again: vLLM's
    connector finds it (pending while the daemon promotes it from disk, within the plugin's
    pending bound), and loads it byte-exact on every rank. Passes only if all 80 tokens were
    loaded (none recomputed) and all 5 rows came from the disk (Admin.Stats promotions_ok 5).
    TP 1 and TP 2, each on a daemon of its own."""
    for world in (1, 2):
        sub, d = _tier_run(run, rep)
        loads0, blocks0 = rep.loads, rep.loaded_blocks
        e = sub.engine(rep, "disktier%d" % world, world=world, forward_s=ADMISSION_FORWARD_S,
                       budget_bytes=8 * (16 << 10) * world)  # 8 rows
        e.stored_rows = 0
        A = prompt(70, 5 * 16 + 5)
        _store_prompts(e, d, rep, [A], "a%d-" % world)
        _store_prompts(e, d, rep, [prompt(71, 5 * 16 + 5), prompt(72, 5 * 16 + 5)],
                       "other%d-" % world)
        before = d.disk()
        rep.check("TP%d: nothing promoted before a's prompt returns" % world,
                  before["lookup_tier_hits"] == 0 and before["promotions_started"] == 0,
                  _tier_note(before))
        e.drop_gpu_cache()
        rid = "again%d" % world
        e.add_request(rid, A, max_tokens=2)
        rep.check("TP%d: %s drained" % (world, rid), e.drain(30))
        _check_promoted_load(rep, e, rid, d.disk(), loads0, blocks0, "TP%d" % world, "disk")
        e.verify_all()
        e.shutdown()
        rep.engines.remove(e)
        e.close()
        d.stop()


def sc_disk_tier_partial(run, rep):
    """A region of 8 rows: a (5 blocks), then b (5 blocks) evicts a's last 2 rows (a prefix's
    tail goes first); a's first 3 rows are now the least recently used. a's prompt again: the
    daemon answers the head from DRAM and promotes the tail from disk. Passes when a's 80 tokens
    are loaded byte-exact (none recomputed, no request failed); notes whether the tail's
    promotion evicted the head it had just answered as hits (promoted again afterwards)."""
    sub, d = _tier_run(run, rep)
    e = sub.engine(rep, "disktierpart", forward_s=ADMISSION_FORWARD_S,
                   budget_bytes=8 * (16 << 10))
    e.stored_rows = 0
    A = prompt(73, 5 * 16 + 5)
    _store_prompts(e, d, rep, [A, prompt(74, 5 * 16 + 5)], "p")
    e.drop_gpu_cache()
    e.add_request("again", A, max_tokens=2)
    rep.check("again drained", e.drain(30))
    after = d.disk()
    adm = e.admitted.get("again")
    rep.note("again admitted %s step(s) after its arrival; lookups (local, external): %s; "
             "disk: %s" % (None if adm is None else adm[0] - e.arrived["again"],
                           e.hits.get("again"), _tier_note(after)))
    local, ext = _hit(e, "again")
    rep.check("a's 80 tokens loaded from kvoffload, none recomputed", (local, ext) == (0, 80),
              "local=%s external=%s" % (local, ext))
    rep.check("no request failed by vLLM", rep.failed_requests == 0, str(rep.failed_requests))
    rep.check("a's 2 evicted rows promoted from the disk tier", after["promotions_ok"] >= 2,
              _tier_note(after))
    # Not a check (vLLM sees no difference: pending, then the whole prefix): more than 2
    # promotions means the tail's promotion evicted head rows that the same Lookup answered
    # as HITs, which were then promoted back (python/tests/test_disk_tier.py,
    # test_a_promotion_keeps_the_rows_its_lookup_answers_as_hits).
    rep.note("promotions %d: %s" % (after["promotions_started"],
                                    "the tail only" if after["promotions_started"] == 2 else
                                    "head rows answered as hits were evicted by the tail's "
                                    "promotion and promoted again"))
    e.verify_all()
    e.shutdown()
    rep.engines.remove(e)
    e.close()
    d.stop()


# ---------------------------------------------------------------------------- the cluster tier
class LocalRedisCluster:
    """A Redis Cluster of `masters` redis-server processes (no replicas) on loopback ports in a
    temporary directory: python's small twin of daemon/tier/cluster/testing/local_cluster.cc
    (same settings). stop() kills every node by its pid and removes the directory."""

    def __init__(self, masters=3, node_timeout_ms=1000):
        for tool in ("redis-server", "redis-cli"):
            if shutil.which(tool) is None:
                raise RuntimeError("%s not installed (deploy/install_deps.sh installs it)" % tool)
        self.dir = tempfile.mkdtemp(prefix="kvo-real-redis-", dir="/tmp")
        self.procs, self.ports = [], []
        try:
            taken = set()
            for _ in range(masters):
                port, bus = self._free_port(taken), self._free_port(taken)
                conf = os.path.join(self.dir, "%d.conf" % port)
                with open(conf, "w") as f:
                    f.write("port %d\nbind 127.0.0.1\nprotected-mode no\ndaemonize no\n"
                            "dir %s\nlogfile %s/%d.log\nsave \"\"\nappendonly no\n"
                            "cluster-enabled yes\ncluster-config-file nodes-%d.conf\n"
                            "cluster-port %d\ncluster-node-timeout %d\n"
                            "cluster-require-full-coverage no\n"
                            "cluster-replica-validity-factor 0\n" % (
                                port, self.dir, self.dir, port, port, bus, node_timeout_ms))
                self.procs.append(subprocess.Popen(["redis-server", conf],
                                                   stdin=subprocess.DEVNULL,
                                                   stdout=subprocess.DEVNULL,
                                                   stderr=subprocess.DEVNULL))
                self.ports.append(port)
            deadline = time.monotonic() + 20
            for port in self.ports:
                while self._cli(port, "PING") != "PONG":
                    self._check_alive()
                    if time.monotonic() > deadline:
                        raise RuntimeError("redis-server :%d did not answer PING in 20 s" % port)
                    time.sleep(0.02)
            r = subprocess.run(["redis-cli", "--cluster", "create"] +
                               ["127.0.0.1:%d" % p for p in self.ports] +
                               ["--cluster-replicas", "0", "--cluster-yes"],
                               stdin=subprocess.DEVNULL, capture_output=True, text=True,
                               timeout=30)
            if r.returncode != 0:
                raise RuntimeError("redis-cli --cluster create: %s" % (r.stdout + r.stderr)[-2000:])
            for port in self.ports:
                while "cluster_state:ok" not in self._cli(port, "CLUSTER", "INFO"):
                    self._check_alive()
                    if time.monotonic() > deadline:
                        raise RuntimeError("redis :%d not cluster_state:ok in 20 s" % port)
                    time.sleep(0.02)
        except BaseException:
            self.stop()
            raise

    @staticmethod
    def _free_port(taken):
        import socket
        while True:
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
                s.bind(("127.0.0.1", 0))
                port = s.getsockname()[1]
            if port not in taken:
                taken.add(port)
                return port

    @staticmethod
    def _cli(port, *args):
        r = subprocess.run(["redis-cli", "-h", "127.0.0.1", "-p", str(port)] + list(args),
                           stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=10)
        return r.stdout.strip() if r.returncode == 0 else ""

    def _check_alive(self):
        for p in self.procs:
            if p.poll() is not None:
                raise RuntimeError("redis-server exited (%s) at start; logs in %s" % (
                    p.returncode, self.dir))

    @property
    def url(self):
        return "redis://" + ",".join("127.0.0.1:%d" % p for p in self.ports)

    def keys(self):
        """Number of keys on all masters (DBSIZE)."""
        return sum(int(self._cli(p, "DBSIZE") or 0) for p in self.ports)

    def stop(self):
        for p in self.procs:
            if p.poll() is None:
                p.kill()
            p.wait()
        self.procs = []
        shutil.rmtree(self.dir, ignore_errors=True)


class ClusterDaemon(TierDaemon):
    """kvoffloadd with the cluster tier (no disk tier): another node of the same cluster when
    started on another runtime directory."""

    def __init__(self, backend, url):
        self.tier_dir = None
        Daemon.__init__(self, backend, extra=[
            "--cluster_tier=" + url,
            # a loaded 2-core machine must not turn a lookup or a promotion into a miss
            "--cluster_tier_lookup_timeout_ms=1000", "--cluster_tier_command_timeout_ms=5000",
            "--tier_promote_timeout_ms=5000"])

    def disk(self):  # the tier the inherited wait_spilled polls
        return self.cluster()

    def cluster(self):
        if os.path.dirname(HERE) not in sys.path:
            sys.path.append(os.path.dirname(HERE))  # python/tests
        import admin_stats
        return admin_stats.tier_stats(self.dir, "cluster")

    def stop(self):
        Daemon.stop(self)


def _node_engine(run, rep, d, engine_id, world):
    """A fresh vLLM engine (scheduler + TP workers) on daemon d with this engine id: engines of
    two nodes share the cluster's records when id, owner, model and layout are equal."""
    cfg = Cfg(gen=run.gen, src=run.src, socket_path=d.socket, device=run.device,
              engine_id=engine_id, world=world, forward_s=ADMISSION_FORWARD_S)
    e = Engine(cfg, run.ctx, rep)
    rep.engines.append(e)
    return e


def sc_cluster_tier(run, rep):
    """Two nodes sharing a Redis Cluster (3 masters on loopback): daemon A with --cluster_tier,
    a vLLM engine on it stores a's 5-block prefix; once A's cluster tier counts its 5 rows
    spilled, the engine and daemon A are stopped. Daemon B (another runtime directory, a fresh
    region, the same cluster) and a fresh vLLM engine (scheduler + workers, the same engine id,
    model and layout) get a's prompt: vLLM's connector finds it (pending while B promotes it
    from the cluster, then a hit) and loads it byte-exact on every rank. Passes only if all 80
    tokens were loaded (none recomputed) and B's cluster tier counts 5 promotions (every row came
    from the cluster), none failed, timed out or corrupt. TP 1 and TP 2."""
    backend = "auto" if run.device == "cuda" else "host"
    cluster = LocalRedisCluster()
    rep.tier_daemons = getattr(rep, "tier_daemons", []) + [cluster]  # stopped last
    A = prompt(75, 5 * 16 + 5)
    for world in (1, 2):
        engine_id = "cluster%d-%s-%d" % (world, run.gen, os.getpid())
        loads0, blocks0 = rep.loads, rep.loaded_blocks

        # node A: store and spill
        da = ClusterDaemon(backend, cluster.url)
        rep.tier_daemons.insert(0, da)
        ea = _node_engine(run, rep, da, engine_id, world)
        ea.add_request("a%d" % world, A, max_tokens=2)
        rep.check("TP%d: a drained on node A" % world, ea.drain())
        ea.settle(2)
        sa = da.wait_spilled(5)
        rep.check("TP%d: node A spilled a's 5 rows to the cluster" % world,
                  sa["spills_ok"] == 5 and sa["spills_failed"] == 0, _tier_note(sa))
        keys = cluster.keys()
        ea.verify_all()
        ea.shutdown()
        rep.engines.remove(ea)
        ea.close()
        da.stop()
        rep.note("TP%d: node A stopped; cluster holds %d keys" % (world, keys))

        # node B: a fresh daemon (region empty) and a fresh vLLM engine, same cluster
        db = ClusterDaemon(backend, cluster.url)
        rep.tier_daemons.insert(0, db)
        eb = _node_engine(run, rep, db, engine_id, world)
        before = db.cluster()
        rep.check("TP%d: node B starts with nothing promoted" % world,
                  before["promotions_started"] == 0 and before["lookup_tier_hits"] == 0,
                  _tier_note(before))
        rid = "b%d" % world
        eb.add_request(rid, A, max_tokens=2)
        rep.check("TP%d: %s drained on node B" % (world, rid), eb.drain(30))
        _check_promoted_load(rep, eb, rid, db.cluster(), loads0, blocks0,
                             "TP%d: node B" % world, "cluster")
        rep.check("TP%d: no request failed by vLLM" % world, rep.failed_requests == 0,
                  str(rep.failed_requests))
        eb.verify_all()
        eb.shutdown()
        rep.engines.remove(eb)
        eb.close()
        if world == 1:
            # control: another engine id is another namespace; the cluster has nothing for it
            eo = _node_engine(run, rep, db, engine_id + "-other", world)
            eo.add_request("other", A, max_tokens=2)
            rep.check("control: another engine id on node B drained", eo.drain())
            o = db.cluster()
            rep.check("control: another engine id finds nothing in the cluster (computes all)",
                      _hit(eo, "other") == (0, 0) and o["lookup_tier_hits"] == 5 and
                      o["promotions_started"] == 5,
                      "lookup %s; %s" % (_hit(eo, "other"), _tier_note(o)))
            eo.shutdown()
            rep.engines.remove(eo)
            eo.close()
        db.stop()
    cluster.stop()


SCENARIOS = collections.OrderedDict([
    ("store_hit_load", sc_store_hit_load),
    ("tp2", sc_tp2),
    ("per_layer", sc_per_layer),
    ("partial_prefix", sc_partial_prefix),
    ("mid_block", sc_mid_block),
    ("kv_events", sc_kv_events),
    ("preemption", sc_preemption),
    ("daemon_restart", sc_daemon_restart),
    ("daemon_restart_recompute", sc_daemon_restart_recompute),
    ("budget_refusal", sc_budget_refusal),
    ("lru_eviction", sc_lru),
    ("tp2_per_layer", sc_tp2_per_layer),
    ("tp2_mid_block", sc_tp2_mid_block),
    ("tp2_preemption", sc_tp2_preemption),
    ("block_reuse", sc_block_reuse),
    ("decode_blocks", sc_decode_blocks),
    ("concurrent_loads", sc_concurrent_loads),
    ("abort_during_load", sc_abort_during_load),
    ("pending_lookup", sc_pending_lookup),
    ("shared_prefix_running", sc_shared_prefix_running),
    ("admission_steps", sc_admission_steps),
    ("reset_cache", sc_reset_cache),
    ("mla_tp2", sc_mla_tp2),
    ("stalled_daemon", sc_stalled_daemon),
    ("stress", sc_stress),
    ("stress_tp2", sc_stress_tp2),
    ("stress_many", sc_stress_many),
    ("huge_request", sc_huge_request),
    ("shutdown", sc_shutdown),
    ("disk_tier", sc_disk_tier),
    ("disk_tier_partial", sc_disk_tier_partial),
    ("cluster_tier", sc_cluster_tier),
])


def run_generation(gen, args, ctx):
    daemon = Daemon(backend="auto" if args.cuda else "host")
    run = Run(gen, args.src, daemon, "cuda" if args.cuda else "cpu", ctx)
    results = []
    names = args.scenario or list(SCENARIOS)
    try:
        for name in names:
            rep = Report(name)
            rep.engines = []
            t0 = time.monotonic()
            try:
                SCENARIOS[name](run, rep)
            except ConnectorDown as ex:
                rep.note(str(ex))
                rep.check("vLLM starts with the spec", False)
            except BaseException as ex:  # noqa: B902
                if isinstance(ex, KeyboardInterrupt):
                    raise
                rep.errors.append({"where": "driver", "call": name, "origin": "harness",
                                   "text": traceback.format_exc()})
            finally:
                for e in rep.engines:
                    e.close()
                for d in getattr(rep, "tier_daemons", ()):
                    d.stop()  # the tier scenarios' own daemons (and Redis Cluster)
            if daemon.proc.poll() is not None:
                rep.note("daemon exited (%s): %s" % (daemon.proc.returncode, daemon.tail()))
                daemon.start()
            dt = time.monotonic() - t0
            print_report(gen, rep, dt)
            results.append(rep)
    finally:
        daemon.stop()
    print("%s: real vLLM files executed in the scheduler process:" % gen)
    for name, f in stubs.real_modules(os.path.join(args.src, gen, "vllm")):
        print("    %s %s" % (f, sha256_of(os.path.join(args.src, gen, f))))
    return results


def sha256_of(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def print_report(gen, rep, dt):
    exc = rep.exceptions
    by = collections.Counter(e["origin"] for e in rep.errors)
    print("%s %s %s  (%.1f s) exceptions into vLLM: %d (plugin %d, vLLM on plugin's result %d), "
          "harness errors: %d, wrong bytes: %d in %d blocks, loads verified: %d (%d blocks), "
          "requests failed by vLLM: %d" % (
              "PASS" if rep.passed else "FAIL", gen, rep.name, dt, len(exc), by["plugin"],
              by["vllm"], by["harness"], rep.wrong_bytes, rep.wrong_blocks, rep.loads,
              rep.loaded_blocks, rep.failed_requests), flush=True)
    for what, ok, detail in rep.checks:
        print("    [%s] %s%s" % ("ok" if ok else "FAILED", what, (": " + detail) if detail else ""))
    for n in rep.notes:
        print("    note: %s" % n)
    seen = collections.Counter()
    for e in rep.errors:
        key = (e["where"].rstrip("0123456789"), e["call"], e["text"].strip().splitlines()[-1])
        seen[key] += 1
        if seen[key] > 1:
            continue
        print("    EXCEPTION in %s, %s (origin: %s):" % (e["where"], e["call"], e["origin"]))
        for line in e["text"].rstrip().splitlines():
            print("      | " + line)
    for key, n in seen.items():
        if n > 1:
            print("    (%s %s: '%s' repeated %d times)" % (key[0], key[1], key[2][:120], n))
    sys.stdout.flush()


def snapshot_binaries():
    """Copies KVOFFLOAD_DAEMON and KVOFFLOAD_LIB once per run, so a rebuild replacing them
    mid-run (a daemon restart execs the binary again; the library is mapped) cannot change or
    kill the run. The copies live as long as this process tree."""
    if os.environ.get("KVO_REAL_SNAPSHOT"):
        return
    d = tempfile.mkdtemp(prefix="kvo-real-bin-", dir="/tmp")
    for var, default in (("KVOFFLOAD_DAEMON", "/work/stable/kvoffloadd"),
                         ("KVOFFLOAD_LIB", "/work/stable/libkvoffload_c.so")):
        src = os.environ.get(var, default)
        if os.path.exists(src):
            dst = os.path.join(d, os.path.basename(src))
            shutil.copy2(src, dst)
            print("%s=%s (copy of %s, sha256 %s)" % (var, dst, src, sha256_of(dst)[:16]))
            os.environ[var] = dst
    os.environ["KVO_REAL_SNAPSHOT"] = d
    import atexit
    atexit.register(shutil.rmtree, d, True)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--src", default=os.environ.get("VLLM_SRC", "/work/vllm-src"),
                    help="folder with one prepared folder per generation")
    ap.add_argument("--gen", action="append", choices=GENERATIONS,
                    help="generation(s) to run (default: every one present under --src)")
    ap.add_argument("--scenario", action="append", choices=list(SCENARIOS))
    ap.add_argument("--cuda", action="store_true",
                    help="worker KV tensors on CUDA, daemon backend auto (CUDA)")
    ap.add_argument("-v", "--verbose", action="store_true")
    args = ap.parse_args()
    import logging
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING,
                        format="%(levelname)s %(name)s: %(message)s")
    if not args.verbose:
        logging.getLogger("vllm").setLevel(logging.ERROR)
    snapshot_binaries()
    gens = args.gen or [g for g in GENERATIONS if os.path.isdir(os.path.join(args.src, g))]
    if not gens:
        sys.exit("no generation folder under %s (run prepare.sh)" % args.src)
    print("vllm_real: src=%s generations=%s device=%s daemon=%s lib=%s" % (
        args.src, gens, "cuda" if args.cuda else "host", os.environ.get("KVOFFLOAD_DAEMON"),
        os.environ.get("KVOFFLOAD_LIB")), flush=True)
    ctx = multiprocessing.get_context("spawn")
    total = []
    for gen in gens:
        # one process per generation: the two vLLM trees cannot share sys.modules
        if len(gens) > 1:
            cmd = [sys.executable, "-X", "faulthandler", os.path.abspath(__file__),
                   "--src", args.src, "--gen", gen]
            for s in args.scenario or ():
                cmd += ["--scenario", s]
            if args.cuda:
                cmd.append("--cuda")
            r = subprocess.run(cmd, stdout=subprocess.PIPE, text=True)
            sys.stdout.write(r.stdout)
            if r.returncode not in (0, 1):
                print("%s: THE RUN DIED (exit status %d%s) — counted as 1 failed" % (
                    gen, r.returncode, ", signal %d" % -r.returncode if r.returncode < 0 else ""))
            last = [l for l in r.stdout.splitlines() if l.endswith("failed")]
            if last:
                p, f = last[-1].split(" passed, ")
                total.append((int(p.split()[-1]), int(f.split()[0])))
            else:
                total.append((0, 1))
            continue
        mod, vllm_dir = load_vllm(args.src, gen)
        print("%s: real vLLM modules:" % gen)
        for name, f in stubs.real_modules(vllm_dir):
            print("    %s" % f)
        res = run_generation(gen, args, ctx)
        p = sum(1 for r in res if r.passed)
        print("%s: %d passed, %d failed" % (gen, p, len(res) - p))
        total.append((p, len(res) - p))
    p, f = sum(t[0] for t in total), sum(t[1] for t in total)
    print("%d passed, %d failed" % (p, f))
    sys.exit(0 if f == 0 else 1)


if __name__ == "__main__":
    main()
