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
// at once, each one a daemon thread (one more is RESOURCE_EXHAUSTED at once); a session whose
// first message does not arrive within `first_message_timeout` is cancelled (DEADLINE_EXCEEDED);
// a session with `max_queued_verdicts` messages waiting to be written is not read from until the
// worker reads (flow control then pushes back on the worker), so its queue stays bounded.
#ifndef KVOFFLOAD_DAEMON_SERVICE_WORKER_SERVICE_H_
#define KVOFFLOAD_DAEMON_SERVICE_WORKER_SERVICE_H_

#include <cstdint>
#include <map>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "daemon/engine/registry.h"
#include "daemon/service/peer_credentials.h"
#include "kvoffload/v1/kvoffload.grpc.pb.h"

namespace kvoffload::daemon {

struct WorkerServiceOptions {
  uint32_t max_sessions = 1024;
  absl::Duration first_message_timeout = absl::Seconds(10);
  uint32_t max_queued_verdicts = 1024;
};

// Thread-safe. Each session uses the gRPC handler thread for reads and one writer thread; one
// more thread cancels sessions that stay silent past their first-message deadline.
class WorkerService final : public v1::Worker::Service {
 public:
  // Borrows `registry` and `peers`.
  WorkerService(EngineRegistry* registry, const CallerSource* peers,
                const WorkerServiceOptions& options);
  ~WorkerService() override;
  WorkerService(const WorkerService&) = delete;
  WorkerService& operator=(const WorkerService&) = delete;

  using Stream = grpc::ServerReaderWriter<v1::DaemonMessage, v1::WorkerMessage>;

  grpc::Status Session(grpc::ServerContext* context, Stream* stream) override;

 private:
  // The session's first message, within first_message_timeout; it must be `register`.
  grpc::Status ReadRegistration(grpc::ServerContext* context, Stream* stream,
                                v1::WorkerMessage* first) ABSL_LOCKS_EXCLUDED(mu_);
  // Registers the worker as `caller`, then takes its parts until it leaves.
  grpc::Status Serve(grpc::ServerContext* context, Stream* stream, const Caller& caller,
                     const v1::RegisterWorker& reg);
  void WatchFirstMessages();
  bool WatchHasWork() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stop_; }

  EngineRegistry* const registry_;
  const CallerSource* const peers_;
  const WorkerServiceOptions options_;

  absl::Mutex mu_;
  uint32_t sessions_ ABSL_GUARDED_BY(mu_) = 0;
  // Sessions still waiting for their first message, with their deadlines.
  std::map<grpc::ServerContext*, absl::Time> awaiting_first_ ABSL_GUARDED_BY(mu_);
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::thread watcher_;
};

}  // namespace kvoffload::daemon

#endif  // KVOFFLOAD_DAEMON_SERVICE_WORKER_SERVICE_H_
