"""kvoffload.vllm (the OffloadingSpec for vLLM's OffloadingConnector) against the real daemon on
its host backend, driven through a test double of the pinned vLLM interface (vllm_double/: vLLM
0.20.2's vllm.v1.kv_offload classes and the config fields the spec reads). No vLLM, no GPU: the
workers' canonical KV tensors are kvoffload.HostTensor views of shm.

Also the client's deadlines and its fail-fast on a missing daemon (Scheduler.open,
Worker.connect_host), which the spec's start-up errors build on.
"""

import importlib
import os
import socket
import subprocess
import sys
import tempfile
import time
import types
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
DOUBLE = os.path.join(HERE, "vllm_double")

import kvoffload  # noqa: E402
from kvoffload import (EngineSpec, HostAllocation, KvoffloadError, Scheduler,  # noqa: E402
                       StatusCode, Worker)
from test_host_backend import Daemon  # noqa: E402

LAYERS = 4
HALF = 2048                      # one layer's K (or V) bytes per block
PAGE = 2 * HALF                  # one layer's K+V bytes per block (kv_cache_spec.page_size_bytes)
WORKER_BYTES = LAYERS * PAGE
BLOCKS = 32
TOKENS_PER_BLOCK = 16


def vllm_modules():
    """The test double's modules (imported with vllm_double/ on sys.path)."""
    if DOUBLE not in sys.path:
        sys.path.insert(0, DOUBLE)
    return (importlib.import_module("vllm.config"),
            importlib.import_module("vllm.v1.kv_cache_interface"),
            importlib.import_module("vllm.v1.kv_offload.spec"),
            importlib.import_module("vllm.v1.kv_offload.factory"),
            importlib.import_module("vllm.v1.kv_offload.mediums"),
            importlib.import_module("vllm.v1.kv_offload.worker.worker"),
            importlib.import_module("vllm.distributed.parallel_state"))


def make_configs(extra, tp=1, pp=1, nnodes=1, executor="mp", use_mla=False, layers=LAYERS,
                 page=PAGE, groups=1, dp_rank=0, events=False):
    """(vllm_config, kv_cache_config) as vLLM builds them for this topology."""
    cfg, kvi = vllm_modules()[:2]
    vllm_config = cfg.VllmConfig(
        parallel_config=cfg.ParallelConfig(tensor_parallel_size=tp, pipeline_parallel_size=pp,
                                           nnodes=nnodes, distributed_executor_backend=executor,
                                           data_parallel_rank=dp_rank),
        cache_config=cfg.CacheConfig(block_size=TOKENS_PER_BLOCK),
        model_config=cfg.ModelConfig(use_mla=use_mla),
        kv_transfer_config=cfg.KVTransferConfig(kv_connector_extra_config=dict(extra)),
        kv_events_config=cfg.KVEventsConfig(enable_kv_cache_events=events))
    kv_cache_config = kvi.KVCacheConfig(
        num_blocks=BLOCKS,
        kv_cache_tensors=[kvi.KVCacheTensor(size=BLOCKS * page, shared_by=["layer.%d" % i])
                          for i in range(layers)],
        kv_cache_groups=[kvi.KVCacheGroupSpec(["layer.%d" % i for i in range(layers)],
                                              kvi.FullAttentionSpec(TOKENS_PER_BLOCK, page))
                         for _ in range(groups)])
    return vllm_config, kv_cache_config


class HostCanonicalKv:
    """A worker's KV cache as vLLM canonicalises FlashAttention's [2, num_blocks, ...] layers:
    a K and a V tensor per layer, each (num_blocks, HALF) with a padded stride, in shm filled
    with random bytes; canonical() is the CanonicalKVCaches get_handlers receives."""

    STRIDE = HALF + 128

    def __init__(self):
        self.alloc = HostAllocation(2 * LAYERS * self.STRIDE * BLOCKS + 4096)
        self.alloc.buf[:] = os.urandom(self.alloc.nbytes)
        self.offsets = [4096 + i * self.STRIDE * BLOCKS for i in range(2 * LAYERS)]
        self.golden = [self.block(b) for b in range(BLOCKS)]

    def canonical(self):
        spec_mod = vllm_modules()[2]
        tensors = [spec_mod.CanonicalKVCacheTensor(
            self.alloc.tensor(off, BLOCKS, self.STRIDE, HALF), HALF) for off in self.offsets]
        refs = [[spec_mod.CanonicalKVCacheRef(i, HALF) for i in range(len(tensors))]]
        return spec_mod.CanonicalKVCaches(tensors=tensors, group_data_refs=refs)

    def block(self, b):
        return b"".join(bytes(self.alloc.buf[off + b * self.STRIDE:off + b * self.STRIDE + HALF])
                        for off in self.offsets)

    def clobber(self, b):
        for off in self.offsets:
            self.alloc.buf[off + b * self.STRIDE:off + b * self.STRIDE + HALF] = b"\x5a" * HALF

    def close(self):
        self.alloc.close()


