"""kvoffload.vllm (the OffloadingSpec for vLLM's OffloadingConnector), for every supported vLLM
generation, against the real daemon on its host backend. No vLLM, no GPU.

* Gen_<double>: test_vllm_generations.py run once per supported release's double, each in its
  own process with that double (vllm_double/<double>/vllm) first on sys.path; one test case
  here per test there.
* SignatureDriftTest: every double against the signatures recorded from the real releases
  (vllm_signatures.json), the CI check that a double has not drifted.
* The generation-independent parts: the import without vLLM and the ImportError of an
  unsupported vLLM, the EngineSpec derivation of both generations, the client's deadlines.
"""

import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import types
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))

import kvoffload  # noqa: E402
from kvoffload import EngineSpec, KvoffloadError, Scheduler, StatusCode, Worker  # noqa: E402
from test_host_backend import Daemon  # noqa: E402
import test_vllm_generations as suite  # noqa: E402
import vllm_signatures  # noqa: E402
from kvoffload.vllm import SUPPORTED_VLLM as SUPPORTED  # noqa: E402

LAYERS, PAGE, BLOCKS, TOKENS_PER_BLOCK = (suite.LAYERS, suite.PAGE, suite.BLOCKS,
                                          suite.TOKENS_PER_BLOCK)
WORKER_BYTES = LAYERS * PAGE


def _env():
    path = [os.path.dirname(os.path.dirname(kvoffload.__file__)), HERE]
    if os.environ.get("PYTHONPATH"):
        path.append(os.environ["PYTHONPATH"])
    return dict(os.environ, PYTHONPATH=os.pathsep.join(path), PYTHONDONTWRITEBYTECODE="1")


def _have_numpy():
    try:
        import numpy  # noqa: F401
        return True
    except ImportError:
        return False


# The suite's runs, one per double, started together on first use (each has its own daemon);
# KVOFFLOAD_VLLM_JOBS of them at a time (default 3).
_RUNS = {}


def _run_suite(generation):
    """(results by test name, output) of test_vllm_generations.py for one double."""
    fd, path = tempfile.mkstemp(prefix="kvo-gen-", suffix=".json")
    os.close(fd)
    try:
        out = subprocess.run([sys.executable, os.path.join(HERE, "test_vllm_generations.py"),
                              generation, path], env=_env(), capture_output=True, text=True,
                             timeout=1200)
        with open(path) as f:
            results = json.load(f) if os.path.getsize(path) else {}
        return results, out.stdout + out.stderr
    finally:
        os.unlink(path)


def _suite_results(generation):
    if not _RUNS:
        import concurrent.futures
        pool = concurrent.futures.ThreadPoolExecutor(
            max_workers=int(os.environ.get("KVOFFLOAD_VLLM_JOBS", "3")))
        for g in suite.GENERATIONS:
            _RUNS[g] = pool.submit(_run_suite, g)
        pool.shutdown(wait=False)
    return _RUNS[generation].result()


def _generation_class(generation):
    """A TestCase with one test per test of test_vllm_generations, all answered by one run of
    the suite (in its own process) for `generation`."""

    class Gen(unittest.TestCase):
        results = None
        output = ""

        @classmethod
        def setUpClass(cls):
            if not _have_numpy():
                raise unittest.SkipTest("numpy is missing (vLLM's block ids are numpy arrays; "
                                        "deploy/install_deps.sh installs python3-numpy)")
            cls.results, cls.output = _suite_results(generation)

        def check(self, name):
            r = (self.results or {}).get(name)
            if r is None:
                self.fail("%s did not run for %s:\n%s" % (name, generation, self.output[-4000:]))
            if r["outcome"] == "skipped":
                self.skipTest(r["detail"])
            if r["outcome"] != "passed":
                self.fail("%s %s: %s" % (generation, r["outcome"], r["detail"]))

    for name in suite.test_names():
        def test(self, name=name):
            self.check(name)
        setattr(Gen, "test_" + name.replace(".", "__"), test)
    Gen.__name__ = Gen.__qualname__ = "Gen_" + generation
    return Gen


for _generation in suite.GENERATIONS:
    globals()["Gen_" + _generation] = _generation_class(_generation)
