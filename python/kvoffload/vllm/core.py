"""The one manager core and the one worker core behind every supported vLLM release.

Nothing here imports vLLM: the adapter layer (adapter.py, assembled from the capability table in
capabilities.py, with transfer_handlers.py or transfer_worker.py) translates vLLM's calls and
dataclasses to these cores, which speak kvoffload (kvoffload.Scheduler on the
scheduler side, kvoffload.Worker on the worker side).

The rules vLLM imposes (found by running every release's real code) and how the cores meet
them:

* vLLM asserts that every submitted transfer and every finished transfer succeeded, and it never
  calls complete_store(success=False) nor reports a failed load. So the worker core reports
  EVERY job to vLLM as finished-success and keeps its failures to itself:
    - a failed store's keys are never made readable: the worker completes them with
      success=False on the engine's index (CompleteStore(false)), and the daemon itself never
      makes rows of a failed store job READY, whatever vLLM's complete_store says;
    - a failed load's GPU blocks are reported through vLLM's load-error path
      (get_block_ids_with_load_errors -> kv_load_failure_policy "recompute" or "fail"), which the
      OffloadingConnector does not wire up itself; gen_common.install_load_error_path adds it.
      Without that path a failed load is reported with success=False (vLLM then stops on its
      assert) — never as a success, which would serve the GPU blocks' stale bytes.
* Rows being written look up as pending (KeyState.HIT_PENDING), never as a miss or a hit.
* A daemon restart (or any end of the session because the daemon went away): the client
  library registers the worker again by itself and fails every job it had in flight with a
  verdict of its own (UNAVAILABLE): those jobs end as failed transfers (a store's keys never
  readable, a load's blocks load errors), never resubmitted, since the daemon may have been
  copying them. Jobs no session took are held and sent once the worker is registered again,
  until RETRY_WINDOW_S after their first submit. The scheduler re-opens the engine on its next
  call; a new region epoch means the cache is empty: keys planned before are not completed in
  the new region and parts planned before fail the daemon's epoch check (FAILED_PRECONDITION),
  which end as failed transfers as well. A session that ended for good (or an older client
  without reconnect) is dialed again here, at most every REDIAL_INTERVAL_S.
* wait(job_ids) returns only once the daemon finished those jobs (or they failed for good), with
  no deadline of its own, because vLLM reuses the GPU blocks afterwards.
* A CompleteStore the daemon did not answer (a stalled or restarting daemon) is sent again on
  later manager calls, so finished stores do not stay pending; a key pending for longer than
  pending_timeout_s looks up as a miss (the request is computed instead of waiting on it).

Not thread-safe unless stated (vLLM calls the manager from the scheduler thread only; the worker
core takes a lock of its own).
"""

# The cores live in manager_core.py and worker_core.py; these names are their interface to the
# adapter layer (and the tests).
# (Tunables are read where they are defined: patch manager_core.X / worker_core.X.)
from .core_util import LOAD, STORE, as_key, unique
from .manager_core import COMMIT_RETRY_S, PENDING_TIMEOUT_S, ManagerCore
from .worker_core import (REDIAL_INTERVAL_S, RETRY_WINDOW_S, Finished, Job, WorkerCore,
                          _CudaEvents, plan_ranges, register)

__all__ = ["COMMIT_RETRY_S", "Finished", "Job", "LOAD", "ManagerCore", "PENDING_TIMEOUT_S",
           "REDIAL_INTERVAL_S", "RETRY_WINDOW_S", "STORE", "WorkerCore",
           "_CudaEvents", "as_key", "plan_ranges", "register", "unique"]
