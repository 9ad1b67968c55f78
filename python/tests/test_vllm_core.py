"""kvoffload.vllm.core's worker core with stand-in workers (no daemon, no vLLM, no GPU): the
paths a host daemon cannot provoke on demand — a session lost with jobs in flight and the
bounded retry after registering again, wait() past its bound, the CUDA event pool — and the
sub-row range planning of loads that start inside an offloaded block."""

import time
import types
import unittest

import kvoffload
from kvoffload import KvoffloadError, StatusCode
from kvoffload.vllm import core, manager_core, worker_core


class FakeWorker:
    """A kvoffload.Worker stand-in: records submits, finishes jobs when told, can lose its
    session."""

    def __init__(self, num_events=0, blocks_per_row=1):
        self.info = types.SimpleNamespace(num_events=num_events, blocks_per_row=blocks_per_row,
                                          session_id=1, replicated=False)
        self.calls = []
        self.done = {}      # daemon id -> FinishedJob handed out by poll
        self.held = set()   # daemon ids that never finish by themselves
        self.alive = True
        self.refuse = None  # a KvoffloadError for the next submit

    def record_event(self, index, stream):
        self.calls.append(("record", index))

    def check_session(self):
        if not self.alive:
            raise KvoffloadError(StatusCode.UNAVAILABLE, "the session with kvoffloadd ended")

    def _submit(self, kind, job_id, event_index, n):
        if not self.alive:
            raise KvoffloadError(StatusCode.UNAVAILABLE, "the session with kvoffloadd ended")
        if self.refuse is not None:
            e, self.refuse = self.refuse, None
            raise e
        self.calls.append((kind, job_id, event_index))
        if job_id not in self.held:
            self.done[job_id] = kvoffload.FinishedJob(job_id, True, 0, "", 4096 * n)

    def submit_store(self, job_id, blocks, rows, event_index=-1, region_epoch=0):
        self._submit("store", job_id, event_index, len(rows))

    def submit_load(self, job_id, blocks, rows, event_index=-1, region_epoch=0):
        self._submit("load", job_id, event_index, len(rows))

    def submit_ranges(self, job_id, direction, ranges, event_index=-1, region_epoch=0):
        self.calls.append(("ranges", job_id, list(ranges)))
        self.done[job_id] = kvoffload.FinishedJob(job_id, True, 0, "", 1)

    def poll(self):
        if not self.alive:
            raise KvoffloadError(StatusCode.UNAVAILABLE, "the session with kvoffloadd ended")
        # One pop per job: a verdict a test's thread adds meanwhile stays for the next poll
        # (swapping in a new dict would drop it, and the waiting test would hang).
        return [self.done.pop(job_id) for job_id in list(self.done)]

    def wait(self, job_id, timeout_s=None):
        if job_id in self.done:
            return self.done.pop(job_id)
        raise KvoffloadError(StatusCode.DEADLINE_EXCEEDED, "not finished")

    def close(self):
        self.alive = False


class ReconnectingWorker(FakeWorker):
    """A kvoffload.Worker of C ABI 3: when the daemon goes away it fails its jobs in flight
    (UNAVAILABLE verdicts, polled while it registers again) and comes back by itself."""

    def __init__(self):
        super().__init__()
        self.phase = kvoffload.SessionPhase.LIVE
        self.generation = 1

    def session_state(self):
        live = self.phase == kvoffload.SessionPhase.LIVE
        return kvoffload.SessionState(self.phase, 0 if live else StatusCode.UNAVAILABLE, "",
                                      self.generation, self.generation - 1, 0, 1, 1)

    def lose(self):
        self.alive = False
        self.phase = kvoffload.SessionPhase.RECONNECTING
        for job_id in self.held:
            self.done[job_id] = kvoffload.FinishedJob(job_id, False, StatusCode.UNAVAILABLE,
                                                      "kvoffloadd went away", 0)
        self.held = set()

    def back(self):
        self.alive = True
        self.phase = kvoffload.SessionPhase.LIVE
        self.generation += 1

    def poll(self):
        # One pop per job: a verdict a test's thread adds meanwhile stays for the next poll
        # (swapping in a new dict would drop it, and the waiting test would hang).
        return [self.done.pop(job_id) for job_id in list(self.done)]


def rows(r, nonce=7, keys=(), epoch=0):
    return types.SimpleNamespace(block_ids=list(r), job_nonce=nonce, keys=list(keys),
                                 region_epoch=epoch, failed=False)