del _generation


class ImportTest(unittest.TestCase):

    def run_python(self, code, extra_path=()):
        env = _env()
        env["PYTHONPATH"] = os.pathsep.join(list(extra_path) + [env["PYTHONPATH"]])
        out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                             text=True, timeout=60)
        self.assertEqual(out.returncode, 0, out.stderr)
        return out.stdout.splitlines()

    def import_error(self, vllm_dir):
        """The lines printed by importing KvoffloadSpec with vllm_dir first on sys.path."""
        return self.run_python(
            "import kvoffload.vllm as kv\n"
            "try:\n"
            "    kv.KvoffloadSpec\n"
            "except ImportError as e:\n"
            "    print('ImportError', e)\n", extra_path=[vllm_dir])

    def test_import_needs_no_vllm(self):
        lines = self.run_python(
            "import sys, kvoffload.vllm as kv\n"
            "import kvoffload.vllm.config, kvoffload.vllm.core\n"
            "assert 'vllm' not in sys.modules, 'imported vllm'\n"
            "print(list(kv.SUPPORTED_VLLM))\n"
            "try:\n"
            "    kv.KvoffloadSpec\n"
            "except ImportError as e:\n"
            "    print('ImportError', e)\n")
        self.assertEqual(lines[0], str(list(SUPPORTED)))
        self.assertTrue(lines[1].startswith("ImportError kvoffload.vllm needs vLLM (supported: "
                                            "vLLM 0.20.2, 0.21.0, 0.22.0, 0.22.1, 0.23.0, "
                                            "0.24.0, 0.25.0, 0.25.1, 0.26.0, main 017e9f4 "
                                            "(2026-08-17), main 7cfb97e (2026-08-20))"), lines)

    def test_an_unsupported_vllm_gets_an_import_error_naming_the_supported_ones(self):
        d = tempfile.mkdtemp(prefix="kvo-vllm-", dir="/tmp")
        self.addCleanup(subprocess.run, ["rm", "-rf", d])
        os.makedirs(os.path.join(d, "vllm", "v1", "kv_offload"))
        for p in ("vllm", "vllm/v1", "vllm/v1/kv_offload"):
            with open(os.path.join(d, p, "__init__.py"), "w") as f:
                f.write("__version__ = '0.11.0'\n" if p == "vllm" else "")
        lines = self.import_error(d)
        self.assertEqual(lines, [
            "ImportError kvoffload.vllm supports vLLM %s (docs/vllm.md); this vLLM (0.11.0) fails "
            "the capability probe 'modules' (vllm.v1.kv_offload.base, else abstract/mediums/"
            "spec/worker.worker): neither vllm.v1.kv_offload.base nor vllm.v1.kv_offload."
            "{abstract, mediums, spec, worker.worker}" % ", ".join(SUPPORTED)])

    def test_the_chunk_renamed_interface_gets_an_import_error_at_start(self):
        """vLLM after the block-to-chunk rename (OffloadPolicy.CHUNK_LEVEL, no BLOCK_LEVEL):
        refused at import, not an AttributeError in on_new_request later."""
        d = tempfile.mkdtemp(prefix="kvo-vllm-", dir="/tmp")
        self.addCleanup(subprocess.run, ["rm", "-rf", d])
        lines = self.broken_double("main_2026_08", "vllm/v1/kv_offload/base.py",
                                   "BLOCK_LEVEL", "CHUNK_LEVEL")
        self.assertEqual(lines[0].split(": ", 1)[1], "OffloadPolicy has no BLOCK_LEVEL (members "
                         "CHUNK_LEVEL, REQUEST_LEVEL): vLLM after the block-to-chunk rename "
                         "(CHUNK_LEVEL) is not supported")
        self.assertIn("fails the capability probe 'request_policy'", lines[0])

    def broken_double(self, double, path, old, new):
        """The ImportError lines of a copy of `double` with `old` replaced by `new` in path."""
        d = tempfile.mkdtemp(prefix="kvo-vllm-", dir="/tmp")
        self.addCleanup(subprocess.run, ["rm", "-rf", d])
        shutil.copytree(os.path.join(HERE, "vllm_double", double, "vllm"),
                        os.path.join(d, "vllm"))
        full = os.path.join(d, path)
        with open(full) as f:
            text = f.read()
        self.assertIn(old, text)
        with open(full, "w") as f:
            f.write(text.replace(old, new))
        lines = self.import_error(d)
        self.assertTrue(lines and lines[0].startswith(
            "ImportError kvoffload.vllm supports vLLM %s (docs/vllm.md); this vLLM (" %
            ", ".join(SUPPORTED)), lines)
        return lines

    def test_every_release_with_a_broken_interface_names_the_failed_probe(self):
        """One broken capability per release's double: the ImportError at start names the row
        and what is missing, never an AttributeError later."""
        cases = {
            "v0_20_2": ("vllm/v1/kv_offload/abstract.py", "def touch(self, keys",
                        "def touch(self, keys, extra", "request_context"),
            "v0_21_0": ("vllm/v1/kv_offload/worker/worker.py", "def transfer_async(self, job_id: "
                        "int, spec: TransferSpec) -> bool:\n        pass",
                        "def transfer_async(self, job_id: int) -> bool:\n        pass",
                        "transfers"),
            "v0_22_0": ("vllm/v1/kv_offload/base.py", "    evicted_keys: list[OffloadKey]\n",
                        "", "store_output"),
            "v0_23_0": ("vllm/v1/kv_offload/base.py", "    def on_schedule_end(self) -> None:",
                        "    def on_schedule_end(self, a, b) -> None:", "schedule_end"),
            "v0_24_0": ("vllm/v1/kv_offload/base.py", "    removed: bool\n",
                        "    removed: bool\n    tier: int = 0\n", "event"),
            "v0_25_0": ("vllm/v1/kv_offload/base.py", "    HIT_PENDING = auto()\n", "",
                        "lookup_result"),
            "v0_26_0": ("vllm/v1/kv_offload/base.py", "def __init__(self, config: "
                        "OffloadingConfig):", "def __init__(self, config: OffloadingConfig, "
                        "other=None):", "spec_constructor"),
            "main_2026_08": ("vllm/v1/kv_offload/base.py", "    transfer_time: float | None = "
                             "None\n", "", "transfer_result"),
        }
        self.assertEqual(sorted(cases), sorted(suite.GENERATIONS))
        for double, (path, old, new, row) in cases.items():
            with self.subTest(double=double):
                lines = self.broken_double(double, path, old, new)
                self.assertIn("fails the capability probe %r" % row, lines[0])