def finished_results(worker, want, timeout=30):
    """Polls an OffloadingWorker's get_finished until `want` results came; returns them by job
    id (fewer when the timeout passed first)."""
    out = {}
    deadline = time.monotonic() + timeout
    while len(out) < want and time.monotonic() < deadline:
        for r in worker.get_finished():
            out[r.job_id] = r
        time.sleep(0.002)
    return out


def keys(prefix, n):
    return [("%s-%d" % (prefix, i)).encode() for i in range(n)]


class ImportTest(unittest.TestCase):

    def test_import_needs_no_vllm(self):
        code = ("import sys, kvoffload.vllm as kv\n"
                "assert 'vllm' not in sys.modules, 'imported vllm'\n"
                "print(kv.PINNED_VLLM_VERSION, kv.MEDIUM)\n"
                "try:\n"
                "    kv.KvoffloadSpec\n"
                "except ImportError as e:\n"
                "    print('ImportError', e)\n")
        env = dict(os.environ, PYTHONPATH=os.path.dirname(os.path.dirname(kvoffload.__file__)))
        out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                             text=True, timeout=60)
        self.assertEqual(out.returncode, 0, out.stderr)
        lines = out.stdout.splitlines()
        self.assertEqual(lines[0], "0.20.2 KVOFFLOAD")
        self.assertTrue(lines[1].startswith("ImportError "), lines)
        self.assertIn("pinned: vLLM 0.20.2", lines[1])


class EngineSpecTest(unittest.TestCase):
    """EngineSpec derivation from vllm_config (no daemon)."""

    def spec(self, extra=None, **kw):
        from kvoffload.vllm import config
        extra = dict({"cpu_bytes_to_use": 1 << 30}, **(extra or {}))
        vllm_config, kv_cache_config = make_configs(extra, **kw)
        return config.engine_spec(vllm_config, kv_cache_config)

    def test_single_gpu(self):
        s = self.spec({"engine_id": "llama"}, executor=None)
        self.assertEqual(s, EngineSpec(engine_id="llama", world_size=1, local_world_size=1,
                                       tp=1, executor="uni", attention="mha", num_layers=LAYERS,
                                       page_bytes=PAGE, worker_bytes_per_block=WORKER_BYTES,
                                       budget_bytes=1 << 30))

    def test_engine_id_defaults_to_the_transfer_config_engine_id(self):
        from kvoffload.vllm import config
        vllm_config, kv_cache_config = make_configs({"cpu_bytes_to_use": 1 << 30})
        s = config.engine_spec(vllm_config, kv_cache_config)
        self.assertEqual(s.engine_id, vllm_config.kv_transfer_config.engine_id)

    def test_tp_mla_dp(self):
        s = self.spec({"budget_bytes": "64GiB"}, tp=8, use_mla=True, dp_rank=3)
        self.assertEqual((s.world_size, s.local_world_size, s.tp, s.dp_rank, s.attention,
                          s.executor, s.budget_bytes), (8, 8, 8, 3, "mla", "mp", 64 << 30))

    def test_replica_across_nodes_is_refused(self):
        for kw in ({"tp": 8, "nnodes": 2}, {"tp": 4, "executor": "ray"}):
            extra = {"local_world_size": 2} if kw.get("executor") == "ray" else {}
            with self.assertRaises(KvoffloadError) as cm:
                self.spec(extra, **kw)
            self.assertEqual(cm.exception.code, StatusCode.FAILED_PRECONDITION)
            self.assertIn("spans nodes", cm.exception.message)

    def test_ray_and_external_launcher(self):
        self.assertEqual(self.spec(tp=2, executor="ray").local_world_size, 0)  # daemon decides
        s = self.spec({"local_world_size": 4}, tp=4, executor="external_launcher")
        self.assertEqual((s.executor, s.local_world_size), ("external", 4))

    def test_budget_forms(self):
        for value, want in ((123456789, 123456789), ("500GB", 500 * 10**9), ("1e9", 10**9),
                            ("2 MiB", 2 << 20)):
            self.assertEqual(self.spec({"cpu_bytes_to_use": value}).budget_bytes, want)
        for value in ("lots", 0, -5, "1.5", True):
            with self.assertRaises(KvoffloadError) as cm:
                self.spec({"cpu_bytes_to_use": value})
            self.assertEqual(cm.exception.code, StatusCode.INVALID_ARGUMENT)
            self.assertIn("cpu_bytes_to_use", cm.exception.message)

    def test_missing_budget_names_the_key(self):
        from kvoffload.vllm import config
        vllm_config, kv_cache_config = make_configs({})
        with self.assertRaises(KvoffloadError) as cm:
            config.engine_spec(vllm_config, kv_cache_config)
        self.assertEqual(cm.exception.code, StatusCode.INVALID_ARGUMENT)
        self.assertIn('"cpu_bytes_to_use"', cm.exception.message)

    def test_hybrid_models_are_refused(self):
        with self.assertRaises(KvoffloadError) as cm:
            self.spec(groups=2)
        self.assertEqual(cm.exception.code, StatusCode.FAILED_PRECONDITION)
        self.assertIn("2 KV cache groups", cm.exception.message)


