"""Worker and scheduler handles over the kvoffload C ABI (client/kvoffload_c.h).

Deadlines: every call that talks to the daemon is bounded. Opening an engine or registering a
worker (which may create and pin the region) gets `open_timeout_s` (default
DEFAULT_OPEN_TIMEOUT_S), every later call on the handle `call_timeout_s` (default
DEFAULT_CALL_TIMEOUT_S); over it, KvoffloadError DEADLINE_EXCEEDED naming the call, the socket
and the deadline. When no daemon listens on the socket, open/connect fail at once with
UNAVAILABLE ("kvoffloadd is not running (no socket at PATH): start it ...").

Restarts: when the daemon goes away and comes back (a restart, an upgrade, a crash), a Worker
fails the jobs it had in flight (UNAVAILABLE verdicts) and registers again by itself in the
background (session_state() says where it stands; a submit meanwhile raises UNAVAILABLE at once);
a Scheduler re-opens the engine on its next call, and its region_epoch changes when the region
was re-created (every row cached before is gone; parts planned with the old epoch fail
FAILED_PRECONDITION). reconnect=False turns both off (docs/clients.md).

Thread-safety: a Worker or Scheduler may be used from several threads at once (the C calls
release the GIL); close() must not race other calls on the same handle.
"""


import dataclasses  # noqa: F401 — tests read the dataclasses of the types below from here

from . import _native
from ._common import (ATTENTIONS, DEFAULT_CALL_TIMEOUT_S, DEFAULT_OPEN_TIMEOUT_S, EXECUTORS,
                      Direction, EngineSpec, FinishedJob, Geometry, KeyState, KvoffloadError,
                      PreparedStore, Readiness, Reason, SessionPhase, SessionState,
                      StatusCode, WorkerInfo, code_name)
from .scheduler import Scheduler
from .worker import Worker

__all__ = [
    "ATTENTIONS", "DEFAULT_CALL_TIMEOUT_S", "DEFAULT_OPEN_TIMEOUT_S", "EXECUTORS", "Direction",
    "EngineSpec", "FinishedJob", "Geometry", "KeyState", "KvoffloadError", "PreparedStore",
    "Readiness", "Reason", "Scheduler", "SessionPhase", "SessionState", "StatusCode", "Worker",
    "WorkerInfo", "code_name", "version",
]


def version() -> str:
    """The loaded library's version string (loads it)."""
    return _native.library().kvo_version().decode()
