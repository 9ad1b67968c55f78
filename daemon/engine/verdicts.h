// Verdicts: what an engine tells its worker sessions, collected while it holds its lock and
// delivered after releasing it (a listener may take its own locks and must never be called with
// the engine's held). Order of delivery: every finished job first, then the engine's close, so a
// session never hears that it is over while a verdict of its engine is still on its way
// (DESIGN.md §7: a worker told "failed" or "closed" reuses its GPU blocks at once).
//
//   Verdicts verdicts;
//   { absl::MutexLock lock(&mu_); ... verdicts.finished.emplace_back(listener, result); ... }
//   verdicts.DeliverTo();  // no engine lock held
//
// Thread-safety: a Verdicts is owned by one thread at a time. Listeners are borrowed.
#ifndef KVOFFLOAD_DAEMON_ENGINE_VERDICTS_H_
#define KVOFFLOAD_DAEMON_ENGINE_VERDICTS_H_

#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "daemon/engine/job.h"

namespace kvoffload::daemon {

// Hears about the jobs of one worker session. Implemented by the gRPC session. Called from
// daemon threads with no engine lock held; must not block (queue and return).
class JobListener {
 public:
  virtual ~JobListener() = default;
  virtual void OnJobFinished(const JobResult& result) = 0;
  // The engine was dropped or the daemon is stopping: the session should end with `why`. Called
  // once, after the last OnJobFinished of this engine: no copy of the engine's jobs is running.
  virtual void OnEngineClosed(const absl::Status& why) = 0;
};

struct Verdicts {
  std::vector<std::pair<JobListener*, JobResult>> finished;
  std::vector<JobListener*> closed;  // told OnEngineClosed(closed_why) after `finished`
  absl::Status closed_why;
  // These verdicts end the engine's sessions: the engine then delivers its close notice apart,
  // once no other thread is delivering a verdict (Engine::AnnounceCloseLocked).
  bool announces_close = false;

  // Calls the listeners: every OnJobFinished, then every OnEngineClosed.
  void DeliverTo() const {
    for (const auto& [listener, result] : finished) listener->OnJobFinished(result);
    for (JobListener* listener : closed) listener->OnEngineClosed(closed_why);
  }
};

}  // namespace kvoffload::daemon

#endif  // KVOFFLOAD_DAEMON_ENGINE_VERDICTS_H_
