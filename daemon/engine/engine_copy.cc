#include "daemon/engine/engine_copy.h"

#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "common/check.h"
#include "daemon/pool/segment_runs.h"

namespace kvoffload::daemon {

CopyJob MakeWorkerCopy(const WorkerSession& session, ValidPart part,
                       const common::Geometry& geometry, uint8_t* region_base,
                       absl::Duration timeout) {
  CopyJob copy;
  copy.direction = part.direction;
  copy.memory = session.memory.get();
  copy.region_base = region_base;
  copy.row_bytes = geometry.row_bytes;
  copy.slot_bytes = geometry.slot_bytes;
  copy.slot = session.slot;
  copy.blocks_per_row = geometry.blocks_per_row;
  copy.runs = std::move(part.runs);
  copy.event_index = part.event_index;
  copy.timeout = timeout;
  return copy;
}

void StartWorkerCopy(const CopyRoute& route, uint64_t job_id, CopyJob copy,
                     std::shared_ptr<WorkerMemory> memory, std::shared_ptr<void> owner,
                     CopyDone done) {
  DeferredRelease* const release = route.release;
  std::atomic<int64_t>* const running = route.callbacks_running;
  if (route.pool == nullptr) {
    // The closure keeps the owner (region) and the worker's mapping alive until the copy ends.
    if (running != nullptr) running->fetch_add(1);
    route.backend->Submit(std::move(copy), [owner, memory, done = std::move(done), release,
                                            running](absl::Status status, uint64_t bytes) mutable {
      done(std::move(status), bytes);
      release->Defer(std::move(memory));
      release->Defer(std::move(owner));
      if (running != nullptr) running->fetch_sub(1);  // the callback's last act
    });
    return;
  }
  // A pool: one copy per segment, each keeping its segment's region mapped (the rows passed
  // the copy guard, so their segments are online or still draining: SegmentBase has them).
  std::vector<SegmentRuns> split = SplitBySegment(
      copy.runs, uint64_t{route.pool->index().segments().segment_rows()} * copy.blocks_per_row);
  copy.runs.clear();
  KVO_CHECK(!split.empty(), "engine ", route.engine->Key(), ": job ", job_id,
            " has no runs to copy");
  struct FanIn {
    absl::Mutex mu;
    size_t left ABSL_GUARDED_BY(mu) = 0;
    absl::Status first ABSL_GUARDED_BY(mu);
    uint64_t bytes ABSL_GUARDED_BY(mu) = 0;
    CopyDone done;  // called once, by the last copy to end
  };
  auto fan_in = std::make_shared<FanIn>();
  fan_in->done = std::move(done);
  {
    absl::MutexLock lock(&fan_in->mu);
    fan_in->left = split.size();
  }
  if (running != nullptr) running->fetch_add(static_cast<int64_t>(split.size()));
  for (SegmentRuns& part : split) {
    std::shared_ptr<void> segment;
    CopyJob job = copy;
    job.runs = std::move(part.runs);
    job.region_base = route.pool->SegmentBase(part.segment, &segment);
    route.backend->Submit(std::move(job), [owner, memory, segment, fan_in, release, running](
                                              absl::Status status, uint64_t bytes) mutable {
      bool last = false;
      absl::Status outcome;
      uint64_t total = 0;
      {
        absl::MutexLock lock(&fan_in->mu);
        if (status.ok()) {
          fan_in->bytes += bytes;
        } else if (fan_in->first.ok()) {
          fan_in->first = std::move(status);
        }
        last = --fan_in->left == 0;
        outcome = fan_in->first;
        total = fan_in->bytes;
      }
      if (last) fan_in->done(std::move(outcome), total);
      release->Defer(std::move(memory));
      release->Defer(std::move(segment));
      release->Defer(std::move(owner));
      if (running != nullptr) running->fetch_sub(1);  // the callback's last act
    });
  }
}

}  // namespace kvoffload::daemon
