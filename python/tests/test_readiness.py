"""Scheduler.readiness() and wait_until_ready() (outside-test defects).

Against the real kvoffloadd (host backend): an engine's readiness with its exact numbers, and
NOT_FOUND at once for an engine the daemon no longer has. A region that stays half pinned cannot
be held there on demand in the real daemon, so the marshalling of a not-ready answer and of the
wait's DEADLINE_EXCEEDED is checked through a stand-in for the C library (the C ABI and C++
tests run the same wait against a stand-in daemon)."""

import ctypes
import time
import unittest

from kvoffload import KvoffloadError, Readiness, Scheduler, StatusCode, _native

from test_host_backend import Daemon, spec


class ReadinessOfTheRealDaemonTest(unittest.TestCase):

    def setUp(self):
        self.daemon = Daemon()
        self.addCleanup(self.daemon.stop)

    def test_a_ready_engine_with_its_numbers(self):
        scheduler = Scheduler.open(self.daemon.data_socket, spec("py-ready"))
        self.addCleanup(scheduler.close)
        scheduler.wait_until_ready(10)
        r = scheduler.readiness()
        self.assertIsInstance(r, Readiness)
        self.assertEqual(r.region_epoch, scheduler.region_epoch)
        self.assertEqual(r.num_rows, scheduler.geometry.num_rows)
        self.assertEqual(r.rows_not_ready, 0)
        self.assertTrue(r.ready)
        self.assertEqual(r.region_bytes, scheduler.geometry.num_rows * scheduler.geometry.row_bytes)
        self.assertEqual(r.region_ready_bytes, r.region_bytes)
        self.assertGreaterEqual(r.first_ready_seconds, 0)
        self.assertGreaterEqual(r.fully_ready_seconds, r.first_ready_seconds)
        with self.assertRaises(KvoffloadError) as cm:
            scheduler.wait_until_ready(-1)
        self.assertEqual(cm.exception.code, StatusCode.INVALID_ARGUMENT)

    def test_an_engine_the_daemon_no_longer_has_is_not_found_at_once(self):
        scheduler = Scheduler.open(self.daemon.data_socket, spec("py-gone"))
        self.addCleanup(scheduler.close)
        self.daemon.restart()  # a new daemon: no engine py-gone
        with self.assertRaises(KvoffloadError) as cm:
            scheduler.readiness()
        self.assertEqual(cm.exception.code, StatusCode.NOT_FOUND)
        self.assertTrue(cm.exception.message.startswith(
            "engine py-gone/0 is not in the Stats of kvoffloadd at "), cm.exception.message)
        start = time.monotonic()
        with self.assertRaises(KvoffloadError) as cm:
            scheduler.wait_until_ready(30)
        self.assertEqual(cm.exception.code, StatusCode.NOT_FOUND)
        self.assertLess(time.monotonic() - start, 5)


class _HalfPinnedLibrary:
    """The two C calls of readiness, answering as kvoffload_c.h says for a region with 96 of
    its 128 rows not registered yet."""

    def __init__(self):
        self.waits = []  # timeout_ms of each kvo_scheduler_wait_until_ready

    def kvo_scheduler_readiness(self, handle, readiness, err, err_len):
        r = ctypes.cast(readiness, ctypes.POINTER(_native.c_readiness)).contents
        r.region_epoch, r.num_rows, r.rows_not_ready = 0x1f3a9c20d4e5b7, 128, 96
        r.region_bytes, r.region_ready_bytes = 1 << 20, 1 << 18
        r.first_ready_seconds, r.fully_ready_seconds = 0.25, -1.0
        return 0

    def kvo_scheduler_wait_until_ready(self, handle, timeout_ms, err, err_len):
        self.waits.append(timeout_ms)
        message = (b"engine half/0 not ready after %dms: 96 of 128 rows not ready yet, 262144 "
                   b"of 1048576 region bytes registered" % timeout_ms)
        ctypes.memmove(err, message, len(message) + 1)
        return StatusCode.DEADLINE_EXCEEDED

    def kvo_scheduler_close(self, handle):
        pass


class ReadinessMarshallingTest(unittest.TestCase):

    def setUp(self):
        self.lib = _HalfPinnedLibrary()
        self.scheduler = Scheduler(ctypes.c_void_p(1), self.lib)

    def test_a_not_ready_answer_field_by_field(self):
        self.assertEqual(self.scheduler.readiness(), Readiness(
            region_epoch=0x1f3a9c20d4e5b7, num_rows=128, rows_not_ready=96, region_bytes=1048576,
            region_ready_bytes=262144, first_ready_seconds=0.25, fully_ready_seconds=-1.0))
        self.assertFalse(self.scheduler.readiness().ready)

    def test_the_wait_raises_deadline_exceeded_with_how_far_it_got(self):
        with self.assertRaises(KvoffloadError) as cm:
            self.scheduler.wait_until_ready(0.25)
        self.assertEqual(cm.exception.code, StatusCode.DEADLINE_EXCEEDED)
        self.assertEqual(cm.exception.message,
                         "engine half/0 not ready after 250ms: 96 of 128 rows not ready yet, "
                         "262144 of 1048576 region bytes registered")
        with self.assertRaises(KvoffloadError):
            self.scheduler.wait_until_ready(0)
        self.assertEqual(self.lib.waits, [250, 0])  # seconds to the C call's milliseconds


if __name__ == "__main__":
    unittest.main()
