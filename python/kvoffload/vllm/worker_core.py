"""The worker core: a worker's session with kvoffloadd, shared by the store and load sides (the
rules are in kvoffload.vllm.core)."""

import array
import collections
import os
import threading
import time

from ..client import KvoffloadError, SessionPhase, StatusCode, Worker
from ..host import HostTensor
from ..tensors import TensorView, merge_adjacent
from .core_util import LOAD, STORE, _reconnects_itself, logger

REDIAL_INTERVAL_S = 1.0   # worker: at most one attempt this often to register again
RETRY_WINDOW_S = 30.0     # worker: a job is resubmitted on a new session until this long after
                          # its first submit; then it has failed (bounded retry)



def _ids(block_ids):
    """A block id sequence (numpy int64 array or list) as array('Q')."""
    if hasattr(block_ids, "astype"):  # numpy: one copy, no Python ints
        out = array.array("Q")
        out.frombytes(block_ids.astype("<u8").tobytes())
        return out
    return array.array("Q", (int(b) for b in block_ids))


def _memfd_of(address):
    """(fd, allocation_bytes, offset) of the memfd mapping that holds `address` in this process
    (a torch CPU tensor over a kvoffload.HostAllocation, on the daemon's host backend)."""
    with open("/proc/self/maps") as f:
        for line in f:
            parts = line.split(None, 5)
            lo, hi = (int(x, 16) for x in parts[0].split("-"))
            if not lo <= address < hi:
                continue
            path = parts[5].strip() if len(parts) > 5 else ""
            if not path.startswith("/memfd:"):
                raise KvoffloadError(StatusCode.FAILED_PRECONDITION,
                                     "kvoffload.vllm: a CPU KV tensor at %#x is not in a memfd "
                                     "(%r); the host backend needs kvoffload.HostAllocation "
                                     "memory" % (address, path or "anonymous"))
            inode = int(parts[4])
            map_offset = int(parts[2], 16)
            for name in os.listdir("/proc/self/fd"):
                try:
                    st = os.stat("/proc/self/fd/" + name)
                except OSError:
                    continue
                if st.st_ino == inode and os.readlink("/proc/self/fd/" + name).startswith(
                        "/memfd:"):
                    return int(name), st.st_size, map_offset + address - lo
            raise KvoffloadError(StatusCode.FAILED_PRECONDITION,
                                 "kvoffload.vllm: the memfd of the CPU KV tensor at %#x has no "
                                 "open descriptor in this process" % address)
    raise KvoffloadError(StatusCode.FAILED_PRECONDITION,
                         "kvoffload.vllm: no mapping holds the CPU KV tensor at %#x" % address)


def _is_cpu_tensor(t):
    device = getattr(t, "device", None)
    return device is not None and getattr(device, "type", str(device)) == "cpu"


def register(settings, spec, mp_rank, canonical_tensors):
    """(kvoffload.Worker, _CudaEvents or None) for vLLM's canonical KV tensors: HostTensors
    (tests), torch CPU tensors over a memfd (host backend) or CUDA tensors."""
    tensors = list(canonical_tensors)
    kw = dict(open_timeout_s=settings.open_timeout_s, call_timeout_s=settings.call_timeout_s)
    if tensors and all(isinstance(t.tensor, HostTensor) for t in tensors):
        return Worker.connect_host(settings.socket_path, spec, mp_rank,
                                   [t.tensor for t in tensors], **kw), None
    if tensors and all(_is_cpu_tensor(t.tensor) for t in tensors):
        host = []
        for t in tensors:
            x = t.tensor
            fd, size, offset = _memfd_of(x.data_ptr())
            host.append(HostTensor("memfd:%d" % fd, size, offset, int(x.shape[0]),
                                   int(x.stride(0)) * int(x.element_size()),
                                   int(t.page_size_bytes)))
        return Worker.connect_host(settings.socket_path, spec, mp_rank, host, **kw), None
    views = merge_adjacent([
        TensorView(t.tensor.data_ptr(), int(t.tensor.shape[0]),
                   int(t.tensor.stride(0)) * int(t.tensor.element_size()),
                   int(t.page_size_bytes)) for t in tensors])
    worker = Worker.connect_cuda(settings.socket_path, spec, mp_rank, views,
                                 num_events=settings.num_events, **kw)
    return worker, _CudaEvents(worker)


