"""kvoffload.vllm end to end for ONE vLLM generation, through that generation's test double
(vllm_double/<generation>/vllm, signatures and dataclasses as the real files) against the real
daemon on its host backend. test_vllm_spec.py runs this file once per generation, each in its
own process (the double is a top-level `vllm` package):

    python3 test_vllm_generations.py v0_20_2|main_2026_08 [RESULTS.json]

Everything vLLM-specific goes through `G` (the generation's way to build the spec, call the
manager and the worker), so one test body covers both generations.
"""

import dataclasses
import importlib
import json
import os
import sys
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
import vllm_signatures  # noqa: E402

GENERATIONS = tuple(vllm_signatures.DOUBLES_IN_USE)

LAYERS = 4
HALF = 2048                      # one layer's K (or V) bytes per block
PAGE = 2 * HALF                  # one layer's K+V bytes per block (kv_cache_spec.page_size_bytes)
WORKER_BYTES = LAYERS * PAGE
BLOCKS = 32
TOKENS_PER_BLOCK = 16


def setup_generation(name):
    """Puts the generation's double first on sys.path; returns the G for it."""
    if name not in GENERATIONS:
        raise SystemExit("generation must be one of %s" % ", ".join(GENERATIONS))
    double = os.path.join(HERE, "vllm_double", name)
    if double not in sys.path:
        sys.path.insert(0, double)
    if HERE not in sys.path:
        sys.path.insert(1, HERE)
    global G
    G = G_Release(name)
    return G


def keys(prefix, n):
    """vLLM OffloadKeys: a block hash and the group index (4 bytes)."""
    return [("%s-%d" % (prefix, i)).encode().ljust(32, b".") + b"\0\0\0\0" for i in range(n)]


class HostCanonicalKv:
    """A worker's KV cache as vLLM canonicalises FlashAttention's [2, num_blocks, ...] layers:
    a K and a V tensor per layer, each (num_blocks, HALF) with a padded stride, in a memfd
    filled with random bytes; tensors() are the CanonicalKVCacheTensors."""

    def __init__(self, num_tensors=2 * LAYERS, page=HALF):
        from kvoffload import HostAllocation
        self.page = page
        self.stride = page + 128
        self.alloc = HostAllocation(num_tensors * self.stride * BLOCKS + 4096)
        self.alloc.buf[:] = os.urandom(self.alloc.nbytes)
        self.offsets = [4096 + i * self.stride * BLOCKS for i in range(num_tensors)]
        self.golden = [self.block(b) for b in range(BLOCKS)]

    def canonical(self, mod):
        tensors = [mod.CanonicalKVCacheTensor(
            self.alloc.tensor(off, BLOCKS, self.stride, self.page), self.page)
            for off in self.offsets]
        refs = [[mod.CanonicalKVCacheRef(i, self.page) for i in range(len(tensors))]]
        return mod.CanonicalKVCaches(tensors=tensors, group_data_refs=refs)

    def block(self, b):
        s, p = self.stride, self.page
        return b"".join(bytes(self.alloc.buf[off + b * s:off + b * s + p]) for off in self.offsets)

    def clobber(self, b):
        s, p = self.stride, self.page
        for off in self.offsets:
            self.alloc.buf[off + b * s:off + b * s + p] = b"\x5a" * p

    def close(self):
        self.alloc.close()


class FakeCpuTensor:
    """What the harness and the host backend hand vLLM: a torch CPU tensor over a memfd
    (data_ptr, shape, stride, element_size, device), here without torch."""

    def __init__(self, address, num_blocks, stride_bytes):
        self._address = address
        self.shape = (num_blocks, stride_bytes)
        self._stride = stride_bytes
        self.device = type("Device", (), {"type": "cpu"})()

    def data_ptr(self):
        return self._address

    def stride(self, dim=None):
        return self._stride if dim == 0 else (self._stride, 1)

    def element_size(self):
        return 1


class CpuTensorKv(HostCanonicalKv):
    """The same KV cache, handed over as CPU tensors (the plugin finds their memfd)."""

    def canonical(self, mod):
        import ctypes
        base = ctypes.addressof(ctypes.c_char.from_buffer(self.alloc.buf))
        tensors = [mod.CanonicalKVCacheTensor(FakeCpuTensor(base + off, BLOCKS, self.stride),
                                              self.page) for off in self.offsets]
        refs = [[mod.CanonicalKVCacheRef(i, self.page) for i in range(len(tensors))]]
        return mod.CanonicalKVCaches(tensors=tensors, group_data_refs=refs)


# -- the releases ------------------------------------------------------------------------------

def _params(func):
    import inspect
    return [p for p in inspect.signature(func).parameters if p != "self"]