class DeadlineTest(unittest.TestCase):
    """The client fails at once, with the path and the fix, when no daemon listens; every call
    has a deadline."""

    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="kvo-dl-", dir="/tmp")
        self.addCleanup(subprocess.run, ["rm", "-rf", self.dir])
        self.spec = EngineSpec(engine_id="dl", num_layers=1, page_bytes=4096,
                               budget_bytes=1 << 20)

    def assert_fast_unavailable(self, call, path, what):
        start = time.monotonic()
        with self.assertRaises(KvoffloadError) as cm:
            call()
        self.assertLess(time.monotonic() - start, 1.0)
        self.assertEqual(cm.exception.code, StatusCode.UNAVAILABLE)
        self.assertIn("kvoffloadd is not running (%s %s)" % (what, path), cm.exception.message)
        self.assertIn("systemctl start kvoffloadd", cm.exception.message)

    def test_no_socket(self):
        path = os.path.join(self.dir, "kvoffload.sock")
        self.assert_fast_unavailable(lambda: Scheduler.open(path, self.spec), path,
                                     "no socket at")
        self.assert_fast_unavailable(lambda: Worker.connect_host(path, self.spec, 0, []), path,
                                     "no socket at")

    def test_stale_socket(self):
        path = os.path.join(self.dir, "stale.sock")
        s = socket.socket(socket.AF_UNIX)
        s.bind(path)  # bound, never listening: what a killed daemon leaves behind
        self.addCleanup(s.close)
        self.assert_fast_unavailable(lambda: Scheduler.open(path, self.spec), path,
                                     "nothing listens on")

    def test_open_deadline_against_a_silent_daemon(self):
        path = os.path.join(self.dir, "silent.sock")
        s = socket.socket(socket.AF_UNIX)
        s.bind(path)
        s.listen(8)  # accepts connections, never answers
        self.addCleanup(s.close)
        start = time.monotonic()
        with self.assertRaises(KvoffloadError) as cm:
            Scheduler.open(path, self.spec, open_timeout_s=0.3)
        self.assertLess(time.monotonic() - start, 5.0)
        self.assertEqual(cm.exception.code, StatusCode.DEADLINE_EXCEEDED)
        self.assertIn(path, cm.exception.message)
        self.assertIn("300ms", cm.exception.message)
        start = time.monotonic()
        with self.assertRaises(KvoffloadError) as cm:
            Worker.connect_host(path, self.spec, 0, [], open_timeout_s=0.3)
        self.assertLess(time.monotonic() - start, 5.0)
        self.assertEqual(cm.exception.code, StatusCode.DEADLINE_EXCEEDED)
        self.assertIn(path, cm.exception.message)

    def test_permission_denied_names_the_group(self):
        if os.geteuid() != 0:
            self.skipTest("needs root to run a client as another user")
        daemon = Daemon()
        self.addCleanup(daemon.stop)
        # The library is loaded as root (it lives under root's bazel cache), then the process
        # becomes nobody and opens the daemon's socket, in its 0700 runtime directory.
        code = ("import os, kvoffload\n"
                "kvoffload.version()\n"
                "os.setgid(65534); os.setuid(65534)\n"
                "try:\n"
                "    kvoffload.Scheduler.open(%r, kvoffload.EngineSpec(page_bytes=4096, "
                "budget_bytes=1 << 20))\n"
                "except kvoffload.KvoffloadError as e:\n"
                "    print(e.name, e.message)\n" % daemon.data_socket)
        env = dict(os.environ, PYTHONPATH=os.path.dirname(os.path.dirname(kvoffload.__file__)))
        out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                             text=True, timeout=60)
        self.assertEqual(out.returncode, 0, out.stderr)
        self.assertTrue(out.stdout.startswith("PERMISSION_DENIED permission denied on %s" %
                                              daemon.data_socket), out.stdout)
        self.assertIn("usermod -aG kvoffload", out.stdout)

    def test_timeouts_must_be_positive(self):
        path = os.path.join(self.dir, "kvoffload.sock")
        for kw in ({"open_timeout_s": 0}, {"call_timeout_s": -1}, {"call_timeout_s": "x"}):
            with self.assertRaises((ValueError, TypeError)):
                Scheduler.open(path, self.spec, **kw)