def _v020_configs(extra, tp=1, pp=1, nnodes=1, executor="mp", use_mla=False, layers=LAYERS,
                  page=PAGE, groups=1, dp_rank=0):
    """vLLM 0.20's (vllm_config, kv_cache_config) as plain objects (attributes as upstream)."""
    ns = types.SimpleNamespace
    vllm_config = ns(
        parallel_config=ns(tensor_parallel_size=tp, pipeline_parallel_size=pp,
                           prefill_context_parallel_size=1, decode_context_parallel_size=1,
                           world_size=tp * pp, data_parallel_rank=dp_rank, nnodes=nnodes,
                           distributed_executor_backend=executor, rank=0),
        model_config=ns(use_mla=use_mla),
        kv_transfer_config=ns(engine_id="engine-uuid", kv_connector_extra_config=dict(extra)))
    kv_cache_config = ns(
        num_blocks=BLOCKS,
        kv_cache_tensors=[ns(size=BLOCKS * page, shared_by=["l%d" % i]) for i in range(layers)],
        kv_cache_groups=[ns(layer_names=["l%d" % i for i in range(layers)],
                            kv_cache_spec=ns(block_size=TOKENS_PER_BLOCK, page_size_bytes=page))
                         for _ in range(groups)])
    return vllm_config, kv_cache_config


