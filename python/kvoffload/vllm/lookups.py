"""Request-level batching of vLLM's lookups: one daemon call for a request's keys, in the
manager core (every vLLM release asks lookup() one key at a time).

vLLM scans a request's keys in order, one lookup() per key, and stops at the first miss. Once
the request's keys are known (from its touch(): 0.20 touches before it looks up, 0.21 and later
after), the first lookup of a scan looks up every key from its position to the end in one
daemon call, and the scan's later lookups are answered from that answer.

The answers are kept for ONE scan only, so they are never staler than the daemon's own answer
in the same step: a scan is consecutive lookups of one request with rising positions and no
other manager call between them, within MAX_SCAN_AGE_S (a guard for releases without
on_schedule_end). Any other call (touch, prepare/complete, reset, end of the step) ends it.

Admission (docs/vllm.md): a READY key answers HIT in the same step; a key being written answers
HIT_PENDING only when its store is bounded; own_store_pending_is_miss (vLLM 0.20, whose
complete_store waits for the storing request to finish) turns a key this manager prepared and
has not completed into a MISS, so vLLM recomputes at once instead of waiting on a running
request. The pending timeout of the core bounds every other pending key.

Not thread-safe (vLLM calls the manager from the scheduler thread only).
"""

import collections
import time

from ..client import KeyState

MAX_REQUESTS = 4096     # key lists kept (releases without on_request_finished forget the oldest)
MAX_SCAN_AGE_S = 0.5    # a scan's answers are not used after this long


class RequestLookups:
    """Lookups of a ManagerCore, batched per request. `token` names a request (vLLM's req_id,
    or None where vLLM's touch() carries no request: the last touch is the request)."""

    def __init__(self, manager_core, own_store_pending_is_miss=False):
        self.core = manager_core
        self._own_pending_is_miss = own_store_pending_is_miss
        self._keys = collections.OrderedDict()  # token -> (keys, {key: position})
        self._scan = None   # (token, {key: KeyState}, last position, when) of the current scan
        self.daemon_calls = 0  # lookups sent to the daemon (measured by the tests)

    def lookup(self, token, key):
        """KeyState of one key of request `token`."""
        known = self._keys.get(token)
        pos = known[1].get(key) if known is not None else None
        if pos is None:
            self._scan = None
            return self._ask([key])[0]
        scan = self._scan
        if scan is not None and scan[0] == token and pos > scan[2] and key in scan[1] and \
                time.monotonic() - scan[3] <= MAX_SCAN_AGE_S:
            self._scan = (token, scan[1], pos, scan[3])
            return scan[1][key]
        batch = known[0][pos:]
        states = dict(zip(batch, self._ask(batch)))
        self._scan = (token, states, pos, time.monotonic())
        return states.get(key, KeyState.MISS)

    def _ask(self, keys):
        self.daemon_calls += 1
        return self.core.lookup_many(keys, self._own_pending_is_miss)

    def touched(self, token, keys):
        """The request's keys, in vLLM's order (its touch)."""
        self._scan = None
        self._keys.pop(token, None)
        self._keys[token] = (keys, {k: i for i, k in enumerate(keys)})
        while len(self._keys) > MAX_REQUESTS:
            self._keys.popitem(last=False)

    def finished(self, token):
        self._keys.pop(token, None)
        if self._scan is not None and self._scan[0] == token:
            self._scan = None

    def end_scan(self):
        """Any manager call other than lookup, and the end of a scheduler step."""
        self._scan = None
