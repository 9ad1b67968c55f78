"""The disk tier through the C ABI (kvoffload's Scheduler and Worker, host memory): kvoffloadd
with --disk_tier_path and a region of four rows. A prefix evicted from the region is found on
disk (HIT_PENDING while it is promoted, never a MISS), becomes a HIT and loads byte-exact; only
the keys before the first key held nowhere are promoted; a new daemon on the same disk directory
finds the rows again. Tier counters come from Admin.Stats (admin_stats.py).

Synchronization is by bounded polling of a state (Admin.Stats' spills_ok, a lookup's states)
with a deadline, never by a sleep alone: every row is spilled in the background once READY,
and a row being spilled is briefly not evictable, so the tests wait for the spills before they
evict (the region has only four rows).
"""

import os
import shutil
import tempfile
import time
import unittest

from kvoffload import KeyState, Scheduler, Worker

import admin_stats
from test_host_backend import WORKER_BYTES_PER_BLOCK, Daemon, HostKv, spec

ROWS = 4
DEADLINE_S = 20.0
POLL_S = 0.005  # one engine step between lookups
PREFIX_BLOCKS = [3, 5, 7, 9]
LOAD_BLOCKS = [20, 21, 22, 23]
OTHER_BLOCKS = [10, 11, 12, 13]


def keys(prefix, n):
    return [b"%s-%d" % (prefix, i) for i in range(n)]