def _offloading_config(extra, tp=1, pp=1, replicated=False, layers=LAYERS, page=PAGE, groups=1,
                       dp=0, bpc=1, engine_id="engine-uuid"):
    """The 2026-08 generation's OffloadingConfig as a plain object (fields as upstream)."""
    ns = types.SimpleNamespace
    return ns(groups=tuple(ns(tokens_per_block=TOKENS_PER_BLOCK,
                              layer_names=tuple("l%d" % i for i in range(layers)))
                           for _ in range(groups)),
              worker_kv_bytes_per_block=layers * page, enable_kv_cache_events=False,
              extra_config=dict(extra), engine_id=engine_id,
              cache=ns(tokens_per_hash=TOKENS_PER_BLOCK, blocks_per_chunk=bpc),
              parallel=ns(rank=0, world_size=tp * pp, tp_size=tp, pp_size=pp, pcp_size=1,
                          dcp_size=1, data_parallel_index=dp, data_parallel_size=1,
                          data_parallel_rank_local=None, is_parallelism_agnostic=False),
              replicated_layout=replicated, canonical_layout=False)


class SignatureDriftTest(unittest.TestCase):
    """Each supported release's double has exactly the recorded classes, method parameter
    lists, dataclass fields and enum members (vllm_signatures.json, recorded from the real
    sources by `vllm_signatures.py record`)."""

    def test_every_release_is_recorded_and_has_a_double(self):
        recorded = vllm_signatures.load()
        self.assertEqual(sorted(recorded), sorted(vllm_signatures.DOUBLE_OF))
        self.assertEqual(len(recorded), len(SUPPORTED))

    def test_no_double_drifts(self):
        recorded = vllm_signatures.load()
        for release in sorted(recorded):
            with self.subTest(release=release):
                self.assertEqual(vllm_signatures.drift(release, recorded), [])

    def test_a_drifted_double_is_found(self):
        recorded = vllm_signatures.load()
        d = tempfile.mkdtemp(prefix="kvo-drift-", dir="/tmp")
        self.addCleanup(shutil.rmtree, d)
        shutil.copytree(os.path.join(HERE, "vllm_double", "v0_25_0"), os.path.join(d, "v0_25_0"))
        path = os.path.join(d, "v0_25_0", "vllm", "v1", "kv_offload", "base.py")
        with open(path) as f:
            text = f.read()
        with open(path, "w") as f:
            f.write(text.replace("def wait(self, job_ids: set[int])", "def wait(self, ids)")
                    .replace("    RETRY = auto()\n", ""))
        old = vllm_signatures.DOUBLES
        vllm_signatures.DOUBLES = d
        try:
            problems = vllm_signatures.drift("v0_25_0", recorded)
        finally:
            vllm_signatures.DOUBLES = old
        self.assertEqual(problems, [
            "v0_25_0: vllm/v1/kv_offload/base.py.LookupResult members ['MISS', 'HIT', "
            "'HIT_PENDING'], recorded ['MISS', 'HIT', 'HIT_PENDING', 'RETRY']",
            "v0_25_0: vllm/v1/kv_offload/base.py.OffloadingWorker.wait(ids), recorded (job_ids)"])