class _CudaEvents:
    """The worker's interprocess CUDA events: one per job in flight, recorded on torch's current
    stream when the job is submitted (the daemon copies only after it fired), reused once its
    job has finished."""

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


class Job:
    """One vLLM transfer on this worker."""
    __slots__ = ("vllm_id", "direction", "daemon_id", "gpu", "rows", "ranges", "epoch", "keys",
                 "event", "first_submit", "submitted", "sent", "gpu_blocks")

    def __init__(self, vllm_id, direction, daemon_id, gpu, rows, ranges, epoch, keys):
        self.vllm_id = vllm_id
        self.direction = direction
        self.daemon_id = daemon_id
        self.gpu = gpu          # array('Q') of GPU blocks (whole-row submits)
        self.rows = rows        # array('Q') of rows
        self.ranges = ranges    # [(gpu_block, row, first_block, num_blocks)] or None
        self.epoch = epoch
        self.keys = keys        # a store's salted keys (released when it fails)
        self.event = -1
        self.first_submit = time.monotonic()
        self.submitted = False  # a part is with the daemon on the current session
        self.sent = False       # a session accepted a part (a store is never sent twice;
                                # a submit that raised reached no daemon and may be resent)
        self.gpu_blocks = ()


Finished = collections.namedtuple("Finished", ["vllm_id", "direction", "ok", "nbytes",
                                               "seconds"])


