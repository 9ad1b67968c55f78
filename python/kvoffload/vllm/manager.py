"""Scheduler side: vLLM's OffloadingManager over kvoffloadd's index for this engine.

The index has the manager's semantics (DESIGN.md §4), so each method is one daemon call:

  lookup(hashes)          -> Lookup; the number of leading HIT keys (HIT_PENDING ends the run)
  prepare_load(hashes)    -> PrepareLoad; a KvoffloadLoadStoreSpec of the rows, pinned
  touch / complete_load   -> Touch / CompleteLoad
  prepare_store(hashes)   -> PrepareStore; the new keys, their rows, the evicted keys; None when
                             the region cannot make room (RESOURCE_EXHAUSTED, nothing changed)
  complete_store(hashes, success)
                          -> CompleteStore. vLLM's connector completes stores with success=True
                             whatever happened, so a failed store is caught twice: the workers
                             complete a failed job's keys with success=False before vLLM hears of
                             it (handlers.py), and the daemon refuses success=True for rows of a
                             failed job; a refused batch is completed key by key, and a key the
                             daemon will not mark stored is completed with success=False (its row
                             freed, no stored event). A failed store is never reported as stored.
  take_events()           -> stored / removed OffloadingEvents (when KV events are enabled)

When the daemon lost the engine (restarted, or `kvoffloadctl drop`), lookup and prepare_store
open it again (at most every REOPEN_INTERVAL_S). Errors in a step are not raised into vLLM's
scheduler loop: a failed lookup finds no hit, a
failed prepare_store stores nothing, a failed prepare_load returns a spec without rows (the
workers report that load failed), and each is logged (once per minute per call). Errors at
start-up (opening the engine) are raised by KvoffloadSpec with the fix in the message.

Not thread-safe (vLLM calls the manager from the scheduler thread only).
"""

import logging
import time

from ..client import KeyState, KvoffloadError, StatusCode
from . import MEDIUM
from ._vllm import OffloadingEvent, OffloadingManager, PrepareStoreOutput
from .spec import KvoffloadLoadStoreSpec

logger = logging.getLogger("kvoffload.vllm")

MAX_KEYS_PER_CALL = 65536  # the daemon's limit on keys in one index request
REOPEN_INTERVAL_S = 5.0   # at most one attempt this often to re-open a lost engine


def _chunks(keys):
    for i in range(0, len(keys), MAX_KEYS_PER_CALL):
        yield keys[i:i + MAX_KEYS_PER_CALL]


def _unique(keys):
    seen = set()
    out = []
    for k in keys:
        k = bytes(k)
        if k not in seen:
            seen.add(k)
            out.append(k)
    return out


