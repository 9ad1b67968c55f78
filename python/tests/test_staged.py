"""kvoffload.StagedWorker (copy path v3's opt-in worker-side reorder) against the real kvoffloadd on
its host backend, with torch CPU tensors (Debian's python3-torch; the CUDA path runs on the GPU
machine: tests/gpu_e2e).

What is proved here: a staged worker's rows hold exactly the bytes a plain Worker registered with
the same tensors stores and loads (both ways, over sessions of one engine); jobs are cut into
chunks of chunk_rows rows through `buffers` staging buffers, with one verdict per job; a failed
chunk fails its job and leaves its blocks untouched while the other chunks land; bad input is
refused before anything is submitted.
"""

import random
import unittest

try:
    import torch
except ImportError:  # tests/run_all.sh installs python3-torch; a bare dev machine may not have it
    torch = None

from kvoffload import (EngineSpec, HostAllocation, KvoffloadError, Scheduler, StagedWorker,
                       StatusCode, Worker, kv_tensor_views)
from kvoffload._staging import _BlockLayout

from test_host_backend import Daemon

BLOCKS = 40


def _need_torch(case):
    return unittest.skipIf(torch is None, "needs torch (python3-torch)")(case)


class Kv:
    """A worker's KV in one memfd, as torch CPU tensors: per-layer [2, blocks, 8, 2, 8] fp16
    caches (vLLM's layout; one with a padded block stride), and a [blocks, 3] uint8 tensor with a
    5-byte stride (pages no wider word divides). Random bytes."""

    def __init__(self, layers=3, blocks=BLOCKS, seed=1):
        self.blocks = blocks
        self.alloc = HostAllocation(1 << 20)
        flat = torch.frombuffer(self.alloc.buf, dtype=torch.uint8)
        self.base = flat.data_ptr()
        gen = torch.Generator().manual_seed(seed)
        flat.copy_(torch.randint(0, 256, flat.shape, dtype=torch.uint8, generator=gen))
        half = flat.view(torch.float16)
        self.tensors, offset = [], 4096
        for layer in range(layers):
            page = 8 * 2 * 8  # fp16 elements of a K (or V) page
            stride = page + (32 if layer == 1 else 0)  # layer 1: padded blocks
            self.tensors.append(half.as_strided((2, blocks, 8, 2, 8),
                                                (blocks * stride, stride, 16, 8, 1),
                                                offset // 2))
            offset += 2 * blocks * stride * 2 + 512
        self.tensors.append(flat.as_strided((blocks, 3), (5, 1), offset))
        self.views = kv_tensor_views(self.tensors)
        self.block_bytes = sum(v.page_bytes for v in self.views)

    def spec(self, engine_id, **kw):
        return EngineSpec(engine_id=engine_id, num_layers=1, page_bytes=self.block_bytes,
                          worker_bytes_per_block=self.block_bytes, budget_bytes=1 << 20, **kw)

    def host_tensors(self):
        """What a plain Worker registers for the same tensors."""
        return [self.alloc.tensor(v.data_ptr - self.base, v.num_blocks, v.block_stride_bytes,
                                  v.page_bytes) for v in self.views]

    def block(self, b):
        """Block b's bytes in registration order, read straight from the memfd."""
        out = bytearray()
        for v in self.views:
            start = v.data_ptr - self.base + b * v.block_stride_bytes
            out += self.alloc.buf[start:start + v.page_bytes]
        return bytes(out)

    def clobber(self, blocks):
        for b in blocks:
            for v in self.views:
                start = v.data_ptr - self.base + b * v.block_stride_bytes
                self.alloc.buf[start:start + v.page_bytes] = b"\x5a" * v.page_bytes

    def close(self):
        self.tensors = []
        self.alloc.close()


@_need_torch
class BlockLayoutTest(unittest.TestCase):
    """The gather and scatter against the descriptors' own definition of a block's bytes."""

    def test_gather_is_each_blocks_pages_in_registration_order_and_scatter_inverts_it(self):
        kv = Kv()
        self.addCleanup(kv.close)
        layout = _BlockLayout(kv.tensors, None, None)
        self.assertEqual(layout.pages, [v.page_bytes for v in kv.views])
        self.assertEqual(layout.word, 1)  # the 3-byte pages
        idx = torch.tensor([7, 0, 39, 12, 7 + 1], dtype=torch.int64)
        out = torch.empty((5, layout.block_bytes // layout.word), dtype=layout.dtype)
        layout.gather(idx, out)
        got = out.view(torch.uint8).numpy().tobytes()
        self.assertEqual(got, b"".join(kv.block(int(b)) for b in idx))
        kv.clobber(range(BLOCKS))
        layout.scatter(torch.tensor([3, 4, 5, 6, 30]), out)
        for i, b in enumerate([3, 4, 5, 6, 30]):
            self.assertEqual(kv.block(b), got[i * layout.block_bytes:(i + 1) * layout.block_bytes])
        self.assertEqual(kv.block(2), b"\x5a" * layout.block_bytes)  # untouched

    def test_words_are_as_wide_as_every_offset_page_and_stride_allow(self):
        flat = torch.zeros(1 << 16, dtype=torch.uint8)
        t = flat.view(torch.float16)[64:64 + 2 * 10 * 32].view(2, 10, 32)
        layout = _BlockLayout([t], None, None)
        self.assertEqual((layout.word, layout.pages, len(layout.sources)), (8, [64, 64], 1))
        odd = flat.view(torch.float16)[1:1 + 2 * 10 * 32].view(2, 10, 32)  # 2-byte offset
        self.assertEqual(_BlockLayout([odd], None, None).word, 2)

    def test_a_tensor_whose_last_dim_is_not_contiguous_is_refused(self):
        t = torch.zeros(10, 4, 6).transpose(1, 2)  # dense per block, last dim strided
        with self.assertRaises(KvoffloadError) as e:
            _BlockLayout([t], None, None)
        self.assertEqual(e.exception.code, StatusCode.INVALID_ARGUMENT)


@_need_torch
class StagedWorkerTest(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        cls.daemon = Daemon()

    @classmethod
    def tearDownClass(cls):
        cls.daemon.stop()

    def setUp(self):
        self.kv = Kv()
        self.addCleanup(self.kv.close)

    def staged(self, spec, chunk_rows=3, buffers=2):
        worker = StagedWorker.connect_host(
            self.daemon.data_socket, spec, 0, self.kv.tensors,
            staging_bytes=chunk_rows * buffers * spec.blocks_per_row * self.kv.block_bytes,
            buffers=buffers)
        self.addCleanup(worker.close)
        self.assertEqual((worker.chunk_rows, worker.buffers), (chunk_rows, buffers))
        return worker

    def plain(self, spec):
        worker = Worker.connect_host(self.daemon.data_socket, spec, 0, self.kv.host_tensors())
        self.addCleanup(worker.close)
        return worker

    def scheduler(self, spec):
        s = Scheduler.open(self.daemon.data_socket, spec)
        self.addCleanup(s.close)
        return s

    def roundtrip(self, engine_id, bpr):
        """Staged store → plain load, then plain store → staged load, byte for byte."""
        spec = self.kv.spec(engine_id, blocks_per_row=bpr)
        sched = self.scheduler(spec)
        rng = random.Random(bpr)
        keys = [b"%s-%d" % (engine_id.encode(), i) for i in range(7)]  # 7 rows: chunks 3, 3, 1
        blocks = rng.sample(range(BLOCKS // 2), 7 * bpr)
        golden = [self.kv.block(b) for b in blocks]
        staged = self.staged(spec)
        rows = sched.prepare_store(keys).rows
        staged.submit_store(11, blocks, rows)
        verdict = staged.wait(11, timeout_s=30)
        self.assertTrue(verdict.ok, verdict.message)
        self.assertEqual((verdict.job_id, verdict.bytes), (11, 7 * bpr * self.kv.block_bytes))
        sched.complete_store(keys)
        staged.close()

        plain = self.plain(spec)
        targets = rng.sample(range(BLOCKS // 2, BLOCKS), 7 * bpr)
        self.kv.clobber(targets)
        plain.submit_load(12, targets, sched.prepare_load(keys))
        plain.wait(12, 30).check()
        sched.complete_load(keys)
        self.assertEqual([self.kv.block(b) for b in targets], golden)

        keys2 = [k + b"-b" for k in keys]
        blocks2 = rng.sample(range(BLOCKS), 7 * bpr)
        golden2 = [self.kv.block(b) for b in blocks2]
        plain.submit_store(13, blocks2, sched.prepare_store(keys2).rows)
        plain.wait(13, 30).check()
        sched.complete_store(keys2)
        plain.close()

        staged = self.staged(spec, chunk_rows=2, buffers=3)
        targets2 = rng.sample(range(BLOCKS), 7 * bpr)
        self.kv.clobber(targets2)
        staged.submit_load(14, targets2, sched.prepare_load(keys2))
        verdict = staged.wait(14, timeout_s=30)
        self.assertTrue(verdict.ok, verdict.message)
        sched.complete_load(keys2)
        self.assertEqual([self.kv.block(b) for b in targets2], golden2)
        staged.close()

    def test_rows_are_the_bytes_a_plain_worker_stores_and_loads(self):
        self.roundtrip("staged-bpr1", 1)

    def test_rows_of_two_blocks_each(self):
        self.roundtrip("staged-bpr2", 2)

    def test_a_failed_chunk_fails_its_job_and_leaves_its_blocks_alone(self):
        spec = self.kv.spec("staged-fail")
        sched = self.scheduler(spec)
        staged = self.staged(spec)
        keys = [b"f%d" % i for i in range(6)]
        staged.submit_store(1, range(6), sched.prepare_store(keys).rows)
        staged.wait(1, 30).check()
        sched.complete_store(keys)
        golden = [self.kv.block(b) for b in range(6)]
        rows = sched.prepare_load(keys)
        bad = list(rows)
        bad[4] = staged.info.num_rows + 3  # chunk 1 (rows 3..5) reaches past the region
        targets = list(range(20, 26))
        self.kv.clobber(targets)
        staged.submit_load(2, targets, bad)
        verdict = staged.wait(2, timeout_s=30)
        sched.complete_load(keys)
        self.assertFalse(verdict.ok)
        self.assertEqual(verdict.code, StatusCode.OUT_OF_RANGE, verdict.message)
        self.assertIn("chunk 1", verdict.message)
        self.assertEqual([self.kv.block(b) for b in targets[:3]], golden[:3])
        self.assertEqual([self.kv.block(b) for b in targets[3:]],
                         [b"\x5a" * self.kv.block_bytes] * 3)
        # The worker goes on: the same rows, valid this time.
        staged.submit_load(3, targets, sched.prepare_load(keys))
        staged.wait(3, 30).check()
        sched.complete_load(keys)
        self.assertEqual([self.kv.block(b) for b in targets], golden)

    def test_bad_input_is_refused_before_anything_is_submitted(self):
        spec = self.kv.spec("staged-bad")
        staged = self.staged(spec)

        def code_of(call, *args):
            with self.assertRaises(KvoffloadError) as e:
                call(*args)
            return e.exception.code

        self.assertEqual(code_of(staged.submit_store, 1 << 48, [0], [0]),
                         StatusCode.INVALID_ARGUMENT)
        self.assertEqual(code_of(staged.submit_store, 1, [0, 1], [0]),
                         StatusCode.INVALID_ARGUMENT)
        self.assertEqual(code_of(staged.submit_store, 1, [BLOCKS], [0]),
                         StatusCode.INVALID_ARGUMENT)
        self.assertEqual(code_of(staged.submit_load, 1, [], []), StatusCode.INVALID_ARGUMENT)
        self.assertEqual(code_of(staged.wait, 1), StatusCode.NOT_FOUND)
        self.assertEqual(staged.poll(), [])  # nothing was submitted
        sched = self.scheduler(spec)
        staged.submit_store(5, [0], sched.prepare_store([b"k"]).rows)
        # A verdict not taken keeps its id in use.
        self.assertEqual(code_of(staged.submit_store, 5, [1], [0]), StatusCode.ALREADY_EXISTS)
        staged.wait(5, 30).check()
        with self.assertRaises(ValueError):
            StagedWorker.connect_host(self.daemon.data_socket, spec, 0, self.kv.tensors,
                                      staging_bytes=self.kv.block_bytes, buffers=2)

    def test_close_ends_every_job_with_one_verdict(self):
        spec = self.kv.spec("staged-close")
        sched = self.scheduler(spec)
        staged = self.staged(spec, chunk_rows=1, buffers=1)
        keys = [b"c%d" % i for i in range(30)]
        staged.submit_store(7, range(30), sched.prepare_store(keys).rows)
        staged.close()
        verdicts = staged.poll()
        self.assertEqual([v.job_id for v in verdicts], [7])
        self.assertIn(verdicts[0].code, (StatusCode.OK, StatusCode.CANCELLED))
        if not verdicts[0].ok:
            self.assertIn("closed before chunk", verdicts[0].message)
        with self.assertRaises(KvoffloadError) as e:
            staged.submit_store(8, [0], [0])
        self.assertEqual(e.exception.code, StatusCode.FAILED_PRECONDITION)
        staged.close()  # idempotent


if __name__ == "__main__":
    unittest.main()