class SpecTest(unittest.TestCase):
    """KvoffloadSpec end to end: the factory builds it from the operator's extra_config, the
    manager runs on the daemon's index, the handlers move bytes through the host backend."""

    @classmethod
    def setUpClass(cls):
        cls.daemon = Daemon(["--job_timeout_s=2"])  # a job missing a vote fails in 2 s
        vllm_modules()

    @classmethod
    def tearDownClass(cls):
        cls.daemon.stop()

    def extra(self, engine_id, **kw):
        extra = {"spec_name": "KvoffloadSpec", "spec_module_path": "kvoffload.vllm",
                 "cpu_bytes_to_use": 1 << 20, "engine_id": engine_id,
                 "socket_path": self.daemon.data_socket}
        extra.update(kw)
        return extra

    def create(self, extra, **kw):
        factory = vllm_modules()[3]
        vllm_config, kv_cache_config = make_configs(extra, **kw)
        return factory.OffloadingSpecFactory.create_spec(vllm_config, kv_cache_config)

    def worker(self, spec, tp_rank=0, tp=1):
        """(OffloadingWorker with the spec's handlers, HostCanonicalKv) of one rank."""
        worker_mod, ps = vllm_modules()[5:7]
        kv = HostCanonicalKv()
        self.addCleanup(kv.close)
        ps.RANKS = (tp, tp_rank, 0)
        try:
            offloading = worker_mod.OffloadingWorker()
            for src, dst, handler in spec.get_handlers(kv.canonical()):
                offloading.register_handler(src, dst, handler)
        finally:
            ps.RANKS = None
        self.addCleanup(offloading.shutdown)
        return offloading, kv

    def gpu(self, blocks):
        return vllm_modules()[4].GPULoadStoreSpec(blocks, group_sizes=(len(blocks),))

    def finished(self, worker, want):
        out = finished_results(worker, want)
        self.assertEqual(len(out), want, out)
        return out

    def test_factory_builds_the_spec_from_the_readme_line(self):
        import json
        from kvoffload.vllm import KvoffloadSpec
        with open(os.path.join(os.path.dirname(os.path.dirname(HERE)), "README.md")) as f:
            readme = f.read()
        line = [l for l in readme.splitlines() if "--kv-transfer-config" in l and "{" in l][0]
        config = json.loads(line[line.index("'") + 1:line.rindex("'")])
        self.assertEqual(config["kv_connector"], "OffloadingConnector")
        extra = config["kv_connector_extra_config"]
        extra.update(engine_id="readme", socket_path=self.daemon.data_socket,
                     cpu_bytes_to_use=1 << 20)
        spec = self.create(extra)
        self.assertIsInstance(spec, KvoffloadSpec)
        self.assertEqual(spec.get_manager().lookup([b"x"]), 0)

    def test_store_lookup_load_byte_exact(self):
        spec = self.create(self.extra("vllm-roundtrip"), events=True)
        manager = spec.get_manager()
        worker, kv = self.worker(spec)
        hashes = keys("h", 5)
        self.assertEqual(manager.lookup(hashes), 0)

        out = manager.prepare_store(hashes)
        self.assertEqual(out.block_hashes_to_store, hashes)
        self.assertEqual(out.block_hashes_evicted, [])
        self.assertEqual(out.store_spec.medium(), "KVOFFLOAD")
        rows = list(out.store_spec.block_ids)
        self.assertEqual(len(set(rows)), 5)
        self.assertEqual(manager.lookup(hashes), 0)  # being written: not a hit yet

        gpu_blocks = [7, 1, 30, 12, 4]
        self.assertTrue(worker.transfer_async(11, (self.gpu(gpu_blocks), out.store_spec)))
        r = self.finished(worker, 1)[11]
        self.assertTrue(r.success)
        self.assertEqual((r.transfer_size, r.transfer_type), (5 * WORKER_BYTES,
                                                              ("GPU", "KVOFFLOAD")))
        manager.complete_store(hashes, success=True)
        self.assertEqual(manager.lookup(hashes), 5)
        self.assertEqual(manager.lookup(hashes[:2] + [b"missing"] + hashes[2:]), 2)
        events = list(manager.take_events())
        self.assertEqual([(e.block_hashes, e.removed, e.medium, e.block_size) for e in events],
                         [(hashes, False, "KVOFFLOAD", TOKENS_PER_BLOCK)])
        self.assertEqual(list(manager.take_events()), [])

        # A second store of the same prefix plus one new block stores only the new block.
        again = manager.prepare_store(hashes + [b"h-5"])
        self.assertEqual(again.block_hashes_to_store, [b"h-5"])
        manager.complete_store([b"h-5"], success=False)

        for b in gpu_blocks:
            kv.clobber(b)
        load_spec = manager.prepare_load(hashes[1:4])
        self.assertEqual(list(load_spec.block_ids), rows[1:4])
        dst = [20, 21, 22]
        self.assertTrue(worker.transfer_async(12, (load_spec, self.gpu(dst))))
        r = self.finished(worker, 1)[12]
        self.assertTrue(r.success)
        self.assertEqual(r.transfer_type, ("KVOFFLOAD", "GPU"))
        for src, d in zip(gpu_blocks[1:4], dst):
            self.assertEqual(kv.block(d), kv.golden[src], "GPU block %d" % d)
        manager.complete_load(hashes[1:4])
        manager.touch(hashes)

    def test_eviction_reports_hashes_and_exhaustion_returns_none(self):
        spec = self.create(self.extra("vllm-evict", cpu_bytes_to_use=4 * WORKER_BYTES),
                           events=True)
        manager = spec.get_manager()
        self.assertEqual(spec._scheduler.geometry.num_rows, 4)
        first = keys("e", 4)
        out = manager.prepare_store(first)
        self.assertIsNone(manager.prepare_store([b"e-4"]))  # all 4 rows are being written
        manager.complete_store(first)  # e-0 the most recent, e-3 the least
        manager.touch([first[3]])  # e-3 the most recent: e-2 and e-1 go first
        out = manager.prepare_store([b"e-4", b"e-5"])
        self.assertEqual(out.block_hashes_to_store, [b"e-4", b"e-5"])
        self.assertEqual(out.block_hashes_evicted, [b"e-2", b"e-1"])
        self.assertIsNone(manager.prepare_store(keys("f", 5)))  # more than the region holds
        self.assertEqual(manager.lookup(first), 1)
        self.assertEqual(manager.lookup([first[3]]), 1)
        events = list(manager.take_events())
        self.assertEqual([(e.block_hashes, e.removed) for e in events],
                         [(first, False), ([b"e-2", b"e-1"], True)])

    def test_failed_store_is_never_reported_as_success(self):
        # TP2: rank 1's part names GPU block 999 (beyond its 32 blocks) and is refused, so the
        # job misses a vote and fails in the daemon (--job_timeout_s) for both ranks although
        # rank 0 copied its part.
        extra = self.extra("vllm-fail")
        manager = self.create(extra, tp=2, events=True).get_manager()
        w0, _ = self.worker(self.create(extra, tp=2), tp_rank=0, tp=2)
        w1, _ = self.worker(self.create(extra, tp=2), tp_rank=1, tp=2)
        good, bad = keys("good", 2), keys("bad", 2)
        out_good = manager.prepare_store(good)
        out_bad = manager.prepare_store(bad)
        for w in (w0, w1):
            self.assertTrue(w.transfer_async(1, (self.gpu([0, 1]), out_good.store_spec)))
        self.assertTrue(w0.transfer_async(2, (self.gpu([2, 3]), out_bad.store_spec)))
        self.assertTrue(w1.transfer_async(2, (self.gpu([2, 999]), out_bad.store_spec)))
        for w in (w0, w1):
            results = self.finished(w, 2)
            self.assertTrue(results[1].success)
            self.assertFalse(results[2].success)
        # vLLM's connector completes both with success=True (it does not look at results).
        manager.complete_store(good + bad)
        self.assertEqual(manager.lookup(good), 2)
        self.assertEqual(manager.lookup(bad), 0)
        self.assertEqual([(e.block_hashes, e.removed) for e in manager.take_events()],
                         [(good, False)])
        # The failed keys' rows were freed: they can be stored again.
        self.assertEqual(manager.prepare_store(bad).block_hashes_to_store, bad)

    def test_refused_store_of_a_single_worker_is_released(self):
        # TP1: the only part is refused (GPU block 999), so no job exists in the daemon to mark
        # the rows failed; the worker completes the keys with success=False before reporting.
        manager = self.create(self.extra("vllm-fail1")).get_manager()
        worker, _ = self.worker(self.create(self.extra("vllm-fail1")))
        bad = keys("bad1", 2)
        out = manager.prepare_store(bad)
        self.assertTrue(worker.transfer_async(5, (self.gpu([2, 999]), out.store_spec)))
        self.assertFalse(self.finished(worker, 1)[5].success)
        manager.complete_store(bad)  # what vLLM's connector does next
        self.assertEqual(manager.lookup(bad), 0)
        self.assertEqual(manager.prepare_store(bad).block_hashes_to_store, bad)

    def test_region_epoch_mismatch_fails_the_job(self):
        spec = self.create(self.extra("vllm-epoch"))
        manager = spec.get_manager()
        worker, _ = self.worker(spec)
        out = manager.prepare_store([b"k"])
        out.store_spec.region_epoch ^= 1  # planned in another region
        self.assertTrue(worker.transfer_async(3, (self.gpu([5]), out.store_spec)))
        self.assertFalse(self.finished(worker, 1)[3].success)

    def test_daemon_restart_engine_and_worker_come_back(self):
        daemon = Daemon()  # restarted here: not the class's daemon
        self.addCleanup(daemon.stop)
        extra = dict(self.extra("vllm-restarted"), socket_path=daemon.data_socket)
        manager = self.create(extra).get_manager()
        worker, kv = self.worker(self.create(extra))
        before = keys("r", 2)
        out = manager.prepare_store(before)
        self.assertTrue(worker.transfer_async(1, (self.gpu([1, 2]), out.store_spec)))
        self.assertTrue(self.finished(worker, 1)[1].success)
        manager.complete_store(before)
        self.assertEqual(manager.lookup(before), 2)

        daemon.restart()  # every region and session gone
        self.assertEqual(manager.lookup(before), 0)  # re-opened: an empty region
        after = keys("s", 2)
        out = manager.prepare_store(after)
        self.assertEqual(out.block_hashes_to_store, after)
        # The worker's session ended with the daemon: the next transfer registers it again.
        self.assertTrue(worker.transfer_async(2, (self.gpu([3, 4]), out.store_spec)))
        self.assertTrue(self.finished(worker, 1)[2].success)
        manager.complete_store(after)
        self.assertEqual(manager.lookup(after), 2)
        for b in (3, 4):
            kv.clobber(b)
        load = manager.prepare_load(after)
        self.assertTrue(worker.transfer_async(3, (load, self.gpu([3, 4]))))
        self.assertTrue(self.finished(worker, 1)[3].success)
        self.assertEqual(kv.block(3), kv.golden[3])
        self.assertEqual(kv.block(4), kv.golden[4])

    def test_failed_prepare_load_becomes_a_failed_load(self):
        spec = self.create(self.extra("vllm-noload"))
        manager = spec.get_manager()
        worker, _ = self.worker(spec)
        load = manager.prepare_load([b"never-stored"])  # NOT_FOUND: not raised into vLLM
        self.assertEqual(list(load.block_ids), [])
        self.assertTrue(worker.transfer_async(6, (load, self.gpu([1]))))
        self.assertFalse(self.finished(worker, 1)[6].success)

    def test_wait_blocks_until_done_and_results_stay_reported(self):
        spec = self.create(self.extra("vllm-wait"))
        manager = spec.get_manager()
        worker, _ = self.worker(spec)
        out = manager.prepare_store(keys("w", 3))
        self.assertTrue(worker.transfer_async(4, (self.gpu([3, 4, 5]), out.store_spec)))
        worker.wait({4})
        results = worker.get_finished()
        self.assertEqual([(r.job_id, r.success) for r in results], [(4, True)])
        manager.complete_store(keys("w", 3))
        self.assertEqual(manager.lookup(keys("w", 3)), 3)

    def test_job_ids_carry_the_scheduler_nonce(self):
        # Two schedulers of one engine (a restart) reuse vLLM job ids without a clash.
        extra = self.extra("vllm-restart")
        for run in range(2):
            spec = self.create(extra)
            manager = spec.get_manager()
            worker, kv = self.worker(spec)
            out = manager.prepare_store([b"run-%d" % run])
            self.assertTrue(worker.transfer_async(0, (self.gpu([run]), out.store_spec)))
            self.assertTrue(self.finished(worker, 1)[0].success)
            manager.complete_store([b"run-%d" % run])
            self.assertEqual(manager.lookup([b"run-%d" % run]), 1)
            worker.shutdown()  # the engine stops; the next run registers anew

    def test_tp2_two_workers_one_job(self):
        spec_sched = self.create(self.extra("vllm-tp2"), tp=2)
        manager = spec_sched.get_manager()
        self.assertEqual(spec_sched._scheduler.geometry.num_copies, 2)
        w0, kv0 = self.worker(self.create(self.extra("vllm-tp2"), tp=2), tp_rank=0, tp=2)
        w1, kv1 = self.worker(self.create(self.extra("vllm-tp2"), tp=2), tp_rank=1, tp=2)
        out = manager.prepare_store(keys("t", 2))
        for w in (w0, w1):
            self.assertTrue(w.transfer_async(9, (self.gpu([6, 8]), out.store_spec)))
        self.assertTrue(self.finished(w0, 1)[9].success)
        self.assertTrue(self.finished(w1, 1)[9].success)
        manager.complete_store(keys("t", 2))
        load = manager.prepare_load(keys("t", 2))
        for w in (w0, w1):
            self.assertTrue(w.transfer_async(10, (load, self.gpu([16, 17]))))
        self.assertTrue(self.finished(w0, 1)[10].success)
        self.assertTrue(self.finished(w1, 1)[10].success)
        for kv in (kv0, kv1):  # each rank got its own slot back
            self.assertEqual(kv.block(16), kv.golden[6])
            self.assertEqual(kv.block(17), kv.golden[8])

    def test_mla_tp2_one_copy_written_by_rank0_loaded_by_both(self):
        # Replicated MLA: one copy per row; both ranks submit the store (as vLLM's workers do),
        # only mp_rank 0's bytes are written, and both ranks load those same bytes.
        spec_sched = self.create(self.extra("vllm-mla"), tp=2, use_mla=True)
        manager = spec_sched.get_manager()
        self.assertEqual(spec_sched._scheduler.geometry.num_copies, 1)
        w0, kv0 = self.worker(self.create(self.extra("vllm-mla"), tp=2, use_mla=True),
                              tp_rank=0, tp=2)
        w1, kv1 = self.worker(self.create(self.extra("vllm-mla"), tp=2, use_mla=True),
                              tp_rank=1, tp=2)
        self.assertNotEqual(kv0.golden[6], kv1.golden[6])
        hashes = keys("m", 2)
        out = manager.prepare_store(hashes)
        for w in (w0, w1):
            self.assertTrue(w.transfer_async(3, (self.gpu([6, 8]), out.store_spec)))
        self.assertTrue(self.finished(w0, 1)[3].success)
        self.assertTrue(self.finished(w1, 1)[3].success)
        manager.complete_store(hashes)
        self.assertEqual(manager.lookup(hashes), 2)
        load = manager.prepare_load(hashes)
        for w in (w0, w1):
            self.assertTrue(w.transfer_async(4, (load, self.gpu([16, 17]))))
        self.assertTrue(self.finished(w0, 1)[4].success)
        self.assertTrue(self.finished(w1, 1)[4].success)
        for kv in (kv0, kv1):
            self.assertEqual(kv.block(16), kv0.golden[6])
            self.assertEqual(kv.block(17), kv0.golden[8])
        manager.complete_load(hashes)

    def test_partial_row_load_is_refused_not_wrong(self):
        spec = self.create(self.extra("vllm-bpr", block_size=2 * TOKENS_PER_BLOCK))
        self.assertEqual(spec.engine_spec.blocks_per_row, 2)
        manager = spec.get_manager()
        worker, kv = self.worker(spec)
        out = manager.prepare_store([b"p"])
        self.assertTrue(worker.transfer_async(1, (self.gpu([2, 3]), out.store_spec)))
        self.assertTrue(self.finished(worker, 1)[1].success)
        manager.complete_store([b"p"])
        load = manager.prepare_load([b"p"])
        # Half a row: submitted as nothing, reported failed (vLLM asserts transfer_async).
        self.assertTrue(worker.transfer_async(2, (load, self.gpu([9]))))
        self.assertTrue(worker.transfer_async(3, (load, self.gpu([9, 10]))))
        results = self.finished(worker, 2)
        self.assertFalse(results[2].success)
        self.assertTrue(results[3].success)
        self.assertEqual(kv.block(9), kv.golden[2])
        self.assertEqual(kv.block(10), kv.golden[3])


