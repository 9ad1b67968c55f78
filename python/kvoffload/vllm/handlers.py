"""Worker side: vLLM OffloadingHandlers that submit each transfer as a kvoffloadd job.

One daemon session per worker (Worker.connect_cuda, rank = the vLLM model-parallel rank)
registers the worker's canonical KV tensors once; two handlers share it:

  store (GPULoadStoreSpec → KvoffloadLoadStoreSpec): the worker records one of its interprocess
      CUDA events on the current stream (after the step's KV writes) and submits the job with it;
      the daemon copies only once the event fired, so a store reads finished KV only.
  load (KvoffloadLoadStoreSpec → GPULoadStoreSpec): the same event orders the copy after what
      the engine did to the blocks (zeroing new blocks); the job is reported finished only once
      its GPU writes are done, and vLLM schedules the request only after get_finished says so.

A session the daemon ended (a restart, the engine dropped) fails its jobs in flight and is
registered again by the next transfer (at most every REDIAL_INTERVAL_S).

get_finished() reports each job with the daemon's verdict: a failed job (any copy failed, a
vote missing, the region re-created, the session lost, a part refused) is reported with
success=False, never as success. vLLM's scheduler completes every store with success=True, so
before a failed store is reported the worker completes its keys with success=False on the
engine's index (a Scheduler handle opened on the first failure): their rows are freed and never
read as stored. wait(job_ids) blocks until those jobs ended, bounded by wait_timeout_s.

The CUDA-specific part is _CudaEvents (an event slot per job in flight, recorded on torch's
current stream); a worker registered on the daemon's host backend (tests, GPU-less nodes; its
canonical tensors are kvoffload.HostTensor) uses no events. Thread-safe.
"""

import array
import collections
import logging
import threading
import time

from ..client import KvoffloadError, StatusCode, Worker
from ..host import HostTensor
from ..tensors import TensorView, merge_adjacent
from . import MEDIUM, config
from ._vllm import OffloadingHandler, transfer_result

logger = logging.getLogger("kvoffload.vllm")

REDIAL_INTERVAL_S = 5.0  # at most one attempt this often to register again after a lost session

_STORE = ("GPU", MEDIUM)
_LOAD = (MEDIUM, "GPU")


def model_parallel_rank(vllm_config):
    """This worker's rank in [0, world_size) of its engine replica: pp_rank × tp + tp_rank."""
    try:
        from vllm.distributed import parallel_state
        tp = parallel_state.get_tensor_model_parallel_world_size()
        tp_rank = parallel_state.get_tensor_model_parallel_rank()
        pp_rank = parallel_state.get_pp_group().rank_in_group
        return pp_rank * tp + tp_rank
    except (ImportError, AssertionError, AttributeError):
        return int(getattr(vllm_config.parallel_config, "rank", 0) or 0)


def _ids(block_ids):
    """A block id sequence (numpy int64 array or list) as array('Q')."""
    tobytes = getattr(block_ids, "astype", None)
    if tobytes is not None:  # numpy: one copy, no Python ints
        out = array.array("Q")
        out.frombytes(block_ids.astype("<u8").tobytes())
        return out
    return array.array("Q", (int(b) for b in block_ids))


def connect(settings, spec, mp_rank, kv_caches, open_index):
    """Registers the worker's canonical KV tensors; returns the shared _Session. open_index()
    opens this engine's index (a kvoffload.Scheduler), used to release failed stores."""
    tensors = list(kv_caches.tensors)

    def dial():
        worker, events = _register(settings, spec, mp_rank, tensors)
        logger.info("kvoffload: worker mp_rank %d registered (slot %d of %d, %d rows)", mp_rank,
                    worker.info.slot, worker.info.num_copies, worker.info.num_rows)
        return worker, events

    try:
        worker, events = dial()
    except KvoffloadError as e:
        raise config.explain(e, spec, settings.socket_path) from None
    return _Session(worker, events, settings.wait_timeout_s, open_index, redial=dial)


def _register(settings, spec, mp_rank, tensors):
    """(Worker, _CudaEvents or None) for the canonical tensors."""
    if tensors and all(isinstance(t.tensor, HostTensor) for t in tensors):
        worker = Worker.connect_host(settings.socket_path, spec, mp_rank,
                                     [t.tensor for t in tensors],
                                     open_timeout_s=settings.open_timeout_s,
                                     call_timeout_s=settings.call_timeout_s)
        return worker, None
    views = merge_adjacent([
        TensorView(t.tensor.data_ptr(), int(t.tensor.shape[0]),
                   int(t.tensor.stride(0)) * int(t.tensor.element_size()),
                   int(t.page_size_bytes)) for t in tensors])
    worker = Worker.connect_cuda(settings.socket_path, spec, mp_rank, views,
                                 num_events=settings.num_events,
                                 open_timeout_s=settings.open_timeout_s,
                                 call_timeout_s=settings.call_timeout_s)
    return worker, _CudaEvents(worker)


