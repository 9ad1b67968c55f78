"""kvoffload: Python bindings (ctypes) for the kvoffloadd KV-cache offload daemon.

The shared library libkvoffload_c.so is loaded on first use, from $KVOFFLOAD_LIB, the package
directory, /usr/local/lib, or the repository's bazel-bin/client (in that order); importing the
package never needs it. See README.md for how an engine's KV connector uses the API;
kvoffload.vllm is the OffloadingSpec for vLLM's OffloadingConnector (it imports vLLM only when
used).
"""

from .client import (DEFAULT_CALL_TIMEOUT_S, DEFAULT_OPEN_TIMEOUT_S, Direction, EngineSpec,
                     FinishedJob, Geometry, KeyState, KvoffloadError, PreparedStore, Readiness,
                     Reason, Scheduler, SessionPhase, SessionState, StatusCode, Worker, WorkerInfo,
                     code_name, version)
from .host import HostAllocation, HostTensor
from .staged import StagedWorker
from .tensors import TensorView, kv_tensor_views
from ._native import LibraryNotFoundError

__version__ = "0.1.0"

__all__ = [
    "DEFAULT_CALL_TIMEOUT_S", "DEFAULT_OPEN_TIMEOUT_S", "Direction", "EngineSpec", "FinishedJob", "Geometry",
    "HostAllocation", "HostTensor", "KeyState", "KvoffloadError", "LibraryNotFoundError",
    "PreparedStore", "Readiness", "Reason", "Scheduler", "SessionPhase", "SessionState", "StagedWorker",
    "StatusCode",
    "TensorView", "Worker", "WorkerInfo", "code_name", "kv_tensor_views", "version",
]