class FakeCudaWorker:
    """A kvoffload.Worker stand-in for the CUDA path's bookkeeping (no GPU here): records event
    records and submits, finishes jobs when told."""

    def __init__(self, num_events):
        self.info = types.SimpleNamespace(num_events=num_events, blocks_per_row=1)
        self.calls = []  # ("record", slot) / ("submit", daemon_id, event)
        self.done = {}  # daemon id -> FinishedJob, handed out by wait/poll
        self.alive = True
        self.fail_submit = False

    def record_event(self, index, stream):
        self.calls.append(("record", index))

    def check_session(self):
        pass

    def submit_store(self, job_id, blocks, rows, event_index, region_epoch):
        if self.fail_submit:
            raise KvoffloadError(StatusCode.UNAVAILABLE, "the session with kvoffloadd has ended")
        self.calls.append(("submit", job_id, event_index))
        self.done[job_id] = kvoffload.FinishedJob(job_id, True, 0, "", 4096 * len(rows))

    def poll(self):
        return []  # jobs end only through wait() here

    def wait(self, job_id, timeout_s=None):
        return self.done.pop(job_id)

    def close(self):
        pass


class CudaEventTest(unittest.TestCase):
    """The CUDA path's event pool: one event per job in flight, recorded before the submit,
    reused only after its job ended (the oldest job is waited for when all are in use)."""

    def test_events_are_reused_only_after_their_job_ended(self):
        vllm_modules()
        from kvoffload.vllm import KvoffloadLoadStoreSpec, handlers
        worker = FakeCudaWorker(num_events=2)
        released = []
        session = handlers._Session(worker, handlers._CudaEvents(worker), 5.0,
                                    open_index=lambda: types.SimpleNamespace(
                                        complete_store=lambda k, success: released.append(k)))
        gpu = vllm_modules()[4].GPULoadStoreSpec
        for job in range(3):
            rows = KvoffloadLoadStoreSpec([job], job_nonce=7, keys=[b"k%d" % job])
            self.assertTrue(session.store_handler.transfer_async(job, (gpu([job], [1]), rows)))
        self.assertEqual(worker.calls, [("record", 0), ("submit", 7 << 32 | 0, 0),
                                        ("record", 1), ("submit", 7 << 32 | 1, 1),
                                        ("record", 0), ("submit", 7 << 32 | 2, 0)])
        self.assertEqual([(r.job_id, r.success) for r in session.store_handler.get_finished()],
                         [(0, True)])  # waited for to free its event
        worker.fail_submit = True
        rows = KvoffloadLoadStoreSpec([3], job_nonce=7, keys=[b"k3"])
        self.assertTrue(session.store_handler.transfer_async(3, (gpu([3], [1]), rows)))
        # No event is free: job 1 (the oldest) is waited for; then the submit fails.
        self.assertEqual([(r.job_id, r.success) for r in session.store_handler.get_finished()],
                         [(1, True), (3, False)])
        self.assertEqual(released, [[b"k3"]])  # its keys completed with success=False
        session.store_handler.wait({2})
        self.assertEqual([(r.job_id, r.success) for r in session.store_handler.get_finished()],
                         [(2, True)])
        self.assertEqual(sorted(session._events._free), [0, 1])