class EngineSpecTest(unittest.TestCase):
    """EngineSpec derivation from each generation's configs (no daemon, no vLLM)."""

    def spec(self, extra=None, **kw):
        from kvoffload.vllm import config
        extra = dict({"cpu_bytes_to_use": 1 << 30}, **(extra or {}))
        return config.engine_spec(*_v020_configs(extra, **kw))

    def spec26(self, extra=None, **kw):
        from kvoffload.vllm import config
        extra = dict({"cpu_bytes_to_use": 1 << 30}, **(extra or {}))
        return config.engine_spec_from_offloading_config(_offloading_config(extra, **kw),
                                                         kw.get("replicated", False))

    def test_single_gpu(self):
        want = EngineSpec(engine_id="llama", world_size=1, local_world_size=1, tp=1,
                          executor="uni", attention="mha", num_layers=LAYERS, page_bytes=PAGE,
                          worker_bytes_per_block=WORKER_BYTES, budget_bytes=1 << 30)
        self.assertEqual(self.spec({"engine_id": "llama"}, executor=None), want)
        self.assertEqual(self.spec26({"engine_id": "llama"}), want)

    def test_engine_id_defaults_to_vllms(self):
        self.assertEqual(self.spec().engine_id, "engine-uuid")
        self.assertEqual(self.spec26().engine_id, "engine-uuid")

    def test_tp_mla_dp(self):
        s = self.spec({"budget_bytes": "64GiB"}, tp=8, use_mla=True, dp_rank=3)
        self.assertEqual((s.world_size, s.local_world_size, s.tp, s.dp_rank, s.attention,
                          s.executor, s.budget_bytes), (8, 8, 8, 3, "mla", "mp", 64 << 30))
        s = self.spec26({"budget_bytes": "64GiB"}, tp=8, replicated=True, dp=3)
        self.assertEqual((s.world_size, s.local_world_size, s.tp, s.dp_rank, s.attention,
                          s.executor, s.page_bytes * s.num_layers),
                         (8, 8, 8, 3, "mla", "mp", WORKER_BYTES))
        # 2026-08 without vLLM's replicated layout: every rank stores its own copy
        self.assertEqual(self.spec26(tp=8).attention, "mha")

    def test_blocks_per_row(self):
        self.assertEqual(self.spec26(bpc=4).blocks_per_row, 4)

    def test_replica_across_nodes_is_refused(self):
        for kw in ({"tp": 8, "nnodes": 2}, {"tp": 4, "executor": "ray"}):
            extra = {"local_world_size": 2} if kw.get("executor") == "ray" else {}
            with self.assertRaises(KvoffloadError) as cm:
                self.spec(extra, **kw)
            self.assertEqual(cm.exception.code, StatusCode.FAILED_PRECONDITION)
            self.assertIn("spans nodes", cm.exception.message)
        with self.assertRaises(KvoffloadError) as cm:
            self.spec26({"local_world_size": 4}, tp=8)
        self.assertIn("spans nodes", cm.exception.message)

    def test_ray_and_external_launcher(self):
        self.assertEqual(self.spec(tp=2, executor="ray").local_world_size, 0)  # daemon decides
        s = self.spec({"local_world_size": 4}, tp=4, executor="external_launcher")
        self.assertEqual((s.executor, s.local_world_size), ("external", 4))
        s = self.spec26({"executor": "ray", "local_world_size": 2}, tp=2)
        self.assertEqual((s.executor, s.local_world_size), ("ray", 2))

    def test_budget_forms(self):
        for value, want in ((123456789, 123456789), ("500GB", 500 * 10**9), ("1e9", 10**9),
                            ("2 MiB", 2 << 20)):
            self.assertEqual(self.spec({"cpu_bytes_to_use": value}).budget_bytes, want)
            self.assertEqual(self.spec26({"cpu_bytes_to_use": value}).budget_bytes, want)
        for value in ("lots", 0, -5, "1.5", True):
            for make in (self.spec, self.spec26):
                with self.assertRaises(KvoffloadError) as cm:
                    make({"cpu_bytes_to_use": value})
                self.assertEqual(cm.exception.code, StatusCode.INVALID_ARGUMENT)
                self.assertIn("cpu_bytes_to_use", cm.exception.message)

    def test_missing_budget_names_the_key(self):
        from kvoffload.vllm import config
        for call in (lambda: config.engine_spec(*_v020_configs({})),
                     lambda: config.engine_spec_from_offloading_config(_offloading_config({}))):
            with self.assertRaises(KvoffloadError) as cm:
                call()
            self.assertEqual(cm.exception.code, StatusCode.INVALID_ARGUMENT)
            self.assertIn('"cpu_bytes_to_use"', cm.exception.message)

    def test_hybrid_models_are_refused(self):
        for make in (self.spec, self.spec26):
            with self.assertRaises(KvoffloadError) as cm:
                make(groups=2)
            self.assertEqual(cm.exception.code, StatusCode.FAILED_PRECONDITION)
            self.assertIn("2 KV cache groups", cm.exception.message)