class _CudaEvents:
    """The worker's interprocess CUDA events: one per job in flight, recorded on torch's current
    stream when the job is submitted, reused once its job has finished."""

    def __init__(self, worker):
        self._worker = worker
        self._free = collections.deque(range(worker.info.num_events))

    def available(self):
        return bool(self._free)

    def record(self):
        slot = self._free.popleft()
        try:
            self._worker.record_event(slot, None)  # None: torch.cuda.current_stream()
        except BaseException:
            self._free.append(slot)
            raise
        return slot

    def release(self, slot):
        if slot >= 0:
            self._free.append(slot)


_Job = collections.namedtuple("_Job", ["vllm_id", "transfer_type", "event", "start", "keys"])


class _Session:
    """One daemon session shared by the store and load handlers of a worker."""

    def __init__(self, worker, events, wait_timeout_s, open_index, redial=None):
        self.worker = worker
        self._open_index = open_index
        self._redial = redial  # () -> (Worker, events): a new session after this one ended
        self._next_redial = 0.0
        self._index = None  # opened on the first failed store
        self._events = events  # None: host backend, no events
        self._wait_timeout_s = wait_timeout_s
        self._lock = threading.RLock()
        self._jobs = collections.OrderedDict()  # daemon job id -> _Job, submission order
        self._finished = {_STORE: [], _LOAD: []}
        self._lost = False
        self.store_handler = KvoffloadTransferHandler(self, _STORE)
        self.load_handler = KvoffloadTransferHandler(self, _LOAD)

    # -- submit ------------------------------------------------------------------------------

    def submit(self, transfer_type, job_id, spec):
        """Submits one vLLM transfer. Always True: vLLM's connector asserts on False, so a
        transfer that cannot be submitted is reported failed by the next get_finished."""
        src, dst = spec
        gpu, rows_spec = (src, dst) if transfer_type == _STORE else (dst, src)
        blocks = _ids(gpu.block_ids)
        rows = _ids(rows_spec.block_ids)
        bpr = self.worker.info.blocks_per_row
        with self._lock:
            keys = getattr(rows_spec, "keys", ()) if transfer_type == _STORE else ()
            if len(blocks) != len(rows) * bpr:
                return self._refuse(
                    transfer_type, job_id, keys, "%d GPU blocks for %d rows of %d blocks (a load "
                    "that starts inside a row is not supported)" % (len(blocks), len(rows), bpr))
            if not 0 <= job_id < 1 << 32:
                return self._refuse(transfer_type, job_id, keys,
                                    "the job id is outside [0, 2^32)")
            if not self._session_ok():
                return self._refuse(transfer_type, job_id, keys,
                                    "the session with kvoffloadd ended")
            if not rows:
                self._finished[transfer_type].append(transfer_result(job_id, True, 0, 0.0,
                                                                     transfer_type))
                return True
            daemon_id = (int(getattr(rows_spec, "job_nonce", 0)) << 32) | job_id
            submit = (self.worker.submit_store if transfer_type == _STORE else
                      self.worker.submit_load)
            event = -1
            try:
                if self._events is not None:
                    self._make_event_room()
                    event = self._events.record()
                submit(daemon_id, blocks, rows, event_index=event,
                       region_epoch=int(getattr(rows_spec, "region_epoch", 0)))
            except KvoffloadError as e:
                if self._events is not None:
                    self._events.release(event)
                return self._refuse(transfer_type, job_id, keys, str(e))
            self._jobs[daemon_id] = _Job(job_id, transfer_type, event, time.monotonic(), keys)
        return True

    def _refuse(self, transfer_type, job_id, keys, why):
        logger.warning("kvoffload: %s job %d not submitted, reported failed: %s",
                       "store" if transfer_type == _STORE else "load", job_id, why)
        self._release_failed_store(keys)
        self._finished[transfer_type].append(transfer_result(job_id, False, 0, 0.0,
                                                             transfer_type))
        return True

    def _make_event_room(self):
        """Every event is held by a job in flight: wait for the oldest to end."""
        while not self._events.available():
            self._collect()
            if self._events.available():
                return
            if not self._jobs:
                raise KvoffloadError(StatusCode.INTERNAL, "kvoffload: no CUDA event is free and "
                                     "no job is in flight")
            self._wait_one(next(iter(self._jobs)), time.monotonic() + self._wait_timeout_s)

    # -- verdicts ----------------------------------------------------------------------------

    def _record(self, daemon_id, ok, code, message, nbytes):
        job = self._jobs.pop(daemon_id, None)
        if job is None:
            return  # not a job of this session (or already reported)
        if self._events is not None:
            self._events.release(job.event)
        if not ok:
            logger.warning("kvoffload: %s job %d failed: %s: %s",
                           "store" if job.transfer_type == _STORE else "load", job.vllm_id,
                           code, message)
            self._release_failed_store(job.keys)
        self._finished[job.transfer_type].append(transfer_result(
            job.vllm_id, bool(ok), nbytes, time.monotonic() - job.start, job.transfer_type))

    def _release_failed_store(self, keys):
        """Completes a failed store's keys with success=False on the engine's index, so that
        vLLM's later complete_store(success=True) cannot mark them stored. Errors are logged:
        NOT_FOUND or not WRITING means another rank (or the daemon) released them first."""
        if not keys:
            return
        try:
            if self._index is None:
                self._index = self._open_index()
            self._index.complete_store(keys, success=False)
        except KvoffloadError as e:
            logger.info("kvoffload: releasing the keys of a failed store: %s", e)

    def _fail_all(self, error):
        """The session ended: every job in flight is reported failed."""
        if not self._lost:
            logger.error("kvoffload: the worker's session with kvoffloadd ended (%s); its jobs "
                         "are reported failed, and it registers again (every %.0f s)", error,
                         REDIAL_INTERVAL_S)
        self._lost = True
        for daemon_id in list(self._jobs):
            self._record(daemon_id, False, "UNAVAILABLE", str(error), 0)

    def _session_ok(self):
        """True when the session is live, or was ended and could be registered again (the
        daemon restarted, or ended it): a new session, its jobs in flight reported failed."""
        if not self._lost:
            try:
                self.worker.check_session()
                return True
            except KvoffloadError as e:
                self._fail_all(e)
        now = time.monotonic()
        if self._redial is None or now < self._next_redial:
            return False
        self._next_redial = now + REDIAL_INTERVAL_S
        try:
            worker, events = self._redial()
        except KvoffloadError as e:
            logger.warning("kvoffload: registering the worker again failed: %s", e)
            return False
        old, self.worker, self._events = self.worker, worker, events
        self._lost = False
        old.close()
        logger.warning("kvoffload: the worker registered again (session %d)",
                       worker.info.session_id)
        return True

    def _collect(self):
        try:
            finished = self.worker.poll()
        except KvoffloadError as e:
            self._fail_all(e)
            return
        for f in finished:
            self._record(f.job_id, f.ok, f.code_name, f.message, f.bytes)
        if self._jobs and not self.worker.alive:
            try:
                self.worker.check_session()
            except KvoffloadError as e:
                self._fail_all(e)

    def _wait_one(self, daemon_id, deadline):
        try:
            f = self.worker.wait(daemon_id, timeout_s=max(0.0, deadline - time.monotonic()))
        except KvoffloadError as e:
            if e.code == StatusCode.DEADLINE_EXCEEDED:
                raise KvoffloadError(e.code, "kvoffload: job %d not finished after %.0f s "
                                     "(kv_connector_extra_config wait_timeout_s): %s" %
                                     (self._jobs[daemon_id].vllm_id, self._wait_timeout_s,
                                      e.message)) from None
            self._fail_all(e)
            return
        self._record(f.job_id, f.ok, f.code_name, f.message, f.bytes)

    def get_finished(self, transfer_type):
        with self._lock:
            self._collect()
            out, self._finished[transfer_type] = self._finished[transfer_type], []
            return out

    def wait(self, transfer_type, job_ids):
        deadline = time.monotonic() + self._wait_timeout_s
        with self._lock:
            self._collect()
            for daemon_id, job in list(self._jobs.items()):
                if job.transfer_type == transfer_type and job.vllm_id in job_ids and \
                        daemon_id in self._jobs:
                    self._wait_one(daemon_id, deadline)

    def close(self):
        with self._lock:
            self.worker.close()
            if self._index is not None:
                self._index.close()


class KvoffloadTransferHandler(OffloadingHandler):
    """One direction (store or load) of a worker's kvoffload session."""

    def __init__(self, session, transfer_type):
        self._session = session
        self._type = transfer_type

    def transfer_async(self, job_id, spec):
        return self._session.submit(self._type, job_id, spec)

    def get_finished(self):
        return self._session.get_finished(self._type)

    def wait(self, job_ids):
        self._session.wait(self._type, set(job_ids))

    def shutdown(self):
        self._session.close()
