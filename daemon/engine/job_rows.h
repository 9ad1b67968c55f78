// Job rows: the index's copy guard (IndexCopies, daemon/index/index_copies.h) over an engine's
// jobs. A job's rows must be in the state the index expects when it opens, and stay quarantined
// until it retires (no eviction or reuse while a copy may still touch them); a store tells the
// index whether its rows were written in the same step as it retires; and commits recorded for
// stores that never came are dropped after a job timeout (DESIGN.md §7). Engines that assign
// rows themselves (spec.rows_assigned_by_engine) own that bookkeeping: every call is a no-op.
//
//   RETURN_IF_ERROR(BeginJobRows(spec, index, part));   // opening the job of a first part
//   EndJobRows(spec, index, job);                       // retiring it: no copy can touch them
//
// Thread-safety: as the index's (SlotIndex is thread-safe); the engine calls them in its order
// of steps. Ownership: nothing is kept; every argument is borrowed for the call.
#ifndef KVOFFLOAD_DAEMON_ENGINE_JOB_ROWS_H_
#define KVOFFLOAD_DAEMON_ENGINE_JOB_ROWS_H_

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "common/engine_spec.h"
#include "daemon/engine/job.h"
#include "daemon/engine/job_part.h"
#include "daemon/index/slot_index.h"

namespace kvoffload::daemon {

// Begins the index's copy of a new job's rows; why not (nothing changed) when they are not in
// the state the part's direction needs.
absl::Status BeginJobRows(const common::EngineSpec& spec, SlotIndex& index, const ValidPart& part);
// Ends the index's copy of a due job's rows: a written row of a store that was committed
// becomes READY; a failed one is refused CompleteStore(true) (or dropped, when its commit came
// first), so it never reads as HIT. A refusal means rows could be served although no copy wrote
// them: the state cannot be trusted, and it is fatal (KVO_CHECK).
void EndJobRows(const common::EngineSpec& spec, SlotIndex& index, const Job& job);
// Drops the commits recorded before `now - job_timeout` whose store job never arrived (logged):
// after a job timeout no part of theirs can still be accepted as new work worth waiting for.
void DropStaleCommits(const common::EngineSpec& spec, SlotIndex& index, absl::Time now,
                      absl::Duration job_timeout);

}  // namespace kvoffload::daemon

#endif  // KVOFFLOAD_DAEMON_ENGINE_JOB_ROWS_H_