class ReplicatedLayoutCheckTest(unittest.TestCase):
    """vLLM's replicated (MLA) choice and the daemon's layout must agree where it matters."""

    def test_vllm_replicated_but_the_daemon_per_rank_fails_at_start(self):
        from kvoffload.vllm import gen_common
        spec = EngineSpec(engine_id="mla")
        with self.assertRaises(KvoffloadError) as cm:
            gen_common.check_replicated(False, True, spec, "worker mp_rank 1")
        self.assertEqual(cm.exception.code, StatusCode.FAILED_PRECONDITION)
        self.assertIn("only rank 0 stores", cm.exception.message)
        gen_common.check_replicated(True, True, spec, "x")    # agree
        gen_common.check_replicated(False, False, spec, "x")  # agree
        gen_common.check_replicated(True, False, spec, "x")   # every rank stores: fine

    def test_the_2026_08_spec_makes_the_daemon_replicate_exactly_when_vllm_does(self):
        from kvoffload.vllm import config
        s = config.engine_spec_from_offloading_config(
            _offloading_config({"cpu_bytes_to_use": 1 << 30}, tp=2, replicated=True), True)
        self.assertEqual((s.attention, s.page_bytes * s.num_layers, s.worker_bytes_per_block,
                          s.local_world_size), ("mla", WORKER_BYTES, WORKER_BYTES, 2))


class PoolSpecTest(unittest.TestCase):
    """extra_config "pool" and "model_identity" (pools): data-parallel replicas of one engine
    share one pool by one key; the identity names what changes KV bytes."""

    def spec(self, extra, **kw):
        from kvoffload.vllm import config
        vllm_config, kv_cache_config = _v020_configs(dict({"cpu_bytes_to_use": 1 << 30}, **extra),
                                                     **kw)
        vllm_config.model_config.model = "Qwen/Qwen3-8B"
        vllm_config.model_config.revision = "main"
        vllm_config.model_config.dtype = "bfloat16"
        vllm_config.cache_config = types.SimpleNamespace(cache_dtype="auto")
        return config.engine_spec(vllm_config, kv_cache_config)

    def test_unset_is_private(self):
        s = self.spec({})
        self.assertEqual((s.pool, s.model_identity), ("", ""))
        self.assertEqual(self.spec({"pool": False}).pool, "")

    def test_true_shares_by_engine_id_across_dp_ranks(self):
        a = self.spec({"pool": True, "engine_id": "qwen"}, dp_rank=0)
        b = self.spec({"pool": "true", "engine_id": "qwen"}, dp_rank=5)
        self.assertEqual((a.pool, b.pool), ("qwen", "qwen"))
        self.assertEqual(a.model_identity, b.model_identity)
        for part in ("model=Qwen/Qwen3-8B", "revision=main", "dtype=bfloat16",
                     "kv_cache_dtype=auto", "block_size=%d" % TOKENS_PER_BLOCK, "attention=mha",
                     "layers=%d" % LAYERS, "page_bytes=%d" % PAGE):
            self.assertIn(part, a.model_identity)

    def test_what_changes_kv_bytes_changes_the_identity(self):
        base = self.spec({"pool": "p"}).model_identity
        self.assertNotEqual(self.spec({"pool": "p"}, page=2 * PAGE).model_identity, base)
        self.assertNotEqual(self.spec({"pool": "p"}, use_mla=True).model_identity, base)
        self.assertEqual(self.spec({"pool": "p", "model_identity": "mine"}).model_identity, "mine")

    def test_bad_names_and_the_2026_08_generation_needs_an_identity(self):
        from kvoffload.vllm import config
        with self.assertRaises(KvoffloadError) as cm:
            self.spec({"pool": "bad name"})
        self.assertEqual(cm.exception.code, StatusCode.INVALID_ARGUMENT)
        extra = {"cpu_bytes_to_use": 1 << 30, "pool": True}
        with self.assertRaises(KvoffloadError) as cm:
            config.engine_spec_from_offloading_config(_offloading_config(extra), False)
        self.assertIn("model_identity", cm.exception.message)
        extra["model_identity"] = "Qwen/Qwen3-8B@main bf16"
        s = config.engine_spec_from_offloading_config(_offloading_config(extra, dp=2), False)
        self.assertEqual((s.pool, s.model_identity, s.dp_rank),
                         ("engine-uuid", "Qwen/Qwen3-8B@main bf16", 2))


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
        out = subprocess.run([sys.executable, "-c", code], env=_env(), capture_output=True,
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


if __name__ == "__main__":
    unittest.main()
