// Worker copies: one worker's CopyJob handed to the copy backend, and its end reported once — as
// it is for an engine's own region, or, in a pool, one CopyJob per segment its rows lie in
// (SplitBySegment), reported once all of them ended, with the first error (else their bytes).
//
//   CopyJob copy = MakeWorkerCopy(session, std::move(valid), geometry, region_base, timeout);
//   StartWorkerCopy(CopyRoute{backend, release, running, pool.get(), &spec}, job_id,
//                   std::move(copy), memory, shared_from_this(),
//                   [engine](absl::Status s, uint64_t bytes) { engine->OnCopyDone(...); });
//
// Thread-safety: thread-safe; call it with no engine lock held (the backend may call back at
// once). `done` runs once, on a backend thread, with no lock of this file held.
// Ownership: each backend callback keeps `memory` (the worker's mapping), `owner` (what keeps
// copy.region_base mapped: the engine) and, in a pool, its segment's region alive until it ends,
// then hands them to `release` (DeferredRelease), so none is freed on the copy path; `done` must
// not own them. `callbacks_running` (may be null) counts the callbacks still running: it is
// raised before the backend Submit and lowered as the callback's last act.
#ifndef KVOFFLOAD_DAEMON_ENGINE_ENGINE_COPY_H_
#define KVOFFLOAD_DAEMON_ENGINE_ENGINE_COPY_H_

#include <atomic>
#include <cstdint>
#include <memory>

#include "absl/time/time.h"
#include "common/engine_spec.h"
#include "common/geometry.h"
#include "daemon/copy/copy_backend.h"
#include "daemon/engine/job_part.h"
#include "daemon/engine/worker_sessions.h"
#include "daemon/lifetime/deferred_release.h"
#include "daemon/pool/pool.h"

namespace kvoffload::daemon {

// Where an engine's copies go. All borrowed; they outlive every copy.
struct CopyRoute {
  CopyBackend* backend = nullptr;
  DeferredRelease* release = nullptr;
  std::atomic<int64_t>* callbacks_running = nullptr;  // may be null
  Pool* pool = nullptr;  // null: copy.region_base is the engine's own region
  const common::EngineSpec* engine = nullptr;  // names the engine in a failed check
};

// The copy of `session`'s valid `part` (its runs taken) over the region at `region_base`, the
// engine's own (StartWorkerCopy re-bases a pool's per segment).
CopyJob MakeWorkerCopy(const WorkerSession& session, ValidPart part,
                       const common::Geometry& geometry, uint8_t* region_base,
                       absl::Duration timeout);
// Submits `copy` (a part of job `job_id`) along `route`; `done` hears its end once.
void StartWorkerCopy(const CopyRoute& route, uint64_t job_id, CopyJob copy,
                     std::shared_ptr<WorkerMemory> memory, std::shared_ptr<void> owner,
                     CopyDone done);

}  // namespace kvoffload::daemon

#endif  // KVOFFLOAD_DAEMON_ENGINE_ENGINE_COPY_H_
