// What the worker session and the scheduler's calls share: converting gRPC statuses, deadlines,
// dialing the daemon's socket, and a watchdog that bounds one operation of a streaming call.
// Private to the client library (no public header includes it).
#ifndef KVOFFLOAD_CLIENT_INTERNAL_GRPC_CALL_H_
#define KVOFFLOAD_CLIENT_INTERNAL_GRPC_CALL_H_

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "client/kvoffload_client.h"
#include "grpcpp/grpcpp.h"
#include "kvoffload/v1/kvoffload.pb.h"
#include "proto/status_convert.h"

namespace kvoffload::client::internal {

// Code, message and reason (the status details) of a gRPC status: proto/status_convert.h.
using ::kvoffload::FromGrpcStatus;

// A call's status; a deadline names the call, the socket and the deadline so that the caller
// can tell a slow daemon from a dead one.
absl::Status CallStatus(const grpc::Status& status, absl::string_view call,
                        const std::string& socket_path, absl::Duration timeout);

// INVALID_ARGUMENT unless 0 < timeout < infinity.
absl::Status CheckTimeout(absl::Duration timeout, absl::string_view what);

std::chrono::system_clock::time_point After(absl::Duration d);

// A fresh channel to the daemon's Unix socket (a new one per (re)connection: a channel that saw
// the daemon die would wait out gRPC's own reconnect backoff, up to minutes).
std::shared_ptr<grpc::Channel> Dial(const std::string& socket_path);

RegionGeometry FromProto(const v1::Geometry& g);

// Cancels a call whose current operation outlives its deadline: gRPC's synchronous streams have
// no deadline per message, only per call. One thread; Arm and Disarm are cheap and, in the steady
// state, wake nobody: the thread sleeps until the earliest deadline it has seen and is woken only
// by an earlier one. Every submit arms and disarms it, and on a VM whose idle CPUs halt, a
// wake-up costs the waker an interprocessor interrupt (tens of µs of the submit, measured:
// docs/benchmarks.md "Wake-ups on the submit path"). A deadline that moved later is found when
// the thread wakes at the earlier one. Thread-safe. Does not own the context, which must outlive
// it.
class Watchdog {
 public:
  explicit Watchdog(grpc::ClientContext* context);
  ~Watchdog();
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;

  void Arm(absl::Time deadline);
  // True when a deadline passed and the call was cancelled (ever, on this call).
  bool Disarm();

  // Tests: how often the thread has woken, until when it sleeps now, and whether a deadline
  // passed (without disarming, as Disarm would).
  uint64_t TEST_wakeups() const;
  absl::Time TEST_sleeping_until() const;
  bool TEST_fired() const;

 private:
  void Run();

  grpc::ClientContext* const context_;
  mutable absl::Mutex mu_;
  absl::CondVar cv_;
  absl::Time deadline_ ABSL_GUARDED_BY(mu_) = absl::InfiniteFuture();
  // When the thread wakes on its own next (InfiniteFuture: only when signalled).
  absl::Time wake_at_ ABSL_GUARDED_BY(mu_) = absl::InfiniteFuture();
  bool fired_ ABSL_GUARDED_BY(mu_) = false;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  uint64_t wakeups_ ABSL_GUARDED_BY(mu_) = 0;
  std::thread thread_;  // last: starts once the fields above exist
};

}  // namespace kvoffload::client::internal

#endif  // KVOFFLOAD_CLIENT_INTERNAL_GRPC_CALL_H_
