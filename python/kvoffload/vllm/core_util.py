"""What the manager core and the worker core share (kvoffload.vllm.core has the rules)."""

import logging
import time

from ..client import StatusCode

logger = logging.getLogger("kvoffload.vllm")

_TRANSIENT = (StatusCode.DEADLINE_EXCEEDED, StatusCode.UNAVAILABLE, StatusCode.CANCELLED,
              StatusCode.ABORTED, StatusCode.INTERNAL)

STORE = "store"
LOAD = "load"


def _code(error):
    return getattr(error, "code", None)


def _reconnects_itself(worker):
    """A kvoffload.Worker of C ABI 3 registers again by itself after the daemon went away, and
    gives every job it had in flight a (failed) verdict."""
    return hasattr(worker, "session_state")


def as_key(key):
    return key if type(key) is bytes else bytes(key)


def unique(keys):
    """bytes keys in first-seen order, duplicates dropped."""
    seen = set()
    out = []
    for k in keys:
        k = as_key(k)
        if k not in seen:
            seen.add(k)
            out.append(k)
    return out


class _RateLimitedLog:
    def __init__(self, period_s=60.0):
        self._period = period_s
        self._last = {}

    def warn(self, what, error):
        now = time.monotonic()
        if now - self._last.get(what, -1e18) >= self._period:
            self._last[what] = now
            logger.warning("kvoffload %s failed (vLLM goes on without it): %s", what, error)
