// Worker service: one bidirectional session per GPU worker. The stream is the worker's
// registration: when it ends (worker exit, crash, SIGKILL) the daemon fails the worker's open
// jobs and releases its mappings.
#ifndef KVOFFLOAD_DAEMON_SERVICE_WORKER_SERVICE_H_
#define KVOFFLOAD_DAEMON_SERVICE_WORKER_SERVICE_H_

#include "daemon/engine/registry.h"
#include "kvoffload/v1/kvoffload.grpc.pb.h"

namespace kvoffload::daemon {

// Thread-safe. Each session uses the gRPC handler thread for reads and one writer thread.
class WorkerService final : public v1::Worker::Service {
 public:
  explicit WorkerService(EngineRegistry* registry) : registry_(registry) {}

  grpc::Status Session(
      grpc::ServerContext* context,
      grpc::ServerReaderWriter<v1::DaemonMessage, v1::WorkerMessage>* stream) override;

 private:
  EngineRegistry* const registry_;
};

}  // namespace kvoffload::daemon

#endif  // KVOFFLOAD_DAEMON_SERVICE_WORKER_SERVICE_H_
