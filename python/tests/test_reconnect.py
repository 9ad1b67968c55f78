"""The package's workers and schedulers come back by themselves (durable regions): kvoffloadd is
killed (SIGKILL) with a job in flight and another starts on the same socket. The job's verdict is
a failure, calls during the outage fail UNAVAILABLE at once, the worker registers again in the
background, the scheduler re-opens and reports the new region, a part planned in the old region
fails FAILED_PRECONDITION, and a new store → load round trip is byte-exact."""

import time
import unittest

from kvoffload import (KeyState, KvoffloadError, Reason, Scheduler, SessionPhase, StatusCode,
                       Worker)

from test_host_backend import WORKER_BYTES_PER_BLOCK, Daemon, HostKv, spec


def kill(daemon):
    """SIGKILL, as a crash: the socket files stay, nobody listens on them."""
    daemon.proc.kill()
    daemon.proc.wait()


def wait_live(worker, generation, timeout_s=10.0):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        state = worker.session_state()
        if state.live and state.generation == generation:
            return state
        time.sleep(0.01)
    raise AssertionError("the worker did not register again: %r" % (worker.session_state(),))


class ReconnectTest(unittest.TestCase):

    def setUp(self):
        self.daemon = Daemon()
        self.addCleanup(self.daemon.stop)

    def worker(self, engine_spec, mp_rank, **kw):
        kv = HostKv()
        self.addCleanup(kv.close)
        worker = Worker.connect_host(self.daemon.data_socket, engine_spec, mp_rank,
                                     kv.host_tensors(), **kw)
        self.addCleanup(worker.close)
        return worker, kv

    def test_killed_daemon_restarted_on_the_same_socket(self):
        s = spec("py-reconnect", world_size=2, local_world_size=2, tp=2)
        scheduler = Scheduler.open(self.daemon.data_socket, s)
        self.addCleanup(scheduler.close)
        old_epoch = scheduler.region_epoch
        w0, kv0 = self.worker(s, 0)
        w1, kv1 = self.worker(s, 1)
        state = w0.session_state()
        self.assertEqual((state.phase, state.generation, state.region_epoch),
                         (SessionPhase.LIVE, 1, old_epoch))

        keys = [b"a", b"b"]
        planned = scheduler.prepare_store(keys)
        w0.submit_store(1, [0, 1], planned.rows, region_epoch=old_epoch)  # w1 never votes
        kill(self.daemon)
        done = w0.wait(1, timeout_s=10)
        self.assertFalse(done.ok)
        self.assertEqual(done.code, StatusCode.UNAVAILABLE, done.message)

        start = time.monotonic()
        with self.assertRaises(KvoffloadError) as cm:
            w0.submit_store(2, [0, 1], planned.rows, region_epoch=old_epoch)
        self.assertEqual(cm.exception.code, StatusCode.UNAVAILABLE)
        self.assertEqual(w0.session_state().phase, SessionPhase.RECONNECTING)
        self.assertFalse(w0.alive)
        with self.assertRaises(KvoffloadError) as cm:
            scheduler.lookup(keys)
        self.assertEqual(cm.exception.code, StatusCode.UNAVAILABLE)
        self.assertLess(time.monotonic() - start, 1.0)
        self.assertEqual(w0.poll(), [])  # job 2 was refused, never reported

        self.daemon.restart()
        s0 = wait_live(w0, 2)
        wait_live(w1, 2)
        self.assertNotEqual(s0.region_epoch, old_epoch)
        self.assertEqual(s0.region_changes, 1)
        self.assertEqual(w0.region_epoch, s0.region_epoch)

        self.assertEqual(scheduler.lookup(keys), [KeyState.MISS] * 2)
        new_epoch = scheduler.region_epoch
        self.assertEqual(new_epoch, s0.region_epoch)
        self.assertEqual((scheduler.region_changes, scheduler.reopens), (1, 1))

        w0.submit_load(3, [0, 1], planned.rows, region_epoch=old_epoch)
        stale = w0.wait(3, timeout_s=10)
        self.assertEqual((stale.code, stale.reason),
                         (StatusCode.FAILED_PRECONDITION, Reason.REGION_EPOCH_MISMATCH))

        stored = scheduler.prepare_store(keys)
        for w in (w0, w1):
            w.submit_store(4, [5, 6], stored.rows, region_epoch=new_epoch)
        for w in (w0, w1):
            self.assertEqual(w.wait(4, timeout_s=10).check().bytes,
                             2 * 2 * WORKER_BYTES_PER_BLOCK)
        scheduler.complete_store(keys)
        rows = scheduler.prepare_load(keys)
        for w, kv in ((w0, kv0), (w1, kv1)):
            kv.clobber(5)
            kv.clobber(6)
            w.submit_load(5, [5, 6], rows, region_epoch=new_epoch)
        for w, kv in ((w0, kv0), (w1, kv1)):
            w.wait(5, timeout_s=10).check()
            self.assertEqual(kv.block_bytes(5), kv.golden[5])
            self.assertEqual(kv.block_bytes(6), kv.golden[6])
        scheduler.complete_load(keys)

    def test_reconnect_false_ends_the_session(self):
        s = spec("py-no-reconnect")
        worker, _ = self.worker(s, 0, reconnect=False)
        scheduler = Scheduler.open(self.daemon.data_socket, s, reconnect=False)
        self.addCleanup(scheduler.close)
        kill(self.daemon)
        self.daemon.restart()
        deadline = time.monotonic() + 10
        while worker.session_state().phase == SessionPhase.LIVE and time.monotonic() < deadline:
            time.sleep(0.01)
        time.sleep(0.2)
        state = worker.session_state()
        self.assertEqual((state.phase, state.code, state.generation),
                         (SessionPhase.ENDED, StatusCode.UNAVAILABLE, 1))
        # Without re-opening, the scheduler's calls keep failing (the engine is not there).
        for _ in range(2):
            with self.assertRaises(KvoffloadError) as cm:
                scheduler.lookup([b"k"])
            self.assertIn(cm.exception.code, (StatusCode.UNAVAILABLE, StatusCode.NOT_FOUND))
        self.assertEqual(scheduler.reopens, 0)


if __name__ == "__main__":
    unittest.main()