class WorkerCoreTest(unittest.TestCase):

    def make(self, workers, wait_timeout_s=5.0, retry_window_s=30.0, events=False):
        self.workers = list(workers)
        self.released = []
        index = types.SimpleNamespace(
            complete_store=lambda k, success: self.released.append((list(k), success)),
            close=lambda: None)

        def dial():
            if not self.workers:
                raise KvoffloadError(StatusCode.UNAVAILABLE, "kvoffloadd is not running")
            w = self.workers.pop(0)
            return w, (core._CudaEvents(w) if events else None)

        wc = core.WorkerCore(dial, lambda: index, wait_timeout_s, retry_window_s)
        return wc

    def test_a_lost_session_is_registered_again_and_its_loads_resubmitted(self):
        first, second = FakeWorker(), FakeWorker()
        first.held.update({7 << 32 | 1, 7 << 32 | 2})
        wc = self.make([first, second])
        wc.submit(core.LOAD, 1, [3], 0, rows([0]))
        wc.submit(core.STORE, 2, [4], 0, rows([1], keys=[b"k"]))
        self.assertEqual(wc.get_finished(), [])  # in flight
        first.alive = False  # the daemon restarted
        worker_core.REDIAL_INTERVAL_S, saved = 0.0, worker_core.REDIAL_INTERVAL_S
        self.addCleanup(setattr, worker_core, "REDIAL_INTERVAL_S", saved)
        done = wc.get_finished() + wc.get_finished()  # resubmitted, then finished
        self.assertEqual(sorted((f.vllm_id, f.ok) for f in done), [(1, True), (2, True)])
        # The load went to the new session; the store (a row takes one store job) did not:
        # reported finished to vLLM, its keys released.
        self.assertEqual(second.calls, [("load", 7 << 32 | 1, -1)])
        self.assertEqual(self.released, [([b"k"], False)])
        self.assertIs(wc.worker, second)

    def test_jobs_in_flight_end_with_the_clients_verdict_and_are_never_resubmitted(self):
        # The client reconnects by itself: jobs in flight when the daemon went away fail with its
        # verdict (the daemon may have been copying them: a second copy could race the first into
        # GPU blocks vLLM reuses); a job submitted meanwhile is held and sent once it is back.
        w = ReconnectingWorker()
        w.held.update({7 << 32 | 1, 7 << 32 | 2})
        wc = self.make([w])
        wc.submit(core.LOAD, 1, [3], 0, rows([0]))
        wc.submit(core.STORE, 2, [4], 0, rows([1], keys=[b"k"]))
        w.lose()
        wc.submit(core.LOAD, 3, [5], 0, rows([2]))  # refused: not registered yet
        done = wc.get_finished()
        self.assertEqual(sorted((f.vllm_id, f.ok) for f in done), [(1, False), (2, True)])
        self.assertEqual(self.released, [([b"k"], False)])  # the store's keys never readable
        w.back()
        done = wc.get_finished() + wc.get_finished()
        self.assertEqual([(f.vllm_id, f.ok) for f in done], [(3, True)])
        self.assertEqual([c[1] for c in w.calls], [7 << 32 | 1, 7 << 32 | 2, 7 << 32 | 3])
        self.assertIs(wc.worker, w)  # no second session dialed

    def test_a_job_no_session_takes_within_the_window_fails_and_its_keys_are_released(self):
        first = FakeWorker()
        first.alive = False
        wc = self.make([first], retry_window_s=0.0)
        wc.submit(core.STORE, 2, [3], 0, rows([0], keys=[b"k2"]))
        done = wc.get_finished()
        self.assertEqual([(f.vllm_id, f.ok) for f in done], [(2, True)])  # vLLM asserts success
        self.assertEqual(self.released, [([b"k2"], False)])  # ... but never readable

    def test_wait_returns_only_once_the_daemon_finished_the_store(self):
        # vLLM reuses the store's GPU blocks when wait() returns: no deadline of its own.
        import threading
        w = FakeWorker()
        w.held.add(7 << 32 | 3)
        wc = self.make([w], wait_timeout_s=0.1)
        wc.submit(core.STORE, 3, [3], 0, rows([0], keys=[b"k3"]))

        def finish():
            time.sleep(0.5)
            w.done[7 << 32 | 3] = kvoffload.FinishedJob(7 << 32 | 3, True, 0, "", 1)
        t = threading.Thread(target=finish)
        t.start()
        start = time.monotonic()
        wc.wait({3})
        t.join()
        self.assertGreaterEqual(time.monotonic() - start, 0.45)
        self.assertEqual(self.released, [])  # a store that finished is not released
        self.assertEqual([(f.vllm_id, f.ok) for f in wc.get_finished()], [(3, True)])

    def test_a_failed_load_is_a_load_error_when_vllms_path_is_wired(self):
        w = FakeWorker()
        wc = self.make([w])
        w.refuse = KvoffloadError(StatusCode.FAILED_PRECONDITION, "rows not READY")
        wc.submit(core.LOAD, 4, [5, 6], 0, rows([1, 2]))
        self.assertEqual([(f.vllm_id, f.ok) for f in wc.get_finished()], [(4, False)])
        wc.load_errors_wired = True
        w.refuse = KvoffloadError(StatusCode.FAILED_PRECONDITION, "rows not READY")
        wc.submit(core.LOAD, 5, [5, 6], 0, rows([1, 2]))
        self.assertEqual([(f.vllm_id, f.ok) for f in wc.get_finished()], [(5, True)])
        self.assertEqual(wc.take_load_error_blocks(), {5, 6})
        self.assertEqual(wc.take_load_error_blocks(), set())

    def test_events_are_reused_only_after_their_job_ended(self):
        w = FakeWorker(num_events=2)
        w.held.update({7 << 32 | 0, 7 << 32 | 1})
        wc = self.make([w], events=True, wait_timeout_s=0.2)
        for job in range(2):
            wc.submit(core.STORE, job, [job], 0, rows([job], keys=[b"k%d" % job]))
        self.assertEqual(w.calls, [("record", 0), ("store", 7 << 32 | 0, 0),
                                   ("record", 1), ("store", 7 << 32 | 1, 1)])
        w.done[7 << 32 | 0] = kvoffload.FinishedJob(7 << 32 | 0, True, 0, "", 1)
        wc.submit(core.STORE, 2, [2], 0, rows([2], keys=[b"k2"]))
        self.assertEqual(w.calls[-2:], [("record", 0), ("store", 7 << 32 | 2, 0)])

    def test_a_load_inside_an_offloaded_block_is_submitted_as_ranges(self):
        w = FakeWorker(blocks_per_row=4)
        wc = self.make([w])
        wc.submit(core.LOAD, 6, [10, 11, 12, 20, 21], 1, rows([5, 9]))
        self.assertEqual(w.calls, [("ranges", 7 << 32 | 6, [(10, 5, 1, 3), (20, 9, 0, 2)])])


