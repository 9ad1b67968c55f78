// Worker service: one bidirectional session per GPU worker. The stream is the worker's
// registration: when it ends (worker exit, crash, SIGKILL) the daemon fails the worker's open
// jobs and releases its mappings.
//
// Identity: a session runs as its connection's kernel-verified caller (PeerTable). Its
// registration must declare the pid that opened the connection, and may only create or join an
// engine that caller may use (PERMISSION_DENIED otherwise, before any memory is opened); the copy
// backend opens only that process's memory.
//
// Bounds (a client cannot exhaust the daemon through sessions): at most `max_sessions` sessions
// at once, each one a daemon thread, mostly asleep (one more is RESOURCE_EXHAUSTED at once); a
// session whose first message does not arrive within `first_message_timeout` ends with
// DEADLINE_EXCEEDED (the session is served through gRPC's callback API, SessionStream, so that
// its first Read can time out: a sync handler could only cancel the call, which the worker sees
// as CANCELLED); a session with `max_queued_verdicts` messages waiting to be written is not read
// from until the worker reads (flow control then pushes back on the worker), so its queue stays
// bounded.
#ifndef KVOFFLOAD_DAEMON_SERVICE_WORKER_SERVICE_H_
#define KVOFFLOAD_DAEMON_SERVICE_WORKER_SERVICE_H_

#include <cstdint>
#include <map>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "daemon/engine/registry.h"
#include "daemon/service/peer_credentials.h"
#include "daemon/service/session_stream.h"
#include "kvoffload/v1/kvoffload.grpc.pb.h"

namespace kvoffload::daemon {

struct WorkerServiceOptions {
  uint32_t max_sessions = 1024;
  absl::Duration first_message_timeout = absl::Seconds(10);
  uint32_t max_queued_verdicts = 1024;
};

// Thread-safe. Each session has a thread of its own for its registration (the first read, the
// registry's AttachWorker, which may wait for the region's first rows) and its end (Detach);
// in between its parts are taken and its verdicts written on gRPC's threads (SessionStream's
// serving phase, SessionWriter). The destructor waits for every session to end: destroy it after
// the server that serves it has shut down.
class WorkerService final : public v1::Worker::CallbackService {
 public:
  // Borrows `registry` and `peers`.
  WorkerService(EngineRegistry* registry, const CallerSource* peers,
                const WorkerServiceOptions& options);
  ~WorkerService() override;
  WorkerService(const WorkerService&) = delete;
  WorkerService& operator=(const WorkerService&) = delete;

  grpc::ServerBidiReactor<v1::WorkerMessage, v1::DaemonMessage>* Session(
      grpc::CallbackServerContext* context) override ABSL_LOCKS_EXCLUDED(mu_);

 private:
  // The session's thread: reads the registration, serves the worker, finishes the call.
  void RunSession(SessionStream* stream, const Caller& caller) ABSL_LOCKS_EXCLUDED(mu_);
  // The session's first message, within first_message_timeout; it must be `register`.
  grpc::Status ReadRegistration(SessionStream* stream, v1::WorkerMessage* first);
  // Registers the worker as `caller`, then takes its parts until it leaves.
  grpc::Status Serve(SessionStream* stream, const Caller& caller, const v1::RegisterWorker& reg);
  // Joins the threads of sessions that have ended.
  void JoinEnded() ABSL_LOCKS_EXCLUDED(mu_);
  bool NoSessions() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return sessions_ == 0; }

  EngineRegistry* const registry_;
  const CallerSource* const peers_;
  const WorkerServiceOptions options_;

  absl::Mutex mu_;
  uint32_t sessions_ ABSL_GUARDED_BY(mu_) = 0;
  // Session threads not joined yet, and those of them that have ended (joined by the next
  // session or the destructor, so that none outlives the service).
  std::map<std::thread::id, std::thread> threads_ ABSL_GUARDED_BY(mu_);
  std::vector<std::thread::id> ended_ ABSL_GUARDED_BY(mu_);
};

}  // namespace kvoffload::daemon

#endif  // KVOFFLOAD_DAEMON_SERVICE_WORKER_SERVICE_H_