class G_Release:
    """How the tests drive one release's double, read off the double's interface (the same
    differences the plugin's capability table detects, found independently here):
    OffloadingSpec(vllm_config, kv_cache_config) or OffloadingSpec(OffloadingConfig); lookup ->
    bool | None or LookupResult; touch/complete_* with or without req_context (0.20 touches
    before it looks up, later releases after); handlers behind vLLM's OffloadingWorker or
    spec.get_worker()."""

    def __init__(self, name):
        self.name = name
        imp = importlib.import_module
        try:
            self.base = imp("vllm.v1.kv_offload.base")
        except ImportError:
            self.base = None
        if self.base is not None:
            self.abstract = self.mediums = self.spec_mod = self.base
        else:
            self.abstract = imp("vllm.v1.kv_offload.abstract")
            self.mediums = imp("vllm.v1.kv_offload.mediums")
            self.spec_mod = imp("vllm.v1.kv_offload.spec")
        self.factory = imp("vllm.v1.kv_offload.factory")
        self.handlers = hasattr(self.spec_mod.OffloadingSpec, "get_handlers")
        self.worker_mod = imp("vllm.v1.kv_offload.worker.worker") if self.handlers else None
        self.by_config = _params(self.spec_mod.OffloadingSpec.__init__) == ["config"]
        if self.by_config:
            self.config = imp("vllm.v1.kv_offload.config")
        else:
            self.cfg = imp("vllm.config")
            self.kvi = imp("vllm.v1.kv_cache_interface")
            self.ps = imp("vllm.distributed.parallel_state")
        om = self.abstract.OffloadingManager
        self.ctx_calls = "req_context" in _params(om.touch)
        self.enum = getattr(self.abstract, "LookupResult", None)
        self.req_ids = "req_id" in {f.name for f in dataclasses.fields(self.abstract.ReqContext)}
        self.requests = hasattr(om, "on_new_request")
        self.cfg_fields = ({f.name for f in dataclasses.fields(self.config.OffloadingConfig)}
                           if self.by_config else set())
        self.writer_only_stores = "replicated_layout" in self.cfg_fields
        self.own_store_pending = "miss" if not self.ctx_calls else "pending"

    # -- building the spec
    def configs(self, extra, tp=1, pp=1, use_mla=False, events=False, executor="mp",
                layers=LAYERS, page=PAGE, dp_rank=0):
        cfg, kvi = self.cfg, self.kvi
        vllm_config = cfg.VllmConfig(
            parallel_config=cfg.ParallelConfig(tensor_parallel_size=tp, pipeline_parallel_size=pp,
                                               distributed_executor_backend=executor,
                                               data_parallel_rank=dp_rank),
            cache_config=cfg.CacheConfig(block_size=TOKENS_PER_BLOCK),
            model_config=cfg.ModelConfig(use_mla=use_mla),
            kv_transfer_config=cfg.KVTransferConfig(kv_connector="OffloadingConnector",
                                                    kv_role="kv_both",
                                                    kv_connector_extra_config=dict(extra)),
            kv_events_config=cfg.KVEventsConfig(enable_kv_cache_events=events))
        kv_cache_config = kvi.KVCacheConfig(
            num_blocks=BLOCKS,
            kv_cache_tensors=[kvi.KVCacheTensor(size=BLOCKS * page, shared_by=["layer.%d" % i])
                              for i in range(layers)],
            kv_cache_groups=[kvi.KVCacheGroupSpec(["layer.%d" % i for i in range(layers)],
                                                  kvi.FullAttentionSpec(TOKENS_PER_BLOCK, page))])
        return vllm_config, kv_cache_config

    def offloading_config(self, extra, tp=1, pp=1, use_mla=False, events=False, executor="mp",
                          layers=LAYERS, page=PAGE, dp_rank=0, tp_rank=0):
        c = self.config
        extra = dict(extra)
        if executor not in ("mp", None):
            extra.setdefault("executor", executor)
        bpc = 1
        if "block_size" in extra:
            bpc = int(extra["block_size"]) // TOKENS_PER_BLOCK
        world = tp * pp
        parallel = dict(rank=tp_rank, world_size=world, tp_size=tp, pp_size=pp, pcp_size=1,
                        dcp_size=1, data_parallel_index=dp_rank, data_parallel_size=1,
                        data_parallel_rank_local=None, is_parallelism_agnostic=False)
        pfields = {f.name for f in dataclasses.fields(c.OffloadingParallelConfig)}
        kw = {}
        if self.writer_only_stores:
            # vLLM's gate (offloading/config.py): pure MLA, TP only (> 1), mp, one node
            kw["replicated_layout"] = bool(use_mla and tp > 1 and pp == 1 and executor == "mp")
        return c.OffloadingConfig(
            groups=(c.OffloadingGroupConfig(tokens_per_block=TOKENS_PER_BLOCK,
                                            layer_names=tuple("layer.%d" % i
                                                              for i in range(layers))),),
            worker_kv_bytes_per_block=layers * page,
            enable_kv_cache_events=events,
            extra_config=extra,
            engine_id=extra.get("engine_id", "engine-%d" % dp_rank),
            model=c.OffloadingModelConfig(name="test/model", dtype="bfloat16"),
            cache=c.OffloadingCacheConfig(tokens_per_hash=TOKENS_PER_BLOCK, blocks_per_chunk=bpc),
            parallel=c.OffloadingParallelConfig(**{k: v for k, v in parallel.items()
                                                   if k in pfields}), **kw)

    def create(self, extra, tp_rank=0, **kw):
        if self.by_config:
            return self.factory.OffloadingSpecFactory.create_spec(
                self.offloading_config(extra, tp_rank=tp_rank, **kw))
        return self.factory.OffloadingSpecFactory.create_spec(*self.configs(extra, **kw))

    # -- the manager
    def ctx(self, **kw):
        import uuid
        if self.req_ids:
            kw.setdefault("req_id", "req-" + uuid.uuid4().hex[:8])  # a new request each time
        return self.abstract.ReqContext(**kw)

    def lookup(self, manager, key, ctx=None):
        """'hit' | 'pending' | 'miss' | 'retry'"""
        r = manager.lookup(key, ctx or self.ctx())
        if self.enum is None:
            return {True: "hit", None: "pending", False: "miss"}[r]
        L = self.enum
        return {L.HIT: "hit", L.HIT_PENDING: "pending", L.MISS: "miss", L.RETRY: "retry"}[r]

    def schedule_end(self, manager):
        if not hasattr(self.abstract.OffloadingManager, "on_schedule_end"):
            return  # this release's scheduler never calls it
        end = getattr(self.abstract, "ScheduleEndContext", None)
        if end is not None:
            manager.on_schedule_end(end(new_req_ids=(), preempted_req_ids=()))
        elif "context" not in _params(self.abstract.OffloadingManager.on_schedule_end):
            manager.on_schedule_end()

    def next_step(self, manager):
        """The scheduler's next step as the manager sees it: the end of this one
        (on_schedule_end, 0.23 on), else another request's lookup and store in the next."""
        if hasattr(self.abstract.OffloadingManager, "on_schedule_end"):
            self.schedule_end(manager)
            return
        import uuid
        other = keys("step-" + uuid.uuid4().hex[:6], 1)
        self.lookup(manager, other[0])
        manager.prepare_store(other, self.ctx())

    def attempt(self, manager, ks, ctx):
        """One of vLLM's scheduling attempts for a request: its maximal-prefix lookup (0.20
        touches the keys first; later releases after), a pending or retry answer defers the
        request (scanning goes on but for a miss), then the end of the scheduler step.
        (hit count, deferred)."""
        if not self.ctx_calls:
            manager.touch(ks)
        n, deferred = 0, False
        for k in ks:
            r = self.lookup(manager, k, ctx)
            if r == "hit":
                n += 1
            elif r == "pending":
                n, deferred = n + 1, True
            elif r == "retry":
                deferred = True
            else:
                break
        if self.ctx_calls:
            manager.touch(ks, ctx)
        self.schedule_end(manager)
        return n, deferred

    def hits(self, manager, ks):
        """Leading hits as vLLM's scheduler finds them: attempts until one is not deferred
        (a pending key keeps deferring: then the last attempt's count of plain hits)."""
        ctx = self.ctx()
        for _ in range(3):
            n, deferred = self.attempt(manager, ks, ctx)
            if not deferred:
                return n
        n = 0
        for k in ks:
            if self.lookup(manager, k, ctx) != "hit":
                break
            n += 1
        return n

    def _c(self):
        return (self.ctx(),) if self.ctx_calls else ()

    def prepare_store(self, manager, ks):
        return manager.prepare_store(ks, self.ctx())

    def complete_store(self, manager, ks, success=True):
        manager.complete_store(set(ks), *self._c(), success=success)

    def prepare_load(self, manager, ks):
        return manager.prepare_load(ks, self.ctx())

    def complete_load(self, manager, ks):
        manager.complete_load(set(ks), *self._c())

    def touch(self, manager, ks):
        manager.touch(ks, *self._c())

    def event_medium(self):
        medium = getattr(self.abstract, "Medium", None)
        return medium.CPU if medium is not None else "CPU"

    # -- the worker side
    def gpu(self, blocks, first_index=0):
        return self.mediums.GPULoadStoreSpec(blocks, group_sizes=(len(blocks),),
                                             block_indices=(first_index,))

    def worker(self, spec, tp_rank=0, tp=1, kv_class=None):
        kv = (kv_class or HostCanonicalKv)()
        if not self.by_config:
            self.ps.RANKS = (tp, tp_rank, 0)
        try:
            if self.handlers:
                w = self.worker_mod.OffloadingWorker()
                for src, dst, handler in spec.get_handlers(kv.canonical(self.spec_mod)):
                    w.register_handler(src, dst, handler)
                return W(w, self, store=lambda j, g, s: w.transfer_async(j, (g, s)),
                         load=lambda j, s, g: w.transfer_async(j, (s, g))), kv
            w = spec.get_worker(kv.canonical(self.spec_mod))
            return W(w, self, store=w.submit_store, load=w.submit_load), kv
        finally:
            if not self.by_config:
                self.ps.RANKS = None

    def vllm_classes(self):
        """(manager base, transfer base, spec base) vLLM defines for the plugin's classes."""
        transfer = self.worker_mod.OffloadingHandler if self.handlers else \
            self.base.OffloadingWorker
        return self.abstract.OffloadingManager, transfer, self.spec_mod.OffloadingSpec


