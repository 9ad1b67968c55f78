"""The kvoffload package against the real kvoffloadd on its host backend.

Each test class starts the daemon binary ($KVOFFLOAD_DAEMON, else the repository's
bazel-bin/daemon/kvoffloadd) with --backend=host on a fresh /tmp runtime dir, and drives it
through the package: "GPU" tensors are sealed memfds made here (kvoffload.HostAllocation).
"""

import multiprocessing
import os
import shutil
import subprocess
import sys
import tempfile
import time
import unittest

import kvoffload
from kvoffload import (EngineSpec, HostAllocation, KeyState, KvoffloadError, Reason, Scheduler,
                       StatusCode, Worker)

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
LAYERS = 4
LAYER_PAGE = 8192  # one layer's K and V bytes per block
HALF = LAYER_PAGE // 2
WORKER_BYTES_PER_BLOCK = LAYERS * LAYER_PAGE
BLOCKS = 32


def daemon_binary():
    explicit = os.environ.get("KVOFFLOAD_DAEMON")
    if explicit:
        return explicit
    return os.path.join(REPO, "bazel-bin", "daemon", "kvoffloadd")


class Daemon:
    """kvoffloadd --backend=host on a temporary runtime dir; stop() ends it, restart() starts a
    new one on the same sockets."""

    def __init__(self, extra_args=()):
        binary = daemon_binary()
        if not os.access(binary, os.X_OK):
            if os.environ.get("KVOFFLOAD_DAEMON"):
                raise RuntimeError("KVOFFLOAD_DAEMON=%s is not executable" % binary)
            raise unittest.SkipTest("no daemon binary at %s (bazel build //daemon:kvoffloadd)" %
                                    binary)
        self.dir = tempfile.mkdtemp(prefix="kvo-py-", dir="/tmp")  # short: socket paths
        self.args = [binary, "--backend=host", "--runtime_dir=" + self.dir, "--metrics_address=",
                     "--max_region_bytes=256MiB", "--populate_threads=2",
                     "--log_level=warn"] + list(extra_args)
        self._start()

    def _start(self):
        self.proc = subprocess.Popen(self.args, stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + 20
        while not (os.path.exists(self.data_socket) and
                   os.path.exists(os.path.join(self.dir, "admin.sock"))):
            if self.proc.poll() is not None:
                shutil.rmtree(self.dir, ignore_errors=True)
                raise RuntimeError("kvoffloadd exited at start with %d" % self.proc.returncode)
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError("kvoffloadd did not create its sockets in 20 s")
            time.sleep(0.01)

    @property
    def data_socket(self):
        return os.path.join(self.dir, "kvoffload.sock")

    def _end(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def restart(self):
        """A new daemon on the same runtime dir (every engine and session of the old one gone)."""
        self._end()
        for name in ("kvoffload.sock", "admin.sock"):
            try:
                os.unlink(os.path.join(self.dir, name))
            except FileNotFoundError:
                pass
        self._start()

    def stop(self):
        self._end()
        shutil.rmtree(self.dir, ignore_errors=True)


def spec(engine_id, budget_bytes=16 << 20, **kw):
    return EngineSpec(engine_id=engine_id, num_layers=LAYERS, page_bytes=LAYER_PAGE,
                      budget_bytes=budget_bytes, **kw)


class HostKv:
    """A worker's KV cache in memfds, laid out as separate K and V tensors per layer (two
    allocations, padded strides, non-zero offsets, as PyTorch's caching allocator hands out),
    filled with random bytes."""

    STRIDE = HALF + 256

    def __init__(self, blocks=BLOCKS):
        self.blocks = blocks
        tensor_bytes = self.STRIDE * blocks + 4096
        self.allocs = [HostAllocation(tensor_bytes * LAYERS + 4096) for _ in range(2)]
        self.tensors = []  # (alloc index, offset)
        for layer in range(LAYERS):
            for a in range(2):  # K in allocation 0, V in allocation 1
                self.tensors.append((a, 4096 + layer * tensor_bytes))
        for alloc in self.allocs:
            alloc.buf[:] = os.urandom(alloc.nbytes)
        self.golden = [self.block_bytes(b) for b in range(blocks)]

    def host_tensors(self):
        return [self.allocs[a].tensor(off, self.blocks, self.STRIDE, HALF)
                for a, off in self.tensors]

    def block_bytes(self, block):
        out = bytearray()
        for a, off in self.tensors:
            start = off + block * self.STRIDE
            out += self.allocs[a].buf[start:start + HALF]
        return bytes(out)

    def clobber(self, block):
        for a, off in self.tensors:
            start = off + block * self.STRIDE
            self.allocs[a].buf[start:start + HALF] = b"\xa5" * HALF

    def unlink(self):
        for alloc in self.allocs:
            alloc.unlink()

    def close(self):
        for alloc in self.allocs:
            alloc.close()


POOL_KEYS_A = [b"pool-a-0", b"pool-a-1"]


def _pool_member_a(sock, inbox, outbox):
    """Member A of test_pool_members_in_two_processes_share_keys_byte_exact, in a process of its
    own: stores blocks 1 and 2 under POOL_KEYS_A, sends their bytes, then loads B's key into its
    block 9 and checks it against the bytes B sends."""
    try:
        s = spec("py-pool-a", pool="py-pool", model_identity="m1")
        scheduler = Scheduler.open(sock, s)
        kv = HostKv()
        worker = Worker.connect_host(sock, s, 0, kv.host_tensors())
        prepared = scheduler.prepare_store(POOL_KEYS_A)
        worker.submit_store(1, [1, 2], prepared.rows)
        worker.wait(1, 30).check()
        scheduler.complete_store(POOL_KEYS_A)
        outbox.put(("stored", [kv.golden[1], kv.golden[2]]))
        b_golden = inbox.get(timeout=60)
        if b_golden is None:
            return
        if scheduler.lookup([b"pool-b-0"]) != [KeyState.HIT]:
            outbox.put(("miss", "B's key is not a hit for A"))
            return
        rows = scheduler.prepare_load([b"pool-b-0"])
        worker.submit_load(2, [9], rows)
        worker.wait(2, 30).check()
        scheduler.complete_load([b"pool-b-0"])
        ok = kv.block_bytes(9) == b_golden
        outbox.put(("loaded" if ok else "wrong bytes", ""))
        inbox.get(timeout=60)  # stay a member until B is done
        worker.close()
        scheduler.close()
        kv.close()
    except Exception as e:  # noqa: BLE001 — the parent reports it
        outbox.put(("error", repr(e)))


class HostBackendTest(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        cls.daemon = Daemon()

    @classmethod
    def tearDownClass(cls):
        cls.daemon.stop()

    def connect(self, engine_spec, mp_rank=0, blocks=BLOCKS):
        kv = HostKv(blocks)
        self.addCleanup(kv.close)
        worker = Worker.connect_host(self.daemon.data_socket, engine_spec, mp_rank,
                                     kv.host_tensors())
        kv.unlink()  # the daemon holds its mappings
        self.addCleanup(worker.close)
        return worker, kv

    def open(self, engine_spec):
        scheduler = Scheduler.open(self.daemon.data_socket, engine_spec)
        self.addCleanup(scheduler.close)
        return scheduler

    def test_store_clobber_load_verify(self):
        s = spec("py-roundtrip")
        scheduler = self.open(s)
        g = scheduler.geometry
        self.assertTrue(g.created)
        self.assertEqual(g.worker_bytes_per_block, WORKER_BYTES_PER_BLOCK)
        self.assertEqual(g.num_rows, (16 << 20) // g.row_bytes)
        worker, kv = self.connect(s)
        info = worker.info
        self.assertEqual((info.slot, info.writer, info.num_copies, info.replicated),
                         (0, True, 1, False))
        self.assertEqual(info.num_rows, g.num_rows)
        self.assertEqual(info.device, -1)
        self.assertEqual(info.num_events, 0)
        self.assertTrue(worker.alive)

        keys = [b"chunk-0", b"chunk-1", b"bin\x00ary"]
        self.assertEqual(scheduler.lookup(keys), [KeyState.MISS] * 3)
        prepared = scheduler.prepare_store(keys)
        self.assertEqual(prepared.keys, keys)
        self.assertEqual(prepared.indices, [0, 1, 2])
        self.assertEqual(len(set(prepared.rows)), 3)
        self.assertEqual(prepared.evicted_keys, [])
        self.assertEqual(scheduler.lookup(keys), [KeyState.HIT_PENDING] * 3)

        blocks = [3, 17, 30]
        worker.submit_store(1, blocks, prepared.rows)
        done = worker.wait(1, timeout_s=30)
        self.assertTrue(done.ok, done.message)
        self.assertEqual((done.job_id, done.code, done.bytes),
                         (1, 0, 3 * WORKER_BYTES_PER_BLOCK))
        scheduler.complete_store(keys, success=True)
        self.assertEqual(scheduler.lookup(keys), [KeyState.HIT] * 3)

        for b in blocks:
            kv.clobber(b)
            self.assertNotEqual(kv.block_bytes(b), kv.golden[b])
        rows = scheduler.prepare_load(keys)
        self.assertEqual(rows, prepared.rows)
        worker.submit_load(2, blocks, rows)
        done = worker.wait(2, timeout_s=30).check()
        self.assertEqual(done.bytes, 3 * WORKER_BYTES_PER_BLOCK)
        for b in blocks:
            self.assertEqual(kv.block_bytes(b), kv.golden[b], "block %d" % b)
        scheduler.complete_load(keys)
        scheduler.touch(keys)

    def test_load_into_other_blocks(self):
        s = spec("py-relocate")
        scheduler = self.open(s)
        worker, kv = self.connect(s)
        keys = [b"a", b"b"]
        prepared = scheduler.prepare_store(keys)
        worker.submit_store(10, [1, 2], prepared.rows)
        worker.wait(10, 30).check()
        scheduler.complete_store(keys)
        rows = scheduler.prepare_load(keys)
        worker.submit_load(11, [20, 21], rows)
        worker.wait(11, 30).check()
        scheduler.complete_load(keys)
        self.assertEqual(kv.block_bytes(20), kv.golden[1])
        self.assertEqual(kv.block_bytes(21), kv.golden[2])
        self.assertEqual(kv.block_bytes(22), kv.golden[22])  # untouched

    def test_pool_members_in_two_processes_share_keys_byte_exact(self):
        # Pools through the real daemon: member A (a process of its own) stores; member B
        # (this process) finds A's keys, loads them into other blocks of its own memory and gets
        # A's bytes; B's store is a hit for A. Another model identity is refused, naming it.
        ctx = multiprocessing.get_context("spawn")
        to_a, from_a = ctx.Queue(), ctx.Queue()
        a = ctx.Process(target=_pool_member_a, args=(self.daemon.data_socket, to_a, from_a))
        a.start()
        self.addCleanup(a.join, 30)
        try:
            status, a_golden = from_a.get(timeout=60)
            self.assertEqual(status, "stored", a_golden)
            s = spec("py-pool-b", pool="py-pool", model_identity="m1")
            scheduler = self.open(s)
            worker, kv = self.connect(s)
            self.assertEqual(scheduler.lookup(POOL_KEYS_A), [KeyState.HIT] * 2)
            rows = scheduler.prepare_load(POOL_KEYS_A)
            worker.submit_load(1, [20, 21], rows)
            worker.wait(1, 30).check()
            scheduler.complete_load(POOL_KEYS_A)
            self.assertEqual([kv.block_bytes(20), kv.block_bytes(21)], a_golden)
            self.assertEqual(kv.block_bytes(22), kv.golden[22])  # untouched
            prepared = scheduler.prepare_store([b"pool-b-0"])
            worker.submit_store(2, [5], prepared.rows)
            worker.wait(2, 30).check()
            scheduler.complete_store([b"pool-b-0"])
            to_a.put(kv.golden[5])
            status, text = from_a.get(timeout=60)
            self.assertEqual(status, "loaded", text)
            with self.assertRaises(KvoffloadError) as e:
                Scheduler.open(self.daemon.data_socket,
                               spec("py-pool-c", pool="py-pool", model_identity="m2"))
            self.assertEqual(e.exception.code, StatusCode.FAILED_PRECONDITION)
            self.assertIn("model_identity", str(e.exception))
        finally:
            to_a.put(None)

    def test_ranges_load_single_blocks_of_rows(self):
        # Two GPU blocks per row; a load of the second block of one row and the whole next row.
        s = spec("py-ranges", blocks_per_row=2)
        scheduler = self.open(s)
        worker, kv = self.connect(s)
        keys = [b"x0", b"x1"]
        prepared = scheduler.prepare_store(keys)
        worker.submit_store(40, [4, 5, 6, 7], prepared.rows)
        worker.wait(40, 30).check()
        scheduler.complete_store(keys)
        rows = scheduler.prepare_load(keys)
        worker.submit_ranges(41, "load", [(20, rows[0], 1, 1), (21, rows[1], 0, 2)])
        done = worker.wait(41, 30).check()
        self.assertEqual(done.bytes, 3 * WORKER_BYTES_PER_BLOCK)
        scheduler.complete_load(keys)
        self.assertEqual([kv.block_bytes(b) for b in (20, 21, 22)],
                         [kv.golden[5], kv.golden[6], kv.golden[7]])
        self.assertEqual(kv.block_bytes(23), kv.golden[23])  # untouched
        with self.assertRaises(KvoffloadError) as cm:  # stores write whole rows
            worker.submit_ranges(42, "store", [(0, rows[0], 1, 1)])
            worker.wait(42, 30).check()
        self.assertEqual(cm.exception.code, StatusCode.INVALID_ARGUMENT)
        with self.assertRaises(ValueError):
            worker.submit_ranges(43, "load", [(0, rows[0], 1)])
        with self.assertRaises(ValueError):  # ctypes would keep the low 32 bits: block 1
            worker.submit_ranges(44, "load", [(0, rows[0], (1 << 32) + 1, 1)])
        with self.assertRaises(ValueError):
            spec("py-bad-uid", member_uids=[-1])._to_c()

    def test_index_calls_above_the_request_limit(self):
        # 65536 keys a request: the library splits larger calls (here 70000 keys).
        scheduler = self.open(spec("py-split"))
        keys = [b"key-%d" % i for i in range(70000)]
        self.assertEqual(scheduler.lookup(keys), [KeyState.MISS] * len(keys))
        scheduler.touch(keys)  # unknown keys are ignored, in every request
        with self.assertRaises(KvoffloadError) as cm:  # all or nothing: nothing is taken
            scheduler.prepare_store(keys)
        self.assertEqual(cm.exception.code, StatusCode.RESOURCE_EXHAUSTED)
        self.assertEqual(scheduler.lookup(keys[:3] + keys[-3:]), [KeyState.MISS] * 6)

    def test_runs_move_the_same_bytes_as_lists(self):
        s = spec("py-runs")
        scheduler = self.open(s)
        worker, kv = self.connect(s)
        keys = [b"r%d" % i for i in range(6)]
        prepared = scheduler.prepare_store(keys)
        rows = prepared.rows
        self.assertEqual(rows, list(range(rows[0], rows[0] + 6)))  # fresh engine: consecutive
        # Blocks 3..5 into the first three rows, blocks 10..12 into the next three: two runs.
        worker.submit_runs(30, "store", [(3, rows[0], 3), (10, rows[3], 3)])
        done = worker.wait(30, 30).check()
        self.assertEqual(done.bytes, 6 * len(kv.block_bytes(0)))
        scheduler.complete_store(keys)
        for b in (3, 4, 5, 10, 11, 12):
            kv.clobber(b)
        loaded = scheduler.prepare_load(keys)
        worker.submit_runs(31, "load", [(20, loaded[0], 6)])
        worker.wait(31, 30).check()
        scheduler.complete_load(keys)
        for i, b in enumerate((3, 4, 5, 10, 11, 12)):
            self.assertEqual(kv.block_bytes(20 + i), kv.golden[b])
        self.assertEqual(kv.block_bytes(26), kv.golden[26])  # untouched

    def test_runs_are_checked_before_anything_is_allocated(self):
        s = spec("py-runs-bad")
        scheduler = self.open(s)
        worker, kv = self.connect(s)
        for job, runs in ((40, [(0, 0, 0)]),                       # empty run
                          (41, [(0, 2**64 - 2, 5)]),               # row overflows
                          (42, [(0, 0, 2**63)])):                  # far over max_blocks_per_job
            worker.submit_runs(job, "store", runs)
            with self.assertRaises(KvoffloadError) as e:
                worker.wait(job, 30).check()
            self.assertEqual(e.exception.code, StatusCode.INVALID_ARGUMENT, runs)
        with self.assertRaises(ValueError):
            worker.submit_runs(43, "sideways", [(0, 0, 1)])
        # A store may not write a row twice, in order or not (loads may read one twice).
        for job, rows in ((45, [3, 3]), (46, [5, 2, 5])):
            worker.submit_store(job, list(range(len(rows))), rows)
            with self.assertRaises(KvoffloadError) as e:
                worker.wait(job, 30).check()
            self.assertEqual(e.exception.code, StatusCode.INVALID_ARGUMENT, rows)
        # The session is still usable.
        row = scheduler.prepare_store([b"ok"]).rows[0]
        worker.submit_runs(44, "store", [(1, row, 1)])
        worker.wait(44, 30).check()
        scheduler.complete_store([b"ok"])

    def test_scheduler_semantics(self):
        scheduler = self.open(spec("py-index"))
        first = scheduler.prepare_store([b"x", b"y"])
        # Present keys are skipped; indices map the new ones back to the request.
        again = scheduler.prepare_store([b"y", b"z", "x", "w"])  # str keys are UTF-8
        self.assertEqual(again.keys, [b"z", b"w"])
        self.assertEqual(again.indices, [1, 3])
        self.assertTrue(set(again.rows).isdisjoint(first.rows))
        scheduler.complete_store([b"x", b"y"], success=False)  # failed store: rows freed
        self.assertEqual(scheduler.lookup([b"x", b"y", b"z"]),
                         [KeyState.MISS, KeyState.MISS, KeyState.HIT_PENDING])
        with self.assertRaises(KvoffloadError) as cm:
            scheduler.prepare_load([b"z"])  # still WRITING
        self.assertEqual(cm.exception.code, StatusCode.FAILED_PRECONDITION)
        with self.assertRaises(KvoffloadError) as cm:
            scheduler.complete_load([b"z"])
        self.assertEqual(cm.exception.name, "FAILED_PRECONDITION")
        with self.assertRaises(KvoffloadError) as cm:
            scheduler.lookup([])  # the daemon refuses empty requests
        self.assertEqual(cm.exception.name, "INVALID_ARGUMENT")

    def test_eviction_and_exhaustion(self):
        s = spec("py-evict", budget_bytes=2 * WORKER_BYTES_PER_BLOCK)
        scheduler = self.open(s)
        self.assertEqual(scheduler.geometry.num_rows, 2)
        old = scheduler.prepare_store([b"old-one", b"old-two"])
        # Both rows are WRITING: nothing can be evicted, nothing changes.
        with self.assertRaises(KvoffloadError) as cm:
            scheduler.prepare_store([b"new"])
        self.assertEqual(cm.exception.code, 8)
        self.assertEqual(cm.exception.name, "RESOURCE_EXHAUSTED")
        # A commit makes rows readable only once a store job wrote them.
        worker, _ = self.connect(s)
        worker.submit_store(1, [0, 1], old.rows)
        worker.wait(1).check()
        scheduler.complete_store([b"old-one", b"old-two"])
        scheduler.touch([b"old-two"])
        prepared = scheduler.prepare_store([b"new"])
        self.assertEqual(prepared.evicted_keys, [b"old-one"])
        self.assertEqual(scheduler.lookup([b"old-one", b"old-two", b"new"]),
                         [KeyState.MISS, KeyState.HIT, KeyState.HIT_PENDING])

    def test_poll_returns_every_finished_job(self):
        s = spec("py-poll")
        scheduler = self.open(s)
        worker, _ = self.connect(s)
        keys = [b"p%d" % i for i in range(BLOCKS)]
        prepared = scheduler.prepare_store(keys)
        jobs = set()
        # More jobs than one C poll call returns (64): poll() must gather them all. A row takes
        # one store job; the other rounds load it back.
        for i, row in enumerate(prepared.rows):
            worker.submit_store(1000 + i, [i], [row])
            jobs.add(1000 + i)
        for i in range(BLOCKS):
            worker.wait(1000 + i, 30)
        jobs.clear()
        scheduler.complete_store(keys)
        rows = scheduler.prepare_load(keys)
        self.assertEqual(rows, prepared.rows)  # the same row handles
        for round_ in range(3):
            for i, row in enumerate(rows):
                job = 1000 * (round_ + 2) + i
                worker.submit_load(job, [i], [row])
                jobs.add(job)
        seen = {}
        deadline = time.monotonic() + 30
        while len(seen) < len(jobs) and time.monotonic() < deadline:
            for job in worker.poll():
                self.assertNotIn(job.job_id, seen)
                seen[job.job_id] = job
            time.sleep(0.01)
        self.assertEqual(set(seen), jobs)
        self.assertTrue(all(j.ok and j.bytes == WORKER_BYTES_PER_BLOCK for j in seen.values()))
        self.assertEqual(worker.poll(), [])
        scheduler.complete_load(keys)

    def test_failed_job_carries_its_status(self):
        s = spec("py-jobfail")
        self.open(s)
        worker, _ = self.connect(s)
        worker.submit_store(5, [1], [0])  # row 0 was never prepared
        done = worker.wait(5, 30)
        self.assertFalse(done.ok)
        self.assertNotEqual(done.code, 0)
        self.assertTrue(done.message)
        with self.assertRaises(KvoffloadError) as cm:
            done.check()
        self.assertEqual(cm.exception.code, done.code)

    def test_error_codes(self):
        s = spec("py-errors")
        scheduler = self.open(s)
        worker, _ = self.connect(s)

        with self.assertRaises(KvoffloadError) as cm:
            scheduler.prepare_load([b"never-stored"])
        e = cm.exception
        self.assertEqual((e.code, e.name), (5, "NOT_FOUND"))
        self.assertIsInstance(e.code, int)
        self.assertEqual(e.reason, Reason.KEY_NOT_IN_INDEX)
        self.assertEqual(e.metadata, {"key_index": "0", "operation": "PrepareLoad"})
        self.assertIn("never-stored".encode().hex(), e.message)  # names the key
        self.assertTrue(str(e).startswith("NOT_FOUND: "))

        with self.assertRaises(KvoffloadError) as cm:
            worker._submit(7, 1, [1], [0], -1)  # neither store (1) nor load (2)
        self.assertEqual((cm.exception.code, cm.exception.name), (3, "INVALID_ARGUMENT"))
        self.assertIn("direction 7", cm.exception.message)

        with self.assertRaises(KvoffloadError) as cm:
            worker.record_event(0, 0)
        self.assertEqual(cm.exception.name, "FAILED_PRECONDITION")
        with self.assertRaises(KvoffloadError) as cm:
            worker.wait_event(0, 0)
        self.assertEqual(cm.exception.name, "FAILED_PRECONDITION")

        start = time.monotonic()
        with self.assertRaises(KvoffloadError) as cm:
            worker.wait(424242, timeout_s=0.05)
        self.assertEqual(cm.exception.name, "DEADLINE_EXCEEDED")
        self.assertLess(time.monotonic() - start, 5)

        with self.assertRaises(KvoffloadError) as cm:
            scheduler.prepare_store([b""])
        self.assertEqual(cm.exception.name, "INVALID_ARGUMENT")

        other = spec("py-errors", budget_bytes=32 << 20)  # disagrees with the engine's spec
        with self.assertRaises(KvoffloadError) as cm:
            Scheduler.open(self.daemon.data_socket, other)
        self.assertEqual(cm.exception.name, "FAILED_PRECONDITION")
        self.assertEqual(cm.exception.reason, Reason.SPEC_MISMATCH)
        self.assertEqual(cm.exception.metadata, {"engine": "py-errors/0"})

        with self.assertRaises(KvoffloadError) as cm:
            Scheduler.open(self.daemon.data_socket, spec("py-pp", world_size=2, tp=1, pp=2))
        self.assertEqual(cm.exception.name, "FAILED_PRECONDITION")
        self.assertEqual(cm.exception.reason, Reason.SPEC_RULE)
        self.assertEqual(cm.exception.metadata, {"rule": "no_pipeline_parallel"})

        # A call that succeeds leaves no reason behind for the next error without one.
        scheduler.lookup([b"k"])
        with self.assertRaises(KvoffloadError) as cm:
            scheduler.prepare_store([b""])
        self.assertEqual((cm.exception.reason, cm.exception.metadata), ("", {}))

        with self.assertRaises(ValueError):
            Scheduler.open(self.daemon.data_socket, spec("py-bad", executor="slurm"))
        with self.assertRaises(KvoffloadError) as cm:
            Scheduler.open(self.daemon.data_socket, spec("py-bad", executor=9))
        self.assertEqual(cm.exception.name, "INVALID_ARGUMENT")

        with self.assertRaises(TypeError):
            worker.submit_store(6, [-1], [0])

    def test_worker_refused_by_daemon(self):
        self.open(spec("py-refuse"))
        # A worker whose spec disagrees with the engine's is refused at registration.
        with self.assertRaises(KvoffloadError) as cm:
            self.connect(spec("py-refuse", budget_bytes=8 << 20))
        self.assertEqual(cm.exception.name, "FAILED_PRECONDITION")
        # A named POSIX shm object: the host backend opens only sealed memfds of the caller.
        with self.assertRaises(KvoffloadError) as cm:
            Worker.connect_host(self.daemon.data_socket, spec("py-refuse"), 0,
                                [("/kvo-py-does-not-exist", WORKER_BYTES_PER_BLOCK, 0, 1,
                                  WORKER_BYTES_PER_BLOCK, WORKER_BYTES_PER_BLOCK)])
        self.assertEqual(cm.exception.name, "INVALID_ARGUMENT")

    def test_connect_cuda_without_gpu(self):
        if os.path.exists("/dev/nvidia0"):
            self.skipTest("a GPU is present; the GPU-less error path does not apply")
        s = spec("py-cuda")
        with self.assertRaises(KvoffloadError) as cm:
            Worker.connect_cuda(self.daemon.data_socket, s, 0,
                                [(0x7f0000000000, BLOCKS, WORKER_BYTES_PER_BLOCK,
                                  WORKER_BYTES_PER_BLOCK)])
        self.assertIn(cm.exception.name, ("UNAVAILABLE", "FAILED_PRECONDITION"))
        self.assertIn("CUDA", cm.exception.message)

    def test_close_and_context_manager(self):
        s = spec("py-close")
        kv = HostKv()
        self.addCleanup(kv.close)
        with Scheduler.open(self.daemon.data_socket, s) as scheduler:
            with Worker.connect_host(self.daemon.data_socket, s, 0, kv.host_tensors()) as w:
                self.assertTrue(w.alive)
            self.assertFalse(w.alive)
            w.close()  # idempotent
            with self.assertRaises(KvoffloadError) as cm:
                w.submit_store(1, [0], [0])
            self.assertEqual(cm.exception.name, "FAILED_PRECONDITION")
            self.assertEqual(scheduler.lookup([b"k"]), [KeyState.MISS])
        with self.assertRaises(KvoffloadError):
            scheduler.lookup([b"k"])


class SessionEndTest(unittest.TestCase):

    def test_daemon_exit_ends_the_session(self):
        daemon = Daemon()
        try:
            kv = HostKv()
            self.addCleanup(kv.close)
            s = spec("py-session")
            worker = Worker.connect_host(daemon.data_socket, s, 0, kv.host_tensors())
            self.addCleanup(worker.close)
            worker.check_session()
        finally:
            daemon.stop()
        deadline = time.monotonic() + 10
        while worker.alive and time.monotonic() < deadline:
            time.sleep(0.01)
        self.assertFalse(worker.alive)
        with self.assertRaises(KvoffloadError) as cm:
            worker.check_session()
        self.assertNotEqual(cm.exception.code, 0)
        with self.assertRaises(KvoffloadError):
            worker.wait(1, timeout_s=1)


class LibraryLoadingTest(unittest.TestCase):

    def run_python(self, code, **env):
        full_env = dict(os.environ, **env)
        full_env["PYTHONPATH"] = os.path.dirname(os.path.dirname(kvoffload.__file__))
        return subprocess.run([sys.executable, "-c", code], env=full_env, capture_output=True,
                              text=True, timeout=60)

    def test_version(self):
        self.assertTrue(kvoffload.version().startswith("kvoffload-c "))

    def test_missing_library_is_an_import_error(self):
        result = self.run_python(
            "import kvoffload\n"
            "try:\n"
            "    kvoffload.version()\n"
            "except ImportError as e:\n"
            "    print('ImportError', e)\n",
            KVOFFLOAD_LIB="/nonexistent/libkvoffload_c.so")
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertIn("ImportError", result.stdout)
        self.assertIn("KVOFFLOAD_LIB", result.stdout)

    def test_import_needs_no_library(self):
        result = self.run_python("import kvoffload; print(kvoffload.kv_tensor_views)",
                                 KVOFFLOAD_LIB="/nonexistent/libkvoffload_c.so")
        self.assertEqual(result.returncode, 0, result.stderr)


if __name__ == "__main__":
    unittest.main()