class DiskTierTest(unittest.TestCase):

    def setUp(self):
        self.tier_dir = tempfile.mkdtemp(prefix="kvo-py-tier-",
                                         dir=os.environ.get("TEST_TMPDIR") or "/tmp")
        self.addCleanup(shutil.rmtree, self.tier_dir, True)
        self.daemon = Daemon([
            "--disk_tier_path=" + self.tier_dir, "--disk_tier_bytes=4MiB",
            "--disk_tier_row_bytes=%d" % WORKER_BYTES_PER_BLOCK,
            # generous: a loaded CI machine must not turn a promotion into a miss
            "--tier_promote_timeout_ms=5000"])
        self.addCleanup(self.daemon.stop)
        self.spec = spec("py-disk-tier", budget_bytes=ROWS * WORKER_BYTES_PER_BLOCK)
        self.stored = 0  # rows stored since the daemon started: each is spilled once
        self.kv = HostKv()
        self.addCleanup(self.kv.close)
        self.connect()

    def connect(self):
        self.scheduler = Scheduler.open(self.daemon.data_socket, self.spec)
        self.worker = Worker.connect_host(self.daemon.data_socket, self.spec, 0,
                                          self.kv.host_tensors())
        g = self.scheduler.geometry
        self.assertEqual((g.num_rows, g.row_bytes), (ROWS, WORKER_BYTES_PER_BLOCK))

    def disconnect(self):
        self.worker.close()
        self.scheduler.close()

    def tearDown(self):
        self.disconnect()

    # -- helpers
    def disk(self):
        return admin_stats.tier_stats(self.daemon.dir, "disk")

    def store(self, store_keys, blocks, job):
        """Stores store_keys from `blocks`; returns the keys the store evicted."""
        prepared = self.scheduler.prepare_store(store_keys)
        self.assertEqual(prepared.keys, store_keys)
        self.worker.submit_store(job, blocks, prepared.rows)
        self.worker.wait(job, 30).check()
        self.scheduler.complete_store(store_keys)
        self.assertEqual(self.scheduler.lookup(store_keys), [KeyState.HIT] * len(store_keys))
        self.stored += len(store_keys)
        return prepared.evicted_keys

    def wait_spilled(self, n):
        """Polls Admin.Stats until n rows were spilled (each READY row is written once)."""
        deadline = time.monotonic() + DEADLINE_S
        while self.disk()["spills_ok"] < n and time.monotonic() < deadline:
            time.sleep(0.002)
        d = self.disk()
        self.assertEqual(d["spills_ok"], n, d)
        self.assertEqual(d["spills_failed"], 0, d)

    def evict(self, expected, job):
        """Fills the region with four other keys (once everything stored is on disk): exactly
        `expected` are evicted. Waits for the others' spills too, so promotions find rows."""
        self.wait_spilled(self.stored)
        evicted = self.store(keys(b"other-%d" % job, ROWS), OTHER_BLOCKS, job)
        self.assertEqual(sorted(evicted), sorted(expected))
        self.wait_spilled(self.stored)

    def lookup_until_hit(self, lookup_keys):
        """Looks lookup_keys up as vLLM's scheduler does, step after step, until every one is a
        HIT; every answer before is HIT_PENDING or HIT (never a MISS). Returns the answers."""
        answers = []
        deadline = time.monotonic() + DEADLINE_S
        while True:
            states = self.scheduler.lookup(lookup_keys)
            answers.append(states)
            if states == [KeyState.HIT] * len(lookup_keys):
                return answers
            self.assertNotIn(KeyState.MISS, states, "a promotion was lost: %s" % answers)
            self.assertLess(time.monotonic(), deadline,
                            "promotion did not finish in %d s: %s" % (DEADLINE_S, answers[-3:]))
            time.sleep(POLL_S)

    def load_and_verify(self, load_keys, golden, job):
        """Loads load_keys into LOAD_BLOCKS (clobbered first) and checks them against golden."""
        blocks = LOAD_BLOCKS[:len(load_keys)]
        for b in blocks:
            self.kv.clobber(b)
        rows = self.scheduler.prepare_load(load_keys)
        self.worker.submit_load(job, blocks, rows)
        self.worker.wait(job, 30).check()
        self.scheduler.complete_load(load_keys)
        for i, b in enumerate(blocks):
            self.assertEqual(self.kv.block_bytes(b), golden[i], "key %r" % load_keys[i])

    # -- tests
    def test_evicted_prefix_is_promoted_and_loads_byte_exact(self):
        prefix = keys(b"prefix", ROWS)
        golden = [self.kv.golden[b] for b in PREFIX_BLOCKS]
        self.assertEqual(self.store(prefix, PREFIX_BLOCKS, 1), [])
        self.evict(prefix, 2)
        self.assertEqual(self.disk()["lookup_tier_hits"], 0)
        answers = self.lookup_until_hit(prefix)
        # The lookup that finds them on disk starts their promotions: pending, not yet a hit.
        self.assertEqual(answers[0], [KeyState.HIT_PENDING] * ROWS, answers)
        self.load_and_verify(prefix, golden, 3)
        d = self.disk()
        self.assertEqual((d["lookup_tier_hits"], d["promotions_started"], d["promotions_ok"]),
                         (ROWS, ROWS, ROWS), d)
        self.assertEqual((d["promotions_failed"], d["promotions_timed_out"], d["read_corrupt"]),
                         (0, 0, 0), d)
        self.assertEqual(d["promotion_bytes"], ROWS * WORKER_BYTES_PER_BLOCK, d)
        self.assertGreaterEqual(d["spills_ok"], 2 * ROWS)

    def test_only_the_prefix_before_a_key_held_nowhere_is_promoted(self):
        p = keys(b"p", 2)
        golden = [self.kv.golden[b] for b in PREFIX_BLOCKS[:2]]
        self.store(p, PREFIX_BLOCKS[:2], 1)
        self.evict(p, 2)
        states = self.scheduler.lookup([p[0], b"never-stored", p[1]])
        self.assertEqual(states, [KeyState.HIT_PENDING, KeyState.MISS, KeyState.MISS])
        self.assertEqual(self.lookup_until_hit([p[0]])[-1], [KeyState.HIT])
        self.assertEqual(self.disk()["promotions_started"], 1)  # p-1 follows a miss: not read
        # Asked again the same way, p-1 still follows a key held nowhere: still a miss.
        self.assertEqual(self.scheduler.lookup([p[0], b"never-stored", p[1]]),
                         [KeyState.HIT, KeyState.MISS, KeyState.MISS])
        self.assertEqual(self.disk()["promotions_started"], 1)
        # Asked for after a hit, p-1 is a prefix's next key: promoted.
        answers = self.lookup_until_hit(p)
        self.assertEqual(answers[0], [KeyState.HIT, KeyState.HIT_PENDING], answers)
        self.assertEqual(self.disk()["promotions_started"], 2)
        self.load_and_verify(p, golden, 3)
        d = self.disk()
        self.assertEqual((d["promotions_ok"], d["promotions_failed"]), (2, 0), d)

    def test_rows_on_disk_outlive_the_daemon(self):
        prefix = keys(b"kept", ROWS)
        golden = [self.kv.golden[b] for b in PREFIX_BLOCKS]
        self.store(prefix, PREFIX_BLOCKS, 1)
        self.wait_spilled(ROWS)
        self.disconnect()
        self.daemon.restart()  # a new daemon: an empty region, the same disk directory
        self.stored = 0
        self.connect()
        self.assertEqual(self.disk()["records"], ROWS)
        answers = self.lookup_until_hit(prefix)
        self.assertEqual(answers[0], [KeyState.HIT_PENDING] * ROWS, answers)
        self.load_and_verify(prefix, golden, 2)
        d = self.disk()
        self.assertEqual((d["promotions_ok"], d["promotions_failed"], d["read_corrupt"]),
                         (ROWS, 0, 0), d)

    def test_a_promotion_keeps_the_rows_its_lookup_answers_as_hits(self):
        # The head of a prefix is in DRAM, its tail only on disk: the lookup answers the head
        # HIT and promotes the tail. The tail's rows must not be taken from the head's (a
        # prefix's head is then the least recently used: its tail was evicted first). The
        # promotion passes the lookup's hits to its PrepareStore, which never evicts them.
        prefix = keys(b"head", ROWS)
        golden = [self.kv.golden[b] for b in PREFIX_BLOCKS]
        self.store(prefix, PREFIX_BLOCKS, 1)
        self.wait_spilled(ROWS)
        # Two other keys evict the prefix's tail; its head is now the least recently used.
        evicted = self.store(keys(b"other", 2), OTHER_BLOCKS[:2], 2)
        self.assertEqual(sorted(evicted), sorted(prefix[2:]))
        self.wait_spilled(self.stored)
        states = self.scheduler.lookup(prefix)
        self.assertEqual(states, [KeyState.HIT] * 2 + [KeyState.HIT_PENDING] * 2)
        # What the lookup answered as a hit loads at once, as any HIT does.
        self.load_and_verify(prefix[:2], golden[:2], 3)
        self.lookup_until_hit(prefix)
        self.assertEqual(self.disk()["promotions_started"], 2)  # the tail only

if __name__ == "__main__":
    unittest.main()