class W:
    """A worker as the tests drive it: store(job, gpu_spec, rows_spec), load(job, rows_spec,
    gpu_spec), finished(n) -> {job id: TransferResult}."""

    def __init__(self, worker, gen, store, load):
        self.worker = worker
        self.gen = gen
        self.store = store
        self.load = load

    def finished(self, want, timeout=30):
        out = {}
        deadline = time.monotonic() + timeout
        while len(out) < want and time.monotonic() < deadline:
            for r in self.worker.get_finished():
                out[r.job_id] = r
            time.sleep(0.002)
        return out

    def wait(self, ids):
        self.worker.wait(set(ids))

    def shutdown(self):
        self.worker.shutdown()


G = None


def connector_class():
    return importlib.import_module(
        "vllm.distributed.kv_transfer.kv_connector.v1.offloading_connector").OffloadingConnector


# -- the tests ---------------------------------------------------------------------------------

class GenerationTest(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        from test_host_backend import Daemon
        cls.Daemon = Daemon
        cls.daemon = Daemon(["--job_timeout_s=2"])  # a job missing a vote fails in 2 s
        connector_class()  # loaded, as in vLLM: the load-error path can be wired

    @classmethod
    def tearDownClass(cls):
        cls.daemon.stop()

    def extra(self, engine_id, **kw):
        extra = {"spec_name": "KvoffloadSpec", "spec_module_path": "kvoffload.vllm",
                 "cpu_bytes_to_use": 1 << 20, "engine_id": engine_id,
                 "socket_path": self.daemon.data_socket}
        extra.update(kw)
        return extra

    def manager(self, extra, **kw):
        spec = G.create(extra, **kw)
        m = spec.get_manager()
        self.addCleanup(m.shutdown)
        return spec, m

    def worker(self, extra, tp_rank=0, tp=1, kv_class=None, **kw):
        spec = G.create(extra, tp_rank=tp_rank, tp=tp, **kw)
        w, kv = G.worker(spec, tp_rank=tp_rank, tp=tp, kv_class=kv_class)
        self.addCleanup(kv.close)
        self.addCleanup(w.shutdown)
        return w, kv

    def done(self, w, want):
        out = w.finished(want)
        self.assertEqual(len(out), want, out)
        return out

    def load_errors(self):
        return connector_class()().get_block_ids_with_load_errors()

    # ---------------------------------------------------------------------------------------

    def test_the_capability_table_reads_the_release(self):
        import kvoffload.vllm as kv
        choice = kv.capabilities_of_running_vllm()
        self.assertEqual(choice["transfers"], "handlers" if G.handlers else "worker")
        self.assertEqual(choice["spec_constructor"],
                         "offloading_config" if G.by_config else "vllm_config")
        self.assertEqual(choice["lookup_result"], "bool" if G.enum is None else "enum")
        self.assertEqual(choice["request_context"], "every_call" if G.ctx_calls else "none")
        self.assertEqual(choice["request_id"], "req_id" if G.req_ids else "object")
        self.assertEqual(choice["request_policy"], "block_level" if G.requests else "none")
        self.assertEqual(choice["replicated_layout"],
                         "vllm_chooses" if G.writer_only_stores else "every_rank_stores")
        from kvoffload.vllm import KvoffloadLoadStoreSpec, KvoffloadSpec
        self.assertEqual(KvoffloadSpec.__module__, "kvoffload.vllm.adapter")
        # vLLM pickles the row specs into its worker processes by qualified name.
        import pickle
        spec = pickle.loads(pickle.dumps(KvoffloadLoadStoreSpec([3, 4], 7, 9, keys=[b"k"])))
        self.assertIsInstance(spec, KvoffloadLoadStoreSpec)
        self.assertEqual((list(spec.block_ids), spec.region_epoch, spec.job_nonce, spec.keys),
                         ([3, 4], 7, 9, [b"k"]))

    def test_factory_builds_the_spec_from_the_readme_line(self):
        from kvoffload.vllm import KvoffloadSpec
        with open(os.path.join(os.path.dirname(os.path.dirname(HERE)), "README.md")) as f:
            readme = f.read()
        lines = [l for l in readme.splitlines() if "--kv-transfer-config" in l and "{" in l]
        self.assertTrue(lines, "README has no --kv-transfer-config line")
        for line in lines:
            config = json.loads(line[line.index("'") + 1:line.rindex("'")])
            self.assertEqual(config["kv_connector"], "OffloadingConnector")
            extra = config["kv_connector_extra_config"]
            extra.update(engine_id="readme", socket_path=self.daemon.data_socket,
                         cpu_bytes_to_use=1 << 20)
            spec, m = self.manager(extra)
            self.assertIsInstance(spec, KvoffloadSpec)
            self.assertEqual(G.lookup(m, keys("x", 1)[0]), "miss")

    def test_store_lookup_load_byte_exact(self):
        spec, m = self.manager(self.extra("rt"), events=True)
        w, kv = self.worker(self.extra("rt"))
        hashes = keys("h", 5)
        self.assertEqual(G.hits(m, hashes), 0)
        out = G.prepare_store(m, hashes)
        self.assertEqual(out.keys_to_store, hashes)
        self.assertEqual(out.evicted_keys, [])
        rows = list(out.store_spec.block_ids)
        self.assertEqual(len(set(rows)), 5)
        # Prepared in this step, its job not submitted yet (vLLM submits it at the start of the
        # next step's execution; 0.20 completes it only when its request finishes): a miss.
        self.assertEqual([G.lookup(m, k) for k in hashes], ["miss"] * 5)
        gpu_blocks = [7, 1, 30, 12, 4]
        self.assertTrue(w.store(11, G.gpu(gpu_blocks, 0), out.store_spec))
        r = self.done(w, 1)[11]
        self.assertTrue(r.success)
        self.assertEqual(r.transfer_size, 5 * WORKER_BYTES)
        G.complete_store(m, hashes)
        self.assertEqual(G.hits(m, hashes), 5)
        self.assertEqual(G.hits(m, hashes[:2] + keys("missing", 1) + hashes[2:]), 2)
        events = list(m.take_events())
        self.assertEqual(len(events), 1)
        self.assertEqual((sorted(events[0].keys), events[0].removed, events[0].medium),
                         (sorted(hashes), False, G.event_medium()))
        self.assertEqual(list(m.take_events()), [])
        again = G.prepare_store(m, hashes + keys("h5", 1))
        self.assertEqual(again.keys_to_store, keys("h5", 1))
        G.complete_store(m, keys("h5", 1), success=False)
        for b in gpu_blocks:
            kv.clobber(b)
        load = G.prepare_load(m, hashes[1:4])
        self.assertEqual([r & 0xffffffff for r in load.block_ids],  # handles: ticket << 32 | row
                         [r & 0xffffffff for r in rows[1:4]])
        dst = [20, 21, 22]
        self.assertTrue(w.load(12, load, G.gpu(dst, 1)))
        self.assertTrue(self.done(w, 1)[12].success)
        for src, d in zip(gpu_blocks[1:4], dst):
            self.assertEqual(kv.block(d), kv.golden[src], "GPU block %d" % d)
        G.complete_load(m, hashes[1:4])
        self.assertEqual(self.load_errors(), set())

    def test_cpu_tensors_over_a_memfd_register_on_the_host_backend(self):
        _, m = self.manager(self.extra("cpu"))
        w, kv = self.worker(self.extra("cpu"), kv_class=CpuTensorKv)
        k = keys("cpu", 2)
        out = G.prepare_store(m, k)
        self.assertTrue(w.store(1, G.gpu([5, 9]), out.store_spec))
        self.assertTrue(self.done(w, 1)[1].success)
        G.complete_store(m, k)
        load = G.prepare_load(m, k)
        self.assertTrue(w.load(2, load, G.gpu([0, 1])))
        self.assertTrue(self.done(w, 1)[2].success)
        self.assertEqual((kv.block(0), kv.block(1)), (kv.golden[5], kv.golden[9]))

    def test_eviction_order_and_exhaustion(self):
        extra = self.extra("evict", cpu_bytes_to_use=4 * WORKER_BYTES)
        spec, m = self.manager(extra, events=True)
        w, _ = self.worker(extra)
        self.assertEqual(spec.get_manager().core.scheduler.geometry.num_rows, 4)
        first = keys("e", 4)
        out = G.prepare_store(m, first)
        self.assertIsNone(G.prepare_store(m, keys("e4", 1)))  # every row is being written
        self.assertTrue(w.store(1, G.gpu([0, 1, 2, 3]), out.store_spec))
        w.wait({1})
        G.complete_store(m, first)  # e-0 the most recent (prepare_store order), e-3 the least
        G.touch(m, [first[3]])  # e-3 the most recent: e-2 and e-1 go first
        out = G.prepare_store(m, keys("n", 2))
        self.assertEqual(out.keys_to_store, keys("n", 2))
        self.assertEqual(out.evicted_keys, [first[2], first[1]])
        self.assertIsNone(G.prepare_store(m, keys("f", 5)))  # more than the region holds
        self.assertEqual(G.hits(m, first), 1)
        self.assertEqual(G.hits(m, [first[3]]), 1)
        events = [(sorted(e.keys), e.removed) for e in m.take_events()]
        self.assertEqual(events, [(sorted(first), False), (sorted([first[2], first[1]]), True)])

    def test_prefix_is_evicted_from_its_tail(self):
        # vLLM touches a request's keys in prefix order (the first most recent) and completes
        # its store with a set: the head of the prefix must outlive its tail.
        extra = self.extra("lru", cpu_bytes_to_use=6 * WORKER_BYTES)
        spec, m = self.manager(extra)
        w, _ = self.worker(extra)
        prefix = keys("p", 4)
        out = G.prepare_store(m, prefix)
        self.assertTrue(w.store(1, G.gpu([0, 1, 2, 3]), out.store_spec))
        w.wait({1})
        G.complete_store(m, prefix)  # a set: its order must not matter
        G.touch(m, prefix)
        G.prepare_store(m, keys("q", 4))  # 2 free rows: 2 evicted, from the tail
        self.assertEqual(G.hits(m, prefix), 2)

    def test_failed_store_is_reported_finished_and_never_readable(self):
        # TP2: rank 1's part names GPU block 999 (beyond its 32 blocks) and is refused, so the
        # job misses a vote and fails in the daemon for both ranks although rank 0 copied its
        # part. vLLM must still hear "finished, success" (it asserts); the keys never read.
        extra = self.extra("fail")
        _, m = self.manager(extra, tp=2, events=True)
        w0, _ = self.worker(extra, tp_rank=0, tp=2)
        w1, _ = self.worker(extra, tp_rank=1, tp=2)
        good, bad = keys("good", 2), keys("bad", 2)
        out_good = G.prepare_store(m, good)
        out_bad = G.prepare_store(m, bad)
        for w in (w0, w1):
            self.assertTrue(w.store(1, G.gpu([0, 1]), out_good.store_spec))
        self.assertTrue(w0.store(2, G.gpu([2, 3]), out_bad.store_spec))
        self.assertTrue(w1.store(2, G.gpu([2, 999]), out_bad.store_spec))
        for w in (w0, w1):
            results = self.done(w, 2)
            self.assertTrue(results[1].success)
            self.assertTrue(results[2].success)  # what vLLM's assert needs
        G.complete_store(m, good + bad)
        self.assertEqual(G.hits(m, good), 2)
        self.assertEqual(G.hits(m, bad), 0)
        self.assertEqual([(sorted(e.keys), e.removed) for e in m.take_events()],
                         [(sorted(good), False)])
        self.assertEqual(G.prepare_store(m, bad).keys_to_store, bad)  # rows were freed

    def test_refused_store_of_a_single_worker_is_released(self):
        _, m = self.manager(self.extra("fail1"))
        w, _ = self.worker(self.extra("fail1"))
        bad = keys("bad1", 2)
        out = G.prepare_store(m, bad)
        self.assertTrue(w.store(5, G.gpu([2, 999]), out.store_spec))
        self.assertTrue(self.done(w, 1)[5].success)
        G.complete_store(m, bad)  # what vLLM's connector does next
        self.assertEqual(G.hits(m, bad), 0)
        self.assertEqual(G.prepare_store(m, bad).keys_to_store, bad)

    def test_region_epoch_mismatch_store_is_never_readable(self):
        _, m = self.manager(self.extra("epoch"))
        w, _ = self.worker(self.extra("epoch"))
        k = keys("k", 1)
        out = G.prepare_store(m, k)
        out.store_spec.region_epoch ^= 1  # planned in another region
        self.assertTrue(w.store(3, G.gpu([5]), out.store_spec))
        self.assertTrue(self.done(w, 1)[3].success)
        G.complete_store(m, k)
        self.assertEqual(G.hits(m, k), 0)

    def test_commit_before_the_store_is_submitted(self):
        # vLLM 0.20 completes a preempted request's store (success=True) in
        # build_connector_meta, before any worker submitted it: the rows must stay pending
        # until the copy is done, then read byte-exact (DAEMON_API item 1).
        _, m = self.manager(self.extra("preempt"), events=True)
        w, kv = self.worker(self.extra("preempt"))
        k = keys("pre", 2)
        out = G.prepare_store(m, k)
        G.complete_store(m, k)
        self.assertEqual([G.lookup(m, x) for x in k], ["pending", "pending"])
        self.assertEqual(list(m.take_events()), [])  # not stored yet: no stored event
        self.assertTrue(w.store(7, G.gpu([3, 4]), out.store_spec))
        w.wait({7})
        self.assertTrue(self.done(w, 1)[7].success)
        deadline = time.monotonic() + 5
        while G.hits(m, k) < 2 and time.monotonic() < deadline:
            time.sleep(0.01)
        self.assertEqual(G.hits(m, k), 2)
        self.assertEqual([(sorted(e.keys), e.removed) for e in m.take_events()],
                         [(sorted(k), False)])  # announced once readable
        kv.clobber(3)
        kv.clobber(4)
        load = G.prepare_load(m, k)
        self.assertTrue(w.load(8, load, G.gpu([3, 4])))
        self.assertTrue(self.done(w, 1)[8].success)
        self.assertEqual((kv.block(3), kv.block(4)), (kv.golden[3], kv.golden[4]))

    def test_daemon_restart_engine_and_worker_come_back(self):
        daemon = self.Daemon()
        self.addCleanup(daemon.stop)
        extra = dict(self.extra("restarted"), socket_path=daemon.data_socket)
        _, m = self.manager(extra)
        w, kv = self.worker(extra)
        before = keys("r", 2)
        out = G.prepare_store(m, before)
        self.assertTrue(w.store(1, G.gpu([1, 2]), out.store_spec))
        self.assertTrue(self.done(w, 1)[1].success)
        G.complete_store(m, before)
        self.assertEqual(G.hits(m, before), 2)
        pinned = G.prepare_load(m, before)  # planned in the old region ...
        late = keys("late", 1)
        self.assertIsNotNone(G.prepare_store(m, late))
        daemon.restart()  # every region and session gone
        self.assertEqual(G.hits(m, before), 0)  # re-opened: an empty region, no exception
        sent = []
        index = m.core.scheduler
        for name in ("complete_load", "complete_store"):
            real = getattr(index, name)
            setattr(index, name, lambda ks, *a, _n=name, _r=real, **kw: sent.append(_n) or
                    _r(ks, *a, **kw))
        G.complete_load(m, before)  # ... and not completed in the new one
        G.complete_store(m, late)
        self.assertEqual(sent, [])
        self.assertEqual(len(pinned.block_ids), 2)
        after = keys("s", 2)
        out = G.prepare_store(m, after)
        self.assertEqual(out.keys_to_store, after)
        self.assertTrue(w.store(2, G.gpu([3, 4]), out.store_spec))
        self.assertTrue(self.done(w, 1)[2].success)
        G.complete_store(m, after)
        self.assertEqual(G.hits(m, after), 2)
        for b in (3, 4):
            kv.clobber(b)
        load = G.prepare_load(m, after)
        self.assertTrue(w.load(3, load, G.gpu([3, 4])))
        self.assertTrue(self.done(w, 1)[3].success)
        self.assertEqual((kv.block(3), kv.block(4)), (kv.golden[3], kv.golden[4]))
        self.assertEqual(self.load_errors(), set())

    def test_daemon_killed_mid_transfer_fails_them_and_comes_back(self):
        # SIGKILL with a store and a load in flight (rank 1 never votes for them): both are
        # reported to vLLM (the store as done, its keys never readable; the load's blocks as load
        # errors), the worker registers again by itself, the manager adopts the new region, and
        # a new round trip is byte-exact; nothing is raised into vLLM.
        daemon = self.Daemon()
        self.addCleanup(daemon.stop)
        extra = dict(self.extra("killed"), socket_path=daemon.data_socket)
        _, m = self.manager(extra, tp=2)
        w0, kv0 = self.worker(extra, tp_rank=0, tp=2)
        w1, kv1 = self.worker(extra, tp_rank=1, tp=2)
        stored = keys("k", 2)
        out = G.prepare_store(m, stored)
        for w in (w0, w1):
            self.assertTrue(w.store(1, G.gpu([1, 2]), out.store_spec))
        for w in (w0, w1):
            self.assertTrue(self.done(w, 1)[1].success)
        G.complete_store(m, stored)
        self.assertEqual(G.hits(m, stored), 2)
        old_epoch = m.core.region_epoch
        pending = keys("p", 2)
        out = G.prepare_store(m, pending)
        self.assertTrue(w0.store(2, G.gpu([3, 4]), out.store_spec))
        load = G.prepare_load(m, stored)
        self.assertTrue(w0.load(3, load, G.gpu([5, 6])))
        daemon.proc.kill()
        daemon.proc.wait()
        results = self.done(w0, 2)
        self.assertTrue(results[2].success)  # vLLM asserts on it; the keys stay unreadable
        self.assertTrue(results[3].success)
        self.assertEqual(self.load_errors(), {5, 6})  # vLLM recomputes them
        self.assertEqual(G.hits(m, stored), 0)  # the daemon is away: a miss, not an exception
        daemon.restart()
        G.complete_store(m, pending)  # planned in the old region: not completed in the new one
        G.complete_load(m, stored)
        self.assertEqual(G.hits(m, stored + pending), 0)
        self.assertNotEqual(m.core.region_epoch, old_epoch)
        after = keys("a", 2)  # the workers may still be registering: held, then sent
        out = G.prepare_store(m, after)
        self.assertEqual(out.keys_to_store, after)
        for w in (w0, w1):
            self.assertTrue(w.store(4, G.gpu([7, 8]), out.store_spec))
        # Both polled each step, as vLLM does (a held part is sent from get_finished).
        got = {0: {}, 1: {}}
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not (got[0] and got[1]):
            for i, w in enumerate((w0, w1)):
                got[i].update((r.job_id, r) for r in w.worker.get_finished())
            time.sleep(0.002)
        self.assertTrue(got[0][4].success and got[1][4].success, got)
        G.complete_store(m, after)
        self.assertEqual(G.hits(m, after), 2)
        load = G.prepare_load(m, after)
        for w, kv in ((w0, kv0), (w1, kv1)):
            for b in (7, 8):
                kv.clobber(b)
            self.assertTrue(w.load(5, load, G.gpu([7, 8])))
        for w, kv in ((w0, kv0), (w1, kv1)):
            self.assertTrue(self.done(w, 1)[5].success)
            self.assertEqual((kv.block(7), kv.block(8)), (kv.golden[7], kv.golden[8]))
        G.complete_load(m, after)
        self.assertEqual(self.load_errors(), set())

    def test_daemon_down_raises_nothing_into_vllm(self):
        daemon = self.Daemon()
        self.addCleanup(daemon.stop)
        extra = dict(self.extra("down"), socket_path=daemon.data_socket)
        _, m = self.manager(extra)
        w, kv = self.worker(extra)
        k = keys("d", 2)
        out = G.prepare_store(m, k)
        daemon._end()  # gone, and not back
        self.assertEqual(G.hits(m, k), 0)
        self.assertIsNone(G.prepare_store(m, keys("d2", 1)))
        G.touch(m, k)
        G.complete_store(m, k)
        self.assertTrue(w.store(1, G.gpu([1, 2]), out.store_spec))
        self.assertEqual(list(m.take_events()), [])

    def test_failed_load_goes_to_vllms_load_error_path(self):
        _, m = self.manager(self.extra("noload"))
        w, _ = self.worker(self.extra("noload"))
        load = G.prepare_load(m, keys("never-stored", 1))  # not raised into vLLM
        self.assertTrue(w.load(6, load, G.gpu([1])))
        self.assertTrue(self.done(w, 1)[6].success)  # vLLM asserts on success ...
        self.assertEqual(self.load_errors(), {1})    # ... and recomputes (or fails) block 1
        self.assertEqual(self.load_errors(), set())

    def test_wait_blocks_until_done_and_results_stay_reported(self):
        _, m = self.manager(self.extra("wait"))
        w, _ = self.worker(self.extra("wait"))
        k = keys("w", 3)
        out = G.prepare_store(m, k)
        self.assertTrue(w.store(4, G.gpu([3, 4, 5]), out.store_spec))
        w.wait({4})
        results = w.worker.get_finished()
        self.assertEqual([(r.job_id, r.success) for r in results], [(4, True)])
        G.complete_store(m, k)
        self.assertEqual(G.hits(m, k), 3)

    def test_job_ids_carry_the_scheduler_nonce(self):
        # Two schedulers of one engine (a restart) reuse vLLM job ids without a clash.
        for run in range(2):
            _, m = self.manager(self.extra("nonce"))
            w, _ = self.worker(self.extra("nonce"))
            k = keys("run%d" % run, 1)
            out = G.prepare_store(m, k)
            self.assertTrue(w.store(0, G.gpu([run]), out.store_spec))
            self.assertTrue(self.done(w, 1)[0].success)
            G.complete_store(m, k)
            self.assertEqual(G.hits(m, k), 1)
            w.shutdown()

    def test_tp2_two_workers_one_job(self):
        spec, m = self.manager(self.extra("tp2"), tp=2)
        self.assertEqual(m.core.scheduler.geometry.num_copies, 2)
        w0, kv0 = self.worker(self.extra("tp2"), tp_rank=0, tp=2)
        w1, kv1 = self.worker(self.extra("tp2"), tp_rank=1, tp=2)
        k = keys("t", 2)
        out = G.prepare_store(m, k)
        for w in (w0, w1):
            self.assertTrue(w.store(9, G.gpu([6, 8]), out.store_spec))
        self.assertTrue(self.done(w0, 1)[9].success)
        self.assertTrue(self.done(w1, 1)[9].success)
        G.complete_store(m, k)
        load = G.prepare_load(m, k)
        for w in (w0, w1):
            self.assertTrue(w.load(10, load, G.gpu([16, 17])))
        self.assertTrue(self.done(w0, 1)[10].success)
        self.assertTrue(self.done(w1, 1)[10].success)
        for kv in (kv0, kv1):  # each rank got its own slot back
            self.assertEqual(kv.block(16), kv.golden[6])
            self.assertEqual(kv.block(17), kv.golden[8])

    def test_mla_tp2_one_copy_written_by_rank0_loaded_by_both(self):
        # 0.20 to 0.25: the spec sees vLLM's model config (use_mla): one copy per row, every
        # rank submits its stores and rank 0's bytes are written. main 2026-08: vLLM's
        # replicated_layout, only rank 0 stores. 0.26: the spec's OffloadingConfig says nothing
        # of MLA and every rank stores: one copy per rank, each rank loads its own bytes.
        writer_only = G.writer_only_stores
        one_copy = writer_only or not G.by_config
        spec, m = self.manager(self.extra("mla"), tp=2, use_mla=True)
        self.assertEqual(m.core.scheduler.geometry.num_copies, 1 if one_copy else 2)
        self.assertEqual(spec.replicated_layout, writer_only)
        w0, kv0 = self.worker(self.extra("mla"), tp_rank=0, tp=2, use_mla=True)
        w1, kv1 = self.worker(self.extra("mla"), tp_rank=1, tp=2, use_mla=True)
        self.assertNotEqual(kv0.golden[6], kv1.golden[6])
        k = keys("m", 2)
        out = G.prepare_store(m, k)
        storers = (w0,) if writer_only else (w0, w1)
        for w in storers:
            self.assertTrue(w.store(3, G.gpu([6, 8]), out.store_spec))
        for w in storers:
            self.assertTrue(self.done(w, 1)[3].success)
        G.complete_store(m, k)
        self.assertEqual(G.hits(m, k), 2)
        load = G.prepare_load(m, k)
        for w in (w0, w1):
            self.assertTrue(w.load(4, load, G.gpu([16, 17])))
        self.assertTrue(self.done(w0, 1)[4].success)
        self.assertTrue(self.done(w1, 1)[4].success)
        for kv in (kv0, kv1):
            source = kv0 if one_copy else kv
            self.assertEqual(kv.block(16), source.golden[6])
            self.assertEqual(kv.block(17), source.golden[8])
        G.complete_load(m, k)
        self.assertEqual(self.load_errors(), set())

    def test_load_starting_inside_an_offloaded_block(self):
        # extra_config block_size = 2 GPU blocks; the GPU prefix cache holds the first GPU
        # block of the first offloaded block, so vLLM loads from its second half
        # (block_indices[0] = 1).
        extra = self.extra("bpr", block_size=2 * TOKENS_PER_BLOCK)
        spec, m = self.manager(extra)
        self.assertEqual(spec.engine_spec.blocks_per_row, 2)
        w, kv = self.worker(extra)
        k = keys("p", 2)
        out = G.prepare_store(m, k)
        self.assertTrue(w.store(1, G.gpu([2, 3, 10, 11]), out.store_spec))
        self.assertTrue(self.done(w, 1)[1].success)
        G.complete_store(m, k)
        load = G.prepare_load(m, k)
        self.assertTrue(w.load(2, load, G.gpu([20, 21, 22], first_index=1)))
        self.assertTrue(w.load(3, load, G.gpu([24, 25, 26, 27], first_index=0)))
        results = self.done(w, 2)
        self.assertTrue(results[2].success and results[3].success)
        self.assertEqual([kv.block(b) for b in (24, 25, 26, 27)],
                         [kv.golden[b] for b in (2, 3, 10, 11)])
        import kvoffload
        if hasattr(kvoffload.Worker, "submit_ranges"):
            self.assertEqual([kv.block(b) for b in (20, 21, 22)],
                             [kv.golden[b] for b in (3, 10, 11)])
            self.assertEqual(self.load_errors(), set())
        else:  # an older client: refused, never wrong — vLLM recomputes those blocks
            self.assertEqual(self.load_errors(), {20, 21, 22})

    def test_calls_beyond_65536_keys(self):
        daemon = self.Daemon(["--max_region_bytes=1GiB"])
        self.addCleanup(daemon.stop)
        n = 70000
        extra = dict(self.extra("big", cpu_bytes_to_use=n * 4096), socket_path=daemon.data_socket)
        _, m = self.manager(extra, layers=1, page=4096)
        w, _ = self.worker(extra, layers=1, page=4096,
                           kv_class=lambda: HostCanonicalKv(num_tensors=1, page=4096))
        k = keys("big", n)
        out = G.prepare_store(m, k)
        self.assertIsNotNone(out, "prepare_store of %d keys" % n)
        self.assertEqual(len(out.keys_to_store), n)  # no truncation
        self.assertTrue(w.store(1, G.gpu([i % BLOCKS for i in range(n)]), out.store_spec))
        w.wait({1})
        self.assertTrue(self.done(w, 1)[1].success)
        G.complete_store(m, k)
        G.touch(m, k)
        self.assertEqual(G.hits(m, k), n)

    def test_shutdown_closes_the_daemon_handle(self):
        _, m = self.manager(self.extra("shut"))
        scheduler = m.core.scheduler
        m.shutdown()
        self.assertIsNone(scheduler._handle)
        self.assertEqual(G.hits(m, keys("x", 1)), 0)  # after shutdown: no exception either
        m.shutdown()

    def test_plugin_classes_implement_every_method_vllm_calls(self):
        from kvoffload.vllm import KvoffloadManager, KvoffloadSpec
        import kvoffload.vllm as kv
        kv.KvoffloadSpec  # noqa: B018 — the adapter, assembled
        if G.handlers:
            from kvoffload.vllm.transfer_handlers import KvoffloadTransferHandler as transfer
        else:
            from kvoffload.vllm.transfer_worker import KvoffloadWorker as transfer
        manager_base, transfer_base, spec_base = G.vllm_classes()
        pairs = [(KvoffloadManager, manager_base), (transfer, transfer_base),
                 (KvoffloadSpec, spec_base)]
        for ours, theirs in pairs:
            self.assertTrue(issubclass(ours, theirs))
            for name, member in vars(theirs).items():
                if name.startswith("_") or not callable(member) or isinstance(
                        member, (classmethod, staticmethod)):
                    continue
                self.assertIn(name, vars(ours), "%s does not implement %s.%s" %
                              (ours.__name__, theirs.__name__, name))
                import inspect
                self.assertEqual(list(inspect.signature(getattr(ours, name)).parameters)[:len(
                    inspect.signature(member).parameters)],
                    list(inspect.signature(member).parameters),
                    "%s.%s signature" % (ours.__name__, name))


class StartupErrorTest(GenerationTest):
    """What an operator sees when the spec cannot start: one KvoffloadError with the fix."""

    def manager_error(self, extra, **kw):
        from kvoffload import KvoffloadError
        base = {"spec_name": "KvoffloadSpec", "spec_module_path": "kvoffload.vllm",
                "cpu_bytes_to_use": 1 << 20, "socket_path": self.daemon.data_socket}
        base.update(extra)
        with self.assertRaises(KvoffloadError) as cm:
            G.create(base, **kw).get_manager()
        return cm.exception

    def test_daemon_not_running(self):
        from kvoffload import StatusCode
        path = os.path.join(self.daemon.dir, "nowhere.sock")
        start = time.monotonic()
        e = self.manager_error({"engine_id": "start-1", "socket_path": path})
        self.assertLess(time.monotonic() - start, 1.0)
        self.assertEqual(e.code, StatusCode.UNAVAILABLE)
        self.assertIn("kvoffloadd is not running (no socket at %s)" % path, e.message)

    def test_budget_over_the_node_cap(self):
        from kvoffload import StatusCode
        e = self.manager_error({"engine_id": "start-2", "cpu_bytes_to_use": "1TiB"})
        self.assertEqual(e.code, StatusCode.RESOURCE_EXHAUSTED)
        self.assertIn("Fix: lower kv_connector_extra_config \"cpu_bytes_to_use\"", e.message)

    def test_topology_refused_names_the_rule(self):
        from kvoffload import Reason, StatusCode
        e = self.manager_error({"engine_id": "start-3"}, tp=2, pp=2)
        self.assertEqual((e.code, e.reason, e.metadata),
                         (StatusCode.FAILED_PRECONDITION, Reason.SPEC_RULE,
                          {"rule": "no_pipeline_parallel"}))
        self.assertIn("rule no_pipeline_parallel: ", e.message)  # for the operator
        self.assertIn("Fix: this topology is not supported", e.message)

    def test_ray_without_local_world_size(self):
        from kvoffload import Reason, StatusCode
        e = self.manager_error({"engine_id": "start-4"}, tp=2, executor="ray")
        self.assertEqual((e.code, e.reason, e.metadata),
                         (StatusCode.INVALID_ARGUMENT, Reason.SPEC_RULE,
                          {"rule": "launcher_requires_local_world_size"}))
        self.assertIn('"local_world_size"', e.message)

    # The fix is chosen by the refusal's code + reason, not by its words.
    def test_engine_id_taken_by_another_spec(self):
        from kvoffload import Reason, StatusCode
        G.create({"spec_name": "KvoffloadSpec", "spec_module_path": "kvoffload.vllm",
                  "cpu_bytes_to_use": 1 << 20, "socket_path": self.daemon.data_socket,
                  "engine_id": "start-5"}).get_manager()
        e = self.manager_error({"engine_id": "start-5", "cpu_bytes_to_use": 2 << 20})
        self.assertEqual((e.code, e.reason, e.metadata),
                         (StatusCode.FAILED_PRECONDITION, Reason.SPEC_MISMATCH,
                          {"engine": "start-5/0"}))
        self.assertIn("Fix: another process of engine 'start-5' registered a different spec",
                      e.message)

    def test_local_world_size_that_does_not_divide(self):
        from kvoffload import Reason, StatusCode
        e = self.manager_error({"engine_id": "start-6", "local_world_size": 3}, tp=2)
        self.assertEqual((e.code, e.reason, e.metadata),
                         (StatusCode.INVALID_ARGUMENT, Reason.SPEC_RULE,
                          {"rule": "local_world_size_divides_world_size"}))
        self.assertIn('Fix: set kv_connector_extra_config "local_world_size"', e.message)


class RequestCallsTest(GenerationTest):
    """The request-level calls of the releases that have them (0.23 and later)."""

    def setUp(self):
        if not G.requests:
            self.skipTest("this release has no on_new_request")

    def test_on_new_request_and_the_rest_of_the_manager(self):
        _, m = self.manager(self.extra("calls"))
        ctx = G.ctx()
        rc = m.on_new_request(ctx)
        self.assertEqual(rc.policy, G.base.OffloadPolicy.BLOCK_LEVEL)
        G.schedule_end(m)
        self.assertFalse(m.has_pending_work())
        self.assertIsNone(m.get_stats())
        m.on_request_finished(ctx)


class AdmissionTest(GenerationTest):
    """Admission never costs a hit a step, on every release (docs/vllm.md, admission)."""

    def test_a_hit_admits_in_the_first_attempt(self):
        if not G.requests:
            self.skipTest("the request calls of 0.23 and later")
        _, m = self.manager(self.extra("hot", cpu_bytes_to_use=64 * WORKER_BYTES))
        w, _ = self.worker(self.extra("hot", cpu_bytes_to_use=64 * WORKER_BYTES))
        k = keys("hot", 50)
        out = G.prepare_store(m, k)
        self.assertTrue(w.store(1, G.gpu([i % BLOCKS for i in range(50)]), out.store_spec))
        w.wait({1})
        G.complete_store(m, k)
        calls = []
        daemon_lookup = m.core.scheduler.lookup
        m.core.scheduler.lookup = lambda ks: calls.append(len(ks)) or daemon_lookup(ks)
        ctx = G.ctx()
        self.assertEqual(G.hits(m, k), 50)  # a request vLLM did not announce: exact at once
        calls.clear()
        m.on_new_request(ctx)
        # The first attempt answers every hit at once (never RETRY): one call a key, since
        # vLLM gives the request's keys only with the touch that follows its lookups.
        self.assertEqual(G.attempt(m, k, ctx), (50, False))
        self.assertEqual(calls, [1] * 50)
        calls.clear()
        self.assertEqual(G.attempt(m, k, ctx), (50, False))    # after the touch: 1 call
        self.assertEqual(calls, [50])
        self.assertEqual(G.attempt(m, k + keys("cold", 3), ctx)[0], 50)
        cold = G.ctx()
        m.on_new_request(cold)
        self.assertEqual(G.attempt(m, keys("cold", 3), cold), (0, False))  # a miss: no delay
        m.on_request_finished(ctx)
        self.assertNotIn(ctx.req_id, m.lookups._keys)

    def test_one_daemon_call_per_scan_once_the_keys_are_known(self):
        _, m = self.manager(self.extra("scan", cpu_bytes_to_use=64 * WORKER_BYTES))
        w, _ = self.worker(self.extra("scan", cpu_bytes_to_use=64 * WORKER_BYTES))
        k = keys("scan", 20)
        out = G.prepare_store(m, k[:12])
        self.assertTrue(w.store(1, G.gpu([i % BLOCKS for i in range(12)]), out.store_spec))
        w.wait({1})
        G.complete_store(m, k[:12])
        ctx = G.ctx()
        if G.ctx_calls:  # keys become known with the touch after the first attempt's lookups
            G.attempt(m, k, ctx)
        before = m.lookups.daemon_calls
        self.assertEqual(G.attempt(m, k, ctx), (12, False))  # 12 hits, the 13th a miss
        self.assertEqual(m.lookups.daemon_calls - before, 1)
        before = m.lookups.daemon_calls
        self.assertEqual(G.attempt(m, k, ctx), (12, False))  # the next step asks again
        self.assertEqual(m.lookups.daemon_calls - before, 1)

    def test_a_key_stored_after_a_scan_is_a_hit_in_the_next_one(self):
        # A scan's answers are never reused by the next scan (no stale miss for a new hit).
        _, m = self.manager(self.extra("fresh"))
        w, _ = self.worker(self.extra("fresh"))
        k = keys("fresh", 2)
        ctx = G.ctx()
        self.assertEqual(G.attempt(m, k, ctx), (0, False))
        self.assertEqual(G.attempt(m, k, ctx), (0, False))
        out = G.prepare_store(m, k)
        self.assertTrue(w.store(1, G.gpu([1, 2]), out.store_spec))
        w.wait({1})
        G.complete_store(m, k)
        self.assertEqual(G.attempt(m, k, ctx), (2, False))

    def test_own_store_answers_per_release(self):
        # A store prepared in this step: its job is submitted at the start of the next step's
        # execution, so a miss (recompute now) on every release. From the next step: 0.20
        # completes a store only when the storing request finishes, so still a miss; later
        # releases complete each job as it ends, so pending while its copy is in flight.
        _, m = self.manager(self.extra("own"))
        k = keys("own", 1)
        self.assertIsNotNone(G.prepare_store(m, k))
        self.assertEqual(G.lookup(m, k[0]), "miss")
        G.next_step(m)
        self.assertEqual(G.lookup(m, k[0]), G.own_store_pending)
        G.next_step(m)
        self.assertEqual(G.lookup(m, k[0]), G.own_store_pending)
        G.complete_store(m, k, success=False)
        self.assertEqual(G.lookup(m, k[0]), "miss")

    def test_a_request_that_excludes_cpu_tiers_misses(self):
        if not hasattr(G.abstract, "TierFilter"):
            self.skipTest("this release has no load_tier_filter")
        _, m = self.manager(self.extra("tiers"))
        w, _ = self.worker(self.extra("tiers"))
        k = keys("tier", 1)
        out = G.prepare_store(m, k)
        self.assertTrue(w.store(1, G.gpu([1]), out.store_spec))
        self.assertTrue(self.done(w, 1)[1].success)
        G.complete_store(m, k)
        b = G.base
        storage_only = b.TierFilter(matchers=(b.TierMatcher(medium=b.Medium.STORAGE),))
        self.assertEqual(G.lookup(m, k[0], G.ctx(load_tier_filter=storage_only)), "miss")
        self.assertEqual(G.lookup(m, k[0]), "hit")


class ResetCacheTest(GenerationTest):
    """reset_cache, on the releases that have it (0.22 and later)."""

    def setUp(self):
        if not hasattr(G.abstract.OffloadingManager, "reset_cache"):
            self.skipTest("this release has no reset_cache")

    def test_reset_cache_forgets_what_was_stored(self):
        _, m = self.manager(self.extra("reset"))
        w, _ = self.worker(self.extra("reset"))
        k = keys("z", 2)
        out = G.prepare_store(m, k)
        self.assertTrue(w.store(1, G.gpu([1, 2]), out.store_spec))
        self.assertTrue(self.done(w, 1)[1].success)
        G.complete_store(m, k)
        self.assertEqual(G.hits(m, k), 2)
        m.reset_cache()
        self.assertEqual(G.hits(m, k), 0)
        self.assertEqual(G.prepare_store(m, k).keys_to_store, k)

    def test_reset_cache_releases_the_stores_vllm_dropped(self):
        # vLLM's reset_cache discards its in-flight store jobs and never completes them: their
        # rows must not stay reserved.
        _, m = self.manager(self.extra("reset2", cpu_bytes_to_use=2 * WORKER_BYTES))
        self.assertIsNotNone(G.prepare_store(m, keys("a", 2)))
        self.assertIsNone(G.prepare_store(m, keys("b", 2)))  # both rows being written
        m.reset_cache()
        self.assertEqual(G.prepare_store(m, keys("b", 2)).keys_to_store, keys("b", 2))


class HandlersTest(GenerationTest):
    """The releases whose transfers go through handlers (0.20 to 0.24)."""

    def setUp(self):
        if not G.handlers:
            self.skipTest("this release takes an OffloadingWorker")

    def test_transfer_types_route_through_vllms_worker(self):
        _, m = self.manager(self.extra("route"))
        w, _ = self.worker(self.extra("route"))
        out = G.prepare_store(m, keys("route", 1))
        self.assertEqual(out.store_spec.medium(), "KVOFFLOAD")
        self.assertTrue(w.store(1, G.gpu([1]), out.store_spec))
        self.assertEqual(self.done(w, 1)[1].transfer_type, ("GPU", "KVOFFLOAD"))


def suite():
    loader = unittest.defaultTestLoader
    s = unittest.TestSuite()
    s.addTests(loader.loadTestsFromTestCase(GenerationTest))
    s.addTests(loader.loadTestsFromNames(
        ["%s.%s" % (cls.__name__, n) for cls in (StartupErrorTest, RequestCallsTest, AdmissionTest,
                                                 ResetCacheTest, HandlersTest)
         for n in loader.getTestCaseNames(cls) if n in vars(cls)],
        sys.modules[__name__]))
    return s


def test_names():
    """Every test this suite runs, as 'Class.method'."""
    out = []

    def walk(s):
        for t in s:
            if isinstance(t, unittest.TestSuite):
                walk(t)
            else:
                out.append("%s.%s" % (type(t).__name__, t._testMethodName))
    walk(suite())
    return out


class _Recorder(unittest.TextTestResult):
    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        self.results = {}

    def _put(self, test, outcome, detail=""):
        self.results["%s.%s" % (type(test).__name__, test._testMethodName)] = {
            "outcome": outcome, "detail": detail}

    def addSuccess(self, test):
        super().addSuccess(test)
        self._put(test, "passed")

    def addFailure(self, test, err):
        super().addFailure(test, err)
        self._put(test, "failure", self.failures[-1][1])

    def addError(self, test, err):
        super().addError(test, err)
        self._put(test, "error", self.errors[-1][1])

    def addSkip(self, test, reason):
        super().addSkip(test, reason)
        self._put(test, "skipped", reason)


def load_tests(loader, tests, pattern):
    """Test discovery (run_tests.py) finds nothing here: these tests need a generation's double
    first on sys.path, so test_vllm_spec.py runs this file once per generation in a process of
    its own."""
    return unittest.TestSuite()


def main(argv):
    if len(argv) < 2:
        raise SystemExit(__doc__)
    setup_generation(argv[1])
    runner = unittest.TextTestRunner(verbosity=2, resultclass=_Recorder)
    result = runner.run(suite())
    if len(argv) > 2:
        with open(argv[2], "w") as f:
            json.dump(result.results, f)
    return 0 if result.wasSuccessful() else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