def plan_ranges(gpu_blocks, rows, blocks_per_row, first_index):
    """A load of len(gpu_blocks) GPU blocks from `rows`, starting at block
    first_index % blocks_per_row of rows[0] (vLLM's GPULoadStoreSpec.block_indices[0] is the
    request's block index of gpu_blocks[0]). Returns None for whole rows (a plain submit),
    else sub-row ranges (gpu_block, row, first_block, num_blocks) of consecutive GPU block ids
    inside one row. Raises ValueError when the blocks do not fit the rows."""
    bpr = blocks_per_row
    n = len(gpu_blocks)
    skip = first_index % bpr if bpr > 1 else 0
    if skip == 0 and n == len(rows) * bpr:
        return None
    if not rows or n == 0 or skip + n > len(rows) * bpr or skip + n <= (len(rows) - 1) * bpr:
        raise ValueError("%d GPU blocks starting at block %d of a row do not fit %d rows of %d "
                         "blocks" % (n, skip, len(rows), bpr))
    ranges = []
    for j, gpu in enumerate(gpu_blocks):
        logical = skip + j
        row, first = rows[logical // bpr], logical % bpr
        if ranges:
            g, r, f, c = ranges[-1]
            if r == row and f + c == first and g + c == gpu:
                ranges[-1] = (g, r, f, c + 1)
                continue
        ranges.append((gpu, row, first, 1))
    return ranges


class WorkerCore:
    """A worker's session with kvoffloadd (thread-safe), shared by the store and load sides.

    dial() -> (kvoffload.Worker, _CudaEvents or None) registers the worker (again);
    open_index() -> kvoffload.Scheduler (to release a failed store's keys). load_errors_wired():
    whether vLLM will read take_load_error_blocks() (then failed loads are reported as finished
    and their GPU blocks as load errors; else they are reported with ok=False).
    """

    def __init__(self, dial, open_index, wait_timeout_s, retry_window_s=RETRY_WINDOW_S):
        self._dial = dial
        self._open_index = open_index
        self._wait_timeout_s = wait_timeout_s
        self._retry_window_s = retry_window_s
        self._lock = threading.RLock()
        self.worker, self._events = dial()
        self._lost = False
        self._next_redial = 0.0
        self._index = None
        self._jobs = collections.OrderedDict()  # daemon id -> Job, submission order
        self._finished = {STORE: [], LOAD: []}
        self._load_error_blocks = set()
        self.load_errors_wired = False
        self._closed = False

    @property
    def blocks_per_row(self):
        return self.worker.info.blocks_per_row

    # -- submit ------------------------------------------------------------------------------

    def submit(self, direction, vllm_id, gpu_block_ids, first_index, rows_spec):
        """Submits one vLLM transfer; never raises. rows_spec: the kvoffload side
        (block_ids = rows, region_epoch, job_nonce, keys, failed)."""
        with self._lock:
            keys = list(getattr(rows_spec, "keys", ()) or ()) if direction == STORE else []
            nonce = int(getattr(rows_spec, "job_nonce", 0) or 0)
            daemon_id = ((nonce & 0xffffffff) << 32) | (int(vllm_id) & 0xffffffff)
            gpu = _ids(gpu_block_ids)
            rows = _ids(rows_spec.block_ids)
            job = Job(vllm_id, direction, daemon_id, gpu, rows, None,
                      int(getattr(rows_spec, "region_epoch", 0) or 0), keys)
            job.gpu_blocks = gpu
            if getattr(rows_spec, "failed", False):
                return self._fail(job, "the scheduler could not pin the rows (prepare_load "
                                  "failed)")
            if not rows and not gpu:
                self._finished[direction].append(Finished(vllm_id, direction, True, 0, 0.0))
                return
            bpr = self.blocks_per_row
            if direction == STORE:
                if len(gpu) != len(rows) * bpr:
                    return self._fail(job, "%d GPU blocks for %d rows of %d blocks (a store "
                                      "covers whole offloaded blocks)" % (len(gpu), len(rows),
                                                                          bpr))
            else:
                try:
                    job.ranges = plan_ranges(gpu, rows, bpr, int(first_index or 0))
                except ValueError as e:
                    return self._fail(job, str(e))
            self._jobs[daemon_id] = job
            self._submit(job)

    def _submit(self, job):
        """Sends the job's part on the current session. A session that ended leaves it
        waiting for a resubmit; a refusal fails it."""
        if not self._session_ok():
            return
        event = -1
        try:
            if self._events is not None:
                self._make_event_room()
                event = self._events.record()
            if job.ranges is not None:
                self.worker.submit_ranges(job.daemon_id, job.direction, job.ranges,
                                          event_index=event, region_epoch=job.epoch)
            elif job.direction == STORE:
                self.worker.submit_store(job.daemon_id, job.gpu, job.rows, event_index=event,
                                         region_epoch=job.epoch)
            else:
                self.worker.submit_load(job.daemon_id, job.gpu, job.rows, event_index=event,
                                        region_epoch=job.epoch)
        except Exception as e:  # noqa: BLE001 — never into vLLM
            if self._events is not None:
                self._events.release(event)
            if isinstance(e, KvoffloadError) and (
                    e.code in (StatusCode.UNAVAILABLE, StatusCode.ABORTED, StatusCode.CANCELLED)
                    or not self.worker.alive):
                self._session_ended(e)
                return
            self._jobs.pop(job.daemon_id, None)
            self._fail(job, str(e))
            return
        job.event = event
        job.submitted = True
        job.sent = True  # accepted on a session: a store is never sent again

    def _make_event_room(self):
        """Every event is held by a job in flight: wait for the oldest to end."""
        while not self._events.available():
            self._collect()
            if self._events.available():
                return
            pending = [j for j in self._jobs.values() if j.submitted]
            if not pending:
                raise KvoffloadError(StatusCode.INTERNAL, "kvoffload: no CUDA event is free and "
                                     "no job is in flight")
            self._wait_job(pending[0], time.monotonic() + self._wait_timeout_s)

    # -- verdicts ----------------------------------------------------------------------------

    def _fail(self, job, why):
        """The job failed for good: a store's keys are made unreadable, a load's GPU blocks
        become load errors; vLLM hears of it as finished (see the module docstring)."""
        logger.warning("kvoffload: %s job %d failed: %s", job.direction, job.vllm_id, why)
        ok = True
        if job.direction == STORE:
            self._release_keys(job.keys, job.epoch)
        elif self.load_errors_wired:
            self._load_error_blocks.update(int(b) for b in job.gpu_blocks)
        else:
            ok = False
        self._finished[job.direction].append(Finished(job.vllm_id, job.direction, ok, 0,
                                       time.monotonic() - job.first_submit))

    def _record(self, daemon_id, ok, message, nbytes):
        job = self._jobs.pop(daemon_id, None)
        if job is None:
            return  # not a job of this worker (or already reported)
        if self._events is not None:
            self._events.release(job.event)
            job.event = -1
        if not ok:
            self._fail(job, message)
            return
        self._finished[job.direction].append(Finished(job.vllm_id, job.direction, True, nbytes,
                                       time.monotonic() - job.first_submit))

    def _release_keys(self, keys, epoch=0):
        """CompleteStore(false) for a failed store's keys, so that vLLM's complete_store(True)
        can never make them readable (the daemon also drops rows of a failed store job). Not
        in a region other than the one the store was planned in (`epoch`): there the keys are
        not this store's (a restart re-created the region; a new store may hold the key)."""
        if not keys:
            return
        try:
            if self._index is None:
                self._index = self._open_index()
            if epoch:
                self._index.lookup(keys[:1])  # re-opens first if the daemon went away
                if self._index.region_epoch != epoch:
                    logger.info("kvoffload: a failed store's keys are not released: the region "
                                "was re-created since (epoch %x -> %x)", epoch,
                                self._index.region_epoch)
                    return
            self._index.complete_store(keys, success=False)
        except KvoffloadError as e:
            if self._index is not None and e.code in (StatusCode.UNAVAILABLE,
                                                      StatusCode.ABORTED):
                try:
                    self._index.close()
                except Exception:  # noqa: BLE001
                    pass
                self._index = None
            logger.info("kvoffload: releasing the keys of a failed store: %s", e)

    # -- the session -------------------------------------------------------------------------

    def _session_ended(self, error):
        if not self._lost:
            logger.error("kvoffload: the worker's session with kvoffloadd ended (%s); it "
                         "registers again and resubmits its jobs for up to %.0f s", error,
                         self._retry_window_s)
        self._lost = True
        verdicts_come = _reconnects_itself(self.worker)
        for job in list(self._jobs.values()):
            if job.submitted and verdicts_come:
                # The client fails every job it had in flight with a verdict of its own (the
                # daemon may have been copying it): wait for that verdict; never resubmit it, a
                # second copy could race the first into GPU blocks vLLM reuses.
                continue
            if job.submitted and self._events is not None:
                self._events.release(job.event)
            job.event = -1
            job.submitted = False
            if job.direction == STORE and job.sent:
                # A row takes one store job: a store the daemon may have seen is never sent
                # again. It is reported finished and its keys end unreadable.
                self._jobs.pop(job.daemon_id, None)
                self._fail(job, "the session with kvoffloadd ended with the store in flight "
                           "(%s)" % error)

    def _session_ok(self):
        """True when the session is live, or could be registered again now."""
        if not self._lost:
            return True
        if _reconnects_itself(self.worker):
            try:
                state = self.worker.session_state()
            except KvoffloadError as e:  # a closed handle: dial a new session below
                logger.info("kvoffload: reading the session's state: %s", e)
                state = None
            if state is not None and state.live:
                self._lost = False
                logger.warning("kvoffload: the worker registered again by itself (session %d, "
                               "generation %d%s); resubmitting %d jobs no session took",
                               state.session_id, state.generation,
                               ", a new region: the blocks offloaded before are gone"
                               if state.region_changes else "",
                               sum(1 for j in self._jobs.values() if not j.submitted))
                return True
            if state is not None and state.phase == SessionPhase.RECONNECTING:
                return False
            # Ended for good (the daemon closed it for a reason, or refused it): a new one.
        now = time.monotonic()
        if now < self._next_redial:
            return False
        self._next_redial = now + REDIAL_INTERVAL_S
        try:
            worker, events = self._dial()
        except KvoffloadError as e:
            logger.warning("kvoffload: registering the worker again failed: %s", e)
            return False
        old, self.worker, self._events = self.worker, worker, events
        self._lost = False
        try:
            old.close()
        except Exception:  # noqa: BLE001
            pass
        logger.warning("kvoffload: the worker registered again (session %d); resubmitting %d "
                       "jobs", worker.info.session_id, len(self._jobs))
        return True

    def _retry_lost(self):
        """Resubmits jobs the ended session lost (once registered again); fails those past
        their retry window."""
        if not any(not j.submitted for j in self._jobs.values()):
            return
        now = time.monotonic()
        for job in list(self._jobs.values()):
            if job.submitted:
                continue
            if now - job.first_submit > self._retry_window_s:
                self._jobs.pop(job.daemon_id, None)
                self._fail(job, "the session with kvoffloadd ended and no new session took the "
                           "job within %.0f s" % self._retry_window_s)
                continue
            if self._lost and not self._session_ok():
                continue
            self._submit(job)

    def _collect(self):
        # A client that reconnects by itself gives the jobs a lost session had in flight their
        # (failed) verdicts: polled while lost too.
        if not self._lost or _reconnects_itself(self.worker):
            try:
                finished = self.worker.poll()
            except KvoffloadError as e:
                self._session_ended(e)
                finished = []
            for f in finished:
                self._record(f.job_id, f.ok, "%s: %s" % (f.code_name, f.message), f.bytes)
            if not self._lost and self._jobs and not self.worker.alive:
                try:
                    self.worker.check_session()
                except KvoffloadError as e:
                    self._session_ended(e)
        self._retry_lost()

    def _wait_job(self, job, deadline):
        """Waits for one submitted job until `deadline`."""
        try:
            f = self.worker.wait(job.daemon_id,
                                 timeout_s=max(0.0, deadline - time.monotonic()))
        except KvoffloadError as e:
            if e.code == StatusCode.DEADLINE_EXCEEDED:
                return False
            self._session_ended(e)
            return False
        self._record(f.job_id, f.ok, "%s: %s" % (f.code_name, f.message), f.bytes)
        return True

    # -- vLLM-facing ------------------------------------------------------------------------

    def get_finished(self, direction=None):
        """Jobs (of one direction, or both) finished since the last call: [Finished]."""
        with self._lock:
            self._collect()
            out = []
            for d in (STORE, LOAD):
                if direction is None or d == direction:
                    out.extend(self._finished[d])
                    self._finished[d] = []
            return out

    def take_load_error_blocks(self):
        with self._lock:
            out, self._load_error_blocks = self._load_error_blocks, set()
            return out

    def wait(self, vllm_ids, direction=None):
        """Blocks until the jobs ended (the daemon finished them, or they failed for good: a
        refusal, a lost session not replaced within retry_window_s); never raises. There is no
        deadline: vLLM reuses a store's GPU blocks as soon as this returns, so it must not
        return while the daemon may still read them (a stalled daemon stalls the engine here;
        the daemon's --job_timeout_s bounds a job that cannot run). Every wait_timeout_s it logs
        that it is still waiting."""
        start = time.monotonic()
        next_warning = start + self._wait_timeout_s
        with self._lock:
            self._collect()
            while True:
                todo = [j for j in self._jobs.values() if j.vllm_id in vllm_ids and
                        (direction is None or j.direction == direction)]
                if not todo:
                    return
                now = time.monotonic()
                if now >= next_warning:
                    logger.warning("kvoffload: still waiting for %d job(s) after %.0f s (vLLM "
                                   "reuses their GPU blocks only afterwards)", len(todo),
                                   now - start)
                    next_warning = now + self._wait_timeout_s
                job = todo[0]
                if job.submitted and not self._lost:
                    self._wait_job(job, min(next_warning, now + 1.0))
                else:
                    time.sleep(0.05)
                self._collect()

    def close(self):
        with self._lock:
            if self._closed:
                return
            self._closed = True
            for handle in (self.worker, self._index):
                if handle is not None:
                    try:
                        handle.close()
                    except Exception:  # noqa: BLE001
                        pass