class StartupErrorTest(unittest.TestCase):
    """What an operator sees when the spec cannot start: one KvoffloadError with the fix."""

    @classmethod
    def setUpClass(cls):
        cls.daemon = Daemon()  # --max_region_bytes=256MiB
        vllm_modules()

    @classmethod
    def tearDownClass(cls):
        cls.daemon.stop()

    def manager_error(self, extra, **kw):
        factory = vllm_modules()[3]
        base = {"spec_name": "KvoffloadSpec", "spec_module_path": "kvoffload.vllm",
                "cpu_bytes_to_use": 1 << 20, "socket_path": self.daemon.data_socket}
        base.update(extra)
        vllm_config, kv_cache_config = make_configs(base, **kw)
        spec = factory.OffloadingSpecFactory.create_spec(vllm_config, kv_cache_config)
        with self.assertRaises(KvoffloadError) as cm:
            spec.get_manager()
        return cm.exception

    def test_daemon_not_running(self):
        path = os.path.join(self.daemon.dir, "nowhere.sock")
        start = time.monotonic()
        e = self.manager_error({"engine_id": "start-1", "socket_path": path})
        self.assertLess(time.monotonic() - start, 1.0)
        self.assertEqual(e.code, StatusCode.UNAVAILABLE)
        self.assertIn("kvoffloadd is not running (no socket at %s)" % path, e.message)

    def test_budget_over_the_node_cap(self):
        e = self.manager_error({"engine_id": "start-2", "cpu_bytes_to_use": "1TiB"})
        self.assertEqual(e.code, StatusCode.RESOURCE_EXHAUSTED)
        self.assertIn("Fix: lower kv_connector_extra_config \"cpu_bytes_to_use\"", e.message)
        self.assertIn("--max_region_bytes", e.message)

    def test_topology_refused_names_the_rule(self):
        e = self.manager_error({"engine_id": "start-3"}, tp=2, pp=2)
        self.assertEqual(e.code, StatusCode.FAILED_PRECONDITION)  # unsupported, not invalid
        self.assertIn("rule ", e.message)
        self.assertIn("Fix: ", e.message)

    def test_ray_without_local_world_size(self):
        e = self.manager_error({"engine_id": "start-4"}, tp=2, executor="ray")
        self.assertEqual(e.code, StatusCode.INVALID_ARGUMENT)
        self.assertIn("rule ", e.message)
        self.assertIn('"local_world_size"', e.message)


if __name__ == "__main__":
    unittest.main()
