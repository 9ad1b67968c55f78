// InProcessCallers: a CallerSource for tests that serve the daemon's services over gRPC's
// in-process channel, which has no descriptor the kernel could vouch for: every call is made by
// one fixed caller (usually this process). The daemon itself only ever uses PeerTable.
//
//   InProcessCallers callers(Caller{getpid(), getuid(), getgid(), {}});
//   WorkerService workers(&registry, &callers, WorkerServiceOptions{});
//
// Thread-safety: immutable after construction.
#ifndef KVOFFLOAD_DAEMON_SERVICE_TESTING_IN_PROCESS_CALLERS_H_
#define KVOFFLOAD_DAEMON_SERVICE_TESTING_IN_PROCESS_CALLERS_H_

#include <unistd.h>

#include "daemon/service/peer_credentials.h"

namespace kvoffload::daemon {

class InProcessCallers final : public CallerSource {
 public:
  explicit InProcessCallers(const Caller& caller) : caller_(caller) {}
  // This process, as the kernel would name it.
  InProcessCallers() : caller_{static_cast<int32_t>(getpid()), getuid(), getgid(), {}} {}

  absl::StatusOr<Caller> CallerOf(grpc::ServerContextBase*) const override { return caller_; }

 private:
  const Caller caller_;
};

}  // namespace kvoffload::daemon

#endif  // KVOFFLOAD_DAEMON_SERVICE_TESTING_IN_PROCESS_CALLERS_H_
