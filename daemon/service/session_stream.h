// SessionStream: one worker session's bidirectional stream as blocking calls over gRPC's callback
// API. The session runs on a thread of its own, as it did on a sync handler's, but its first Read
// can end at a deadline: a sync handler blocked in Read is only woken by cancelling the call,
// which the worker sees as CANCELLED instead of the DEADLINE_EXCEEDED the API promises.
//
//   auto* stream = new SessionStream(context);            // returned to gRPC as the reactor
//   if (stream->Read(&first, absl::Now() + timeout) == ReadResult::kTimedOut) ...
//   stream->Write(reply);                                  // from the session's writer thread
//   stream->Finish(status);                                // last call; gRPC then deletes it
//
// Thread-safety: one Read and one Write may be in progress at once (gRPC allows one of each), from
// any threads; Cancel from any thread. Finish is the owner's last call on the object: gRPC deletes
// it (OnDone) once every operation has completed, which may be at once.
#ifndef KVOFFLOAD_DAEMON_SERVICE_SESSION_STREAM_H_
#define KVOFFLOAD_DAEMON_SERVICE_SESSION_STREAM_H_

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "grpcpp/grpcpp.h"
#include "kvoffload/v1/kvoffload.pb.h"

namespace kvoffload::daemon {

class SessionStream final
    : public grpc::ServerBidiReactor<v1::WorkerMessage, v1::DaemonMessage> {
 public:
  // Borrows `context`, which gRPC keeps until OnDone.
  explicit SessionStream(grpc::CallbackServerContext* context) : context_(context) {}
  SessionStream(const SessionStream&) = delete;
  SessionStream& operator=(const SessionStream&) = delete;

  enum class ReadResult { kMessage, kEnded, kTimedOut };
  // The next message, or kEnded when the worker closed its side or the call ended. kTimedOut:
  // nothing came by `deadline`; the read stays in progress, so the only call left is Finish.
  ReadResult Read(v1::WorkerMessage* message, absl::Time deadline = absl::InfiniteFuture())
      ABSL_LOCKS_EXCLUDED(mu_);
  // Blocks until the message is written; false once the call is broken.
  bool Write(const v1::DaemonMessage& message) ABSL_LOCKS_EXCLUDED(mu_);
  // Ends the call at once (the worker sees CANCELLED); a Read or Write in progress returns.
  void Cancel() { context_->TryCancel(); }
  // Ends the call with `status`. No Write may be in progress; the object may be gone on return.
  void Finish(grpc::Status status) { ServerBidiReactor::Finish(std::move(status)); }

  void OnReadDone(bool ok) override ABSL_LOCKS_EXCLUDED(mu_);
  void OnWriteDone(bool ok) override ABSL_LOCKS_EXCLUDED(mu_);
  void OnDone() override { delete this; }

 private:
  ~SessionStream() override = default;  // OnDone only

  bool ReadDone() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return read_done_; }
  bool WriteDone() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return write_done_; }

  grpc::CallbackServerContext* const context_;
  absl::Mutex mu_;
  // gRPC fills the read buffer until OnReadDone, which may come after a timed-out Read returned.
  v1::WorkerMessage read_buffer_;
  bool read_done_ ABSL_GUARDED_BY(mu_) = false;
  bool read_ok_ ABSL_GUARDED_BY(mu_) = false;
  bool write_done_ ABSL_GUARDED_BY(mu_) = false;
  bool write_ok_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace kvoffload::daemon

#endif  // KVOFFLOAD_DAEMON_SERVICE_SESSION_STREAM_H_
