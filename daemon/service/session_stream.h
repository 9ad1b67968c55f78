// SessionStream: one worker session's bidirectional stream over gRPC's callback API, the reactor
// gRPC owns until OnDone. Two phases:
//   1. Registration, on the session's own thread: a blocking Read whose wait can end at a
//      deadline (a sync handler blocked in Read is only woken by cancelling the call, which the
//      worker sees as CANCELLED instead of the DEADLINE_EXCEEDED the API promises).
//   2. Serving, after Serve(listener): each message is handed to the listener on the gRPC thread
//      that read it, and writes complete there too — no thread hop between a submit arriving and
//      the engine taking it, nor between a verdict and its write (a hop costs the 1-block latency
//      a thread wake-up, tens of µs on a VM). The session's thread only waits for the end.
//
//   auto* stream = new SessionStream(context);            // returned to gRPC as the reactor
//   if (stream->Read(&first, absl::Now() + timeout) == ReadResult::kTimedOut) ...
//   stream->Serve(&listener);                              // OnMessage / OnReadsEnded / OnWritten
//   stream->WaitReadsEnded();  ... stream->WaitQuiet();    // then nothing calls the listener
//   stream->Finish(status);                                // last call; gRPC then deletes it
//
// Thread-safety: one read and one write may be in progress at once (gRPC allows one of each);
// StartWrite, ResumeReads and Cancel may be called from any thread. Finish is the owner's last call
// on the object: gRPC deletes it (OnDone) once every operation has completed.
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
  // What a serving session is told, on gRPC's threads (never two reads' calls at once; a
  // write's call may run beside a read's). Calls must not block for long: they hold a thread
  // that serves other sessions.
  class Listener {
   public:
    virtual ~Listener() = default;
    // The next message. true: read the one after it now; false: reads pause until ResumeReads.
    virtual bool OnMessage(const v1::WorkerMessage& message) = 0;
    // The worker closed its side or the call ended: no OnMessage follows.
    virtual void OnReadsEnded() = 0;
    // The write begun by StartWrite completed (ok) or the call is broken (!ok).
    virtual void OnWritten(bool ok) = 0;
  };

  // Borrows `context`, which gRPC keeps until OnDone.
  explicit SessionStream(grpc::CallbackServerContext* context) : context_(context) {}
  SessionStream(const SessionStream&) = delete;
  SessionStream& operator=(const SessionStream&) = delete;

  enum class ReadResult { kMessage, kEnded, kTimedOut };
  // Registration phase: the next message, or kEnded when the worker closed its side or the call
  // ended. kTimedOut: nothing came by `deadline`; the read stays in progress, so the only call
  // left is Finish.
  ReadResult Read(v1::WorkerMessage* message, absl::Time deadline = absl::InfiniteFuture())
      ABSL_LOCKS_EXCLUDED(mu_);

  // Serving phase from now on (after a Read that returned kMessage): starts reading into
  // `listener`, which must stay valid until WaitQuiet returns.
  void Serve(Listener* listener) ABSL_LOCKS_EXCLUDED(mu_);
  // The next read, after OnMessage returned false.
  void ResumeReads() { StartRead(&read_buffer_); }
  // Writes `message` (valid until OnWritten); one write at a time.
  void StartWrite(const v1::DaemonMessage* message) ABSL_LOCKS_EXCLUDED(mu_);
  // Until OnReadsEnded has been called.
  void WaitReadsEnded() ABSL_LOCKS_EXCLUDED(mu_);
  // Until no write is in progress and no listener call is running: from then on nothing calls
  // the listener unless the owner starts a write.
  void WaitQuiet() ABSL_LOCKS_EXCLUDED(mu_);

  // Ends the call at once (the worker sees CANCELLED); a read or write in progress completes.
  void Cancel() { context_->TryCancel(); }
  // Ends the call with `status`. No write may be in progress; the object may be gone on return.
  void Finish(grpc::Status status) { ServerBidiReactor::Finish(std::move(status)); }

  void OnReadDone(bool ok) override ABSL_LOCKS_EXCLUDED(mu_);
  void OnWriteDone(bool ok) override ABSL_LOCKS_EXCLUDED(mu_);
  void OnDone() override { delete this; }

 private:
  ~SessionStream() override = default;  // OnDone only

  bool ReadDone() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return read_done_; }
  bool ReadsEnded() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return reads_ended_; }
  bool Quiet() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return writes_in_flight_ == 0 && listener_calls_ == 0;
  }

  grpc::CallbackServerContext* const context_;
  absl::Mutex mu_;
  // gRPC fills the read buffer until OnReadDone, which may come after a timed-out Read returned.
  v1::WorkerMessage read_buffer_;
  bool read_done_ ABSL_GUARDED_BY(mu_) = false;
  bool read_ok_ ABSL_GUARDED_BY(mu_) = false;
  Listener* listener_ ABSL_GUARDED_BY(mu_) = nullptr;  // set by Serve
  bool reads_ended_ ABSL_GUARDED_BY(mu_) = false;
  int writes_in_flight_ ABSL_GUARDED_BY(mu_) = 0;
  int listener_calls_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace kvoffload::daemon

#endif  // KVOFFLOAD_DAEMON_SERVICE_SESSION_STREAM_H_