class KvoffloadManager(OffloadingManager):
    """OffloadingManager backed by a kvoffload.Scheduler (the daemon's index of this engine).

    block_size: tokens per offloaded block (for events); job_nonce and the scheduler's region
    epoch travel to the workers in every KvoffloadLoadStoreSpec.
    """

    def __init__(self, scheduler, block_size, job_nonce, enable_events=False, reopen=None):
        self._index = scheduler
        self._block_size = block_size
        self._job_nonce = job_nonce
        self._region_epoch = scheduler.region_epoch
        self._events = [] if enable_events else None
        self._last_warning = {}
        self._reopen_engine = reopen  # () -> a new Scheduler, after the daemon lost the engine
        self._next_reopen = 0.0

    # -- helpers ---------------------------------------------------------------------------

    def _warn(self, call, error):
        now = time.monotonic()
        if now - self._last_warning.get(call, -1e9) >= 60:
            self._last_warning[call] = now
            logger.warning("kvoffload %s failed (the step goes on without it): %s", call, error)

    def _with_engine(self, call):
        """call(index); when the daemon no longer has the engine (NOT_FOUND: restarted, or the
        engine dropped; UNAVAILABLE: not running) the engine is opened again (a new region, so
        rows planned in the old one fail on their region epoch) and the call made once more."""
        try:
            return call(self._index)
        except KvoffloadError as e:
            if e.code not in (StatusCode.NOT_FOUND, StatusCode.UNAVAILABLE) or \
                    not self._reopen(e):
                raise
        return call(self._index)

    def _reopen(self, why):
        now = time.monotonic()
        if self._reopen_engine is None or now < self._next_reopen:
            return False
        self._next_reopen = now + REOPEN_INTERVAL_S
        try:
            index = self._reopen_engine()
        except KvoffloadError as e:
            self._warn("re-opening the engine", e)
            return False
        old, self._index = self._index, index
        self._region_epoch = index.region_epoch
        old.close()
        logger.warning("kvoffload: the engine was gone from kvoffloadd (%s); opened it again "
                       "(%d rows, region epoch %x)", why, index.geometry.num_rows,
                       self._region_epoch)
        return True

    def _spec(self, rows, keys=()):
        return KvoffloadLoadStoreSpec(rows, region_epoch=self._region_epoch,
                                      job_nonce=self._job_nonce, keys=keys)

    def _event(self, keys, removed):
        if self._events is not None and keys:
            self._events.append(OffloadingEvent(block_hashes=list(keys),
                                                block_size=self._block_size, medium=MEDIUM,
                                                removed=removed))

    # -- OffloadingManager -----------------------------------------------------------------

    def lookup(self, block_hashes):
        keys = [bytes(k) for k in block_hashes]
        hits = 0
        try:
            for chunk in _chunks(keys):
                for state in self._with_engine(lambda index: index.lookup(chunk)):
                    if state != KeyState.HIT:
                        return hits
                    hits += 1
        except KvoffloadError as e:
            self._warn("lookup", e)
            return 0
        return hits

    def prepare_load(self, block_hashes):
        keys = [bytes(k) for k in block_hashes]
        rows = []
        done = []
        try:
            for chunk in _chunks(keys):
                rows.extend(self._index.prepare_load(chunk))
                done.extend(chunk)
        except KvoffloadError as e:
            # Not raised into the scheduler loop: a spec without rows makes the workers report
            # the load failed (their GPU blocks do not match), and vLLM recomputes the tokens.
            self._warn("prepare_load", e)
            try:
                if done:
                    self._index.complete_load(done)  # nothing stays pinned for a load not made
            except KvoffloadError:
                pass
            return self._spec([])
        return self._spec(rows)

    def touch(self, block_hashes):
        keys = [bytes(k) for k in block_hashes]
        try:
            # The daemon makes keys[0] the most recent; touch the chunks last to first so the
            # request's first block ends up the most recent overall.
            for start in reversed(range(0, len(keys), MAX_KEYS_PER_CALL)):
                self._index.touch(keys[start:start + MAX_KEYS_PER_CALL])
        except KvoffloadError as e:
            self._warn("touch", e)

    def complete_load(self, block_hashes):
        keys = [bytes(k) for k in block_hashes]
        try:
            for chunk in _chunks(keys):
                self._index.complete_load(chunk)
        except KvoffloadError as e:
            self._warn("complete_load", e)

    def prepare_store(self, block_hashes):
        keys = _unique(block_hashes)
        if len(keys) > MAX_KEYS_PER_CALL:
            keys = keys[:MAX_KEYS_PER_CALL]  # a prefix: the rest is stored by a later step
        try:
            prepared = self._with_engine(lambda index: index.prepare_store(keys))
        except KvoffloadError as e:
            if e.code != StatusCode.RESOURCE_EXHAUSTED:
                self._warn("prepare_store", e)
            return None
        self._event(prepared.evicted_keys, removed=True)
        return PrepareStoreOutput(block_hashes_to_store=list(prepared.keys),
                                  store_spec=self._spec(prepared.rows, prepared.keys),
                                  block_hashes_evicted=list(prepared.evicted_keys))

    def complete_store(self, block_hashes, success=True):
        keys = _unique(block_hashes)
        if not keys:
            return
        stored = []
        for chunk in _chunks(keys):
            try:
                self._index.complete_store(chunk, success=success)
                if success:
                    stored.extend(chunk)
                continue
            except KvoffloadError as e:
                if not success or e.code not in (StatusCode.FAILED_PRECONDITION,
                                                 StatusCode.NOT_FOUND):
                    self._warn("complete_store", e)
                    continue
            stored.extend(self._complete_one_by_one(chunk))
        self._event(stored, removed=False)

    def _complete_one_by_one(self, keys):
        """success=True for a batch the daemon refused: each key on its own. Returns the keys
        the daemon marked stored; the others are completed with success=False (their rows are
        freed, or quarantined while a copy still runs) or were not WRITING (nothing to do)."""
        stored = []
        for key in keys:
            try:
                self._index.complete_store([key], success=True)
                stored.append(key)
                continue
            except KvoffloadError as e:
                if e.code != StatusCode.FAILED_PRECONDITION:
                    continue  # NOT_FOUND: not in the index (already dropped)
                logger.info("kvoffload: block %s not stored: %s", key.hex()[:16], e.message)
            try:
                self._index.complete_store([key], success=False)
            except KvoffloadError:
                pass  # not WRITING: completed before
        return stored

    def take_events(self):
        if not self._events:
            return ()
        events, self._events = self._events, []
        return events