class FakeScheduler:
    """A kvoffload.Scheduler stand-in: CompleteStore can time out; lookups say pending."""

    def __init__(self):
        self.region_epoch = 1
        self.calls = []
        self.fail_next = 0
        self.states = {}

    def complete_store(self, keys, success=True):
        self.calls.append(("complete_store", list(keys), success))
        if self.fail_next:
            self.fail_next -= 1
            raise KvoffloadError(StatusCode.DEADLINE_EXCEEDED, "CompleteStore within 2s")

    def lookup(self, keys):
        return [self.states.get(k, kvoffload.KeyState.MISS) for k in keys]

    def close(self):
        pass


class ManagerCoreTest(unittest.TestCase):

    def test_an_unanswered_commit_is_sent_again(self):
        index = FakeScheduler()
        m = core.ManagerCore(index, job_nonce=1)
        index.fail_next = 1
        m.complete_store([b"a", b"b"])  # the daemon did not answer
        manager_core.COMMIT_RETRY_S, saved = 0.0, manager_core.COMMIT_RETRY_S
        self.addCleanup(setattr, manager_core, "COMMIT_RETRY_S", saved)
        m.lookup(b"x")  # any later call sends it again
        self.assertEqual(index.calls, [("complete_store", [b"a", b"b"], True)] * 2)
        m.lookup(b"x")
        self.assertEqual(len(index.calls), 2)  # answered: not sent a third time

    def test_a_block_pending_for_too_long_is_a_miss(self):
        index = FakeScheduler()
        index.states[b"p"] = kvoffload.KeyState.HIT_PENDING
        m = core.ManagerCore(index, job_nonce=1, pending_timeout_s=0.2)
        self.assertEqual(m.lookup(b"p"), kvoffload.KeyState.HIT_PENDING)
        time.sleep(0.3)
        self.assertEqual(m.lookup(b"p"), kvoffload.KeyState.MISS)
        index.states[b"p"] = kvoffload.KeyState.HIT
        self.assertEqual(m.lookup(b"p"), kvoffload.KeyState.HIT)


class PlanRangesTest(unittest.TestCase):

    def test_whole_rows_are_a_plain_submit(self):
        self.assertIsNone(core.plan_ranges([1, 2, 3, 4], [0, 1], 2, 0))
        self.assertIsNone(core.plan_ranges([1, 2, 3, 4], [0, 1], 2, 6))

    def test_a_start_inside_a_row(self):
        self.assertEqual(core.plan_ranges([8, 9, 4], [3, 7], 2, 1),
                         [(8, 3, 1, 1), (9, 7, 0, 1), (4, 7, 1, 1)])
        self.assertEqual(core.plan_ranges([8, 9, 10], [3, 7], 2, 3),
                         [(8, 3, 1, 1), (9, 7, 0, 2)])

    def test_blocks_that_do_not_fit_the_rows(self):
        for gpu, r, first in (([1, 2, 3], [0], 0), ([1], [0, 1], 0), ([], [0], 1)):
            with self.assertRaises(ValueError):
                core.plan_ranges(gpu, r, 2, first)


if __name__ == "__main__":
    unittest.main()
