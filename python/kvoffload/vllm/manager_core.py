"""The manager core: the engine's index on kvoffloadd with vLLM's manager semantics (the rules
are in kvoffload.vllm.core)."""

import dataclasses
import os
import time

from ..client import KeyState, KvoffloadError, Reason, StatusCode
from .core_util import _TRANSIENT, _RateLimitedLog, _code, logger, unique

PENDING_TIMEOUT_S = 60.0  # manager: a key pending longer than this looks up as a miss
COMMIT_RETRY_S = 1.0      # manager: unanswered CompleteStores are sent again this often


class ManagerCore:
    """The engine's index on kvoffloadd, with vLLM's manager semantics.

    scheduler: a kvoffload.Scheduler (it re-opens the engine by itself after the daemon went
    away); make_event(keys, removed) builds vLLM's OffloadingEvent. Keys are vLLM's OffloadKey
    bytes; the core
    prefixes them with a cache salt that reset() changes (vLLM's reset_cache: keys stored before
    are never found again and age out of the LRU).
    """

    def __init__(self, scheduler, job_nonce, make_event=None,
                 pending_timeout_s=PENDING_TIMEOUT_S):
        self._index = scheduler
        self.job_nonce = job_nonce
        self.region_epoch = scheduler.region_epoch
        self._make_event = make_event
        self._events = [] if make_event is not None else None
        self._log = _RateLimitedLog()
        self._salt = b""
        self._closed = False
        self._outstanding = {}     # salted key prepared for a store -> its region epoch
        self._loading = {}         # salted key -> [region epoch of each pinning prepare_load]
        self._uncommitted = {}     # salted key -> (success, epoch): CompleteStores to resend
        self._next_commit_retry = 0.0
        self._pending_since = {}   # salted key -> when a lookup first found it pending
        self._pending_timeout_s = pending_timeout_s
        self._pending_stored = []  # salted keys completed but still being written (events)
        # Keys prepared for a store in this scheduler step: vLLM (0.21 on) submits their jobs at
        # the start of the next step's execution, so until the next step they look up as a
        # miss (vLLM recomputes now) rather than pending on a copy that has not started.
        self._unsubmitted = set()
        self._looked_up = False    # a lookup since the last prepare_store: a new step began

    # -- keys ------------------------------------------------------------------------------

    def _k(self, keys):
        salt = self._salt
        if not salt:
            return unique(keys)
        return [salt + k for k in unique(keys)]

    def _unsalt(self, keys):
        salt = self._salt
        if not salt:
            return list(keys)
        n = len(salt)
        return [k[n:] for k in keys if k.startswith(salt)]

    # -- engine (re)opening ----------------------------------------------------------------

    def _call(self, call):
        """call(index); when the daemon no longer has the engine (restarted, not running) the
        call is made once more: kvoffload.Scheduler re-opens the engine on that next call (at
        once UNAVAILABLE while the daemon is still away)."""
        if self._closed:
            raise KvoffloadError(StatusCode.FAILED_PRECONDITION, "the manager was shut down")
        try:
            return call(self._index)
        except KvoffloadError as e:
            if e.code not in (StatusCode.NOT_FOUND, StatusCode.UNAVAILABLE,
                              StatusCode.ABORTED):
                raise
        finally:
            self._sync_epoch()
        try:
            return call(self._index)
        finally:
            self._sync_epoch()

    def _sync_epoch(self):
        """Adopts the region the handle re-opened (kvoffload.Scheduler re-opens by itself after
        the daemon went away). A new epoch: every block cached before is gone; keys planned
        before are not completed in the new region (see _current) and the workers' parts
        planned before fail the daemon's epoch check (FAILED_PRECONDITION), which the worker
        core turns into failed transfers."""
        try:
            epoch = self._index.region_epoch
        except Exception:  # noqa: BLE001 — a closed or broken handle: keep what we knew
            return
        if epoch == self.region_epoch:
            return
        logger.warning("kvoffload: the engine's region on kvoffloadd was re-created (epoch %x -> "
                       "%x, after a daemon restart or a drop): the blocks offloaded before are "
                       "gone", self.region_epoch, epoch)
        self.region_epoch = epoch
        self._pending_since.clear()

    @property
    def scheduler(self):
        return self._index

    # -- index calls -------------------------------------------------------------------------

    def lookup(self, key, own_store_pending_is_miss=False):
        """KeyState of one key: HIT (readable), HIT_PENDING (being written) or MISS. Errors
        are a MISS (logged)."""
        return self.lookup_many((key,), own_store_pending_is_miss)[0]

    def lookup_many(self, keys, own_store_pending_is_miss=False):
        """KeyStates of the keys, in order. own_store_pending_is_miss: a release whose
        complete_store waits for the storing request to finish (vLLM 0.20) passes True, and a
        key still pending because this manager prepared its store and has not completed it is
        a MISS (vLLM recomputes at once, as its own CPU manager does) rather than HIT_PENDING,
        which would hold the request until the storing request ends (docs/vllm.md,
        admission). Otherwise a key this manager prepared in the current scheduler step (its
        store job not submitted yet: step_end) is a MISS too."""
        self._flush_commits()
        k = self._k(keys)
        try:
            states = self._call(lambda index: index.lookup(k))
        except Exception as e:  # noqa: BLE001 — never into vLLM
            self._log.warn("lookup", e)
            return [KeyState.MISS] * len(k)
        self._looked_up = True
        own = self._outstanding if own_store_pending_is_miss else self._unsubmitted
        if own:
            states = [KeyState.MISS if st == KeyState.HIT_PENDING and key in own else st
                      for key, st in zip(k, states)]
        return [self._aged(key, st) for key, st in zip(k, states)]

    def _aged(self, key, state):
        """A key pending for longer than pending_timeout_s is a miss (never a hit)."""
        if state != KeyState.HIT_PENDING:
            if self._pending_since:
                self._pending_since.pop(key, None)
            return state
        now = time.monotonic()
        if key not in self._pending_since and len(self._pending_since) >= 1 << 16:
            self._pending_since.clear()  # bounded: forgotten ages restart (still pending)
        since = self._pending_since.setdefault(key, now)
        if now - since <= self._pending_timeout_s:
            return state
        self._log.warn("lookup", "block %s still being written after %.0f s: a miss" % (
            key.hex()[:16], now - since))
        return KeyState.MISS

    def _flush_commits(self):
        """Sends again the CompleteStores the daemon did not answer."""
        if not self._uncommitted:
            return
        now = time.monotonic()
        if now < self._next_commit_retry:
            return
        self._next_commit_retry = now + COMMIT_RETRY_S
        todo, self._uncommitted = self._uncommitted, {}
        for success in (False, True):
            keys = [k for k, (ok, epoch) in todo.items()
                    if ok == success and epoch == self.region_epoch]  # not in a new region
            if keys:
                self._complete(keys, success)

    def prepare_load(self, keys):
        """Rows of the keys (pinned until complete_load), or None when they cannot be loaded
        (the worker then fails the load through vLLM's load-error path)."""
        k = self._k(keys)
        if not k:
            return []
        try:
            rows = self._call(lambda index: index.prepare_load(k))
        except Exception as e:  # noqa: BLE001 — never into vLLM
            self._log.warn("prepare_load", e)
            return None
        for key in k:
            self._loading.setdefault(key, []).append(self.region_epoch)
        return rows

    def _current(self, keys, table):
        """The keys planned in the current region (a key planned in a region a restart or a
        drop replaced is not completed in the new one, where it may be another store's)."""
        out = []
        for key in keys:
            epoch = table.pop(key, self.region_epoch) if table is self._outstanding else \
                self._pop_load(key)
            if epoch == self.region_epoch:
                out.append(key)
        return out

    def _pop_load(self, key):
        epochs = self._loading.get(key)
        if not epochs:
            return self.region_epoch
        epoch = epochs.pop(0)
        if not epochs:
            del self._loading[key]
        return epoch

    def touch(self, keys):
        """keys[0] becomes the most recent (vLLM's LRU order)."""
        k = self._k(keys)
        if not k:
            return
        try:
            self._index.touch(k)
        except Exception as e:  # noqa: BLE001 — never into vLLM
            if _code(e) != StatusCode.NOT_FOUND:
                self._log.warn("touch", e)
        self._sync_epoch()

    def complete_load(self, keys):
        k = self._current(self._k(keys), self._loading)
        if not k:
            return
        try:
            self._index.complete_load(k)
        except Exception as e:  # noqa: BLE001 — never into vLLM
            if _code(e) != StatusCode.NOT_FOUND:  # NOT_FOUND: planned before a restart
                self._log.warn("complete_load", e)
        self._sync_epoch()

    def prepare_store(self, keys):
        """PreparedStore with unsalted keys (request order), or None when the region cannot
        make room or the daemon is unreachable (nothing stored; vLLM goes on)."""
        self._flush_commits()
        if self._looked_up:  # the first store of a new step: the last step's jobs were sent
            self.step_end()
        k = self._k(keys)
        try:
            prepared = self._call(lambda index: index.prepare_store(k))
        except Exception as e:  # noqa: BLE001 — never into vLLM
            if _code(e) != StatusCode.RESOURCE_EXHAUSTED:
                self._log.warn("prepare_store", e)
            return None
        for key in prepared.keys:
            self._outstanding[key] = self.region_epoch
        self._unsubmitted.update(prepared.keys)
        evicted = self._unsalt(prepared.evicted_keys)
        self._event(evicted, removed=True)
        return dataclasses.replace(prepared, keys=self._unsalt(prepared.keys),
                                   evicted_keys=evicted)

    def step_end(self):
        """The end of a scheduler step (vLLM's on_schedule_end, 0.23 on; before it, the first
        prepare_store after a lookup): the stores prepared before it are submitted by the
        time the next step's lookups run."""
        self._unsubmitted.clear()
        self._looked_up = False

    def store_keys(self, keys):
        """The keys a worker completes with success=False when the store fails (salted)."""
        return self._k(keys)

    def complete_store(self, keys, success=True):
        k = self._current(self._k(keys), self._outstanding)
        self._flush_commits()
        if k:
            self._unsubmitted.difference_update(k)
            self._complete(k, success)

    def _complete(self, k, success):
        planned = self.region_epoch  # the region these keys were planned in
        try:
            self._index.complete_store(k, success=success)
            self._sync_epoch()
            if success:
                self._stored(k)
            return
        except Exception as e:  # noqa: BLE001 — never into vLLM
            self._sync_epoch()
            if _code(e) in _TRANSIENT:
                # Not answered (a stalled daemon, a broken connection): sent again later, so
                # that a finished store does not stay pending for ever. A re-created region
                # answers NOT_FOUND then, and the keys are forgotten.
                self._log.warn("complete_store (sent again later)", e)
                for key in k:
                    self._uncommitted[key] = (success, planned)
                return
            if not success or _code(e) not in (StatusCode.FAILED_PRECONDITION,
                                             StatusCode.NOT_FOUND):
                self._log.warn("complete_store", e)
                return
            if _code(e) == StatusCode.NOT_FOUND and \
                    getattr(e, "reason", "") != Reason.KEY_NOT_IN_INDEX:
                # The engine is gone (a restart, a drop): these keys were planned in a region
                # that no longer exists; nothing of them can be completed.
                return  # the handle re-opens on its next call, in a region without them
        self._stored(self._complete_one_by_one(k))

    def _stored(self, keys):
        """Stored events for completed keys once they are readable: a commit that arrived
        before its store job finished (vLLM 0.20's preemption order) is announced when the job
        is done, and not at all if the job failed."""
        if self._events is None or not keys:
            return
        self._triage(list(keys))

    def _triage(self, keys):
        try:
            states = self._index.lookup(keys)
        except Exception as e:  # noqa: BLE001
            self._log.warn("lookup for stored events", e)
            return
        ready = [k for k, st in zip(keys, states) if st == KeyState.HIT]
        self._pending_stored.extend(k for k, st in zip(keys, states)
                                    if st == KeyState.HIT_PENDING)
        self._event(self._unsalt(ready), removed=False)

    def _complete_one_by_one(self, keys):
        """success=True for a batch the daemon refused (some store failed, or a worker already
        released its keys): each key on its own. Returns the keys the daemon accepted."""
        stored = []
        for key in keys:
            try:
                self._index.complete_store([key], success=True)
                stored.append(key)
                continue
            except KvoffloadError as e:
                if e.code != StatusCode.FAILED_PRECONDITION:
                    continue  # NOT_FOUND: released by a worker, or dropped by the daemon
                logger.info("kvoffload: block %s not stored: %s", key.hex()[:16], e.message)
            try:
                self._index.complete_store([key], success=False)
            except KvoffloadError:
                pass
        return stored

    def _event(self, keys, removed):
        if self._events is not None and keys:
            self._events.append(self._make_event(list(keys), removed))

    def take_events(self):
        self._flush_commits()
        if self._pending_stored:
            pending, self._pending_stored = self._pending_stored, []
            self._triage(pending)
        if not self._events:
            return []
        events, self._events = self._events, []
        return events

    def reset(self):
        """vLLM's reset_cache: nothing stored so far is found again (a new key salt)."""
        outstanding, self._outstanding = list(self._outstanding), {}
        self._unsubmitted.clear()
        if outstanding:  # stores vLLM dropped with the reset: never completed otherwise
            try:
                self._index.complete_store(outstanding, success=False)
            except Exception as e:  # noqa: BLE001
                logger.info("kvoffload: releasing stores dropped by the reset: %s", e)
        self._salt = os.urandom(4)
        self._pending_stored = []
        if self._events is not None:
            self._events = []
        logger.info("kvoffload: offloaded cache reset (new key salt)")

    def close(self):
        if self._closed:
            return
        self._closed = True
        try:
            self._index.close()
        except Exception:  # noqa: BLE001
            pass
