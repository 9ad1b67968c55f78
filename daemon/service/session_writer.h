// SessionWriter: the daemon's side of one worker session's outgoing stream. Engines hand it
// verdicts (JobListener) from their threads; it queues them and starts each write from whichever
// thread finds the stream idle: the verdict's own thread, or the gRPC thread that completed the
// write before (gRPC allows one write at a time; starting one never blocks, so no engine thread
// waits on a slow worker's flow control, and no thread hop lies between a verdict and its write).
// Nothing is written before the registration reply, so a verdict that races the registration
// cannot overtake it; when the engine closes, the queue is drained, a SessionClosed with the
// reason is written, and only then is the call cancelled (which ends the session's reads).
//
// Flow control: while `max_queued` messages wait to be written and the session is live,
// ContinueReads answers false and the session stops reading (the worker's flow control then
// pushes back on it); the writer resumes the reads once there is room, or once the session is
// closing or its writes failed (so that the reads can see the end).
//
//   SessionWriter writer(stream, /*max_queued=*/1024);
//   ... engine->Attach(..., &writer) ...                   // verdicts may come from here on
//   stream->Serve(&reader);                                 // routes OnWritten to the writer
//   writer.SendRegistered(reply);
//   stream->WaitReadsEnded(); engine->Detach(...); writer.Drain(); stream->WaitQuiet();
//
// Thread-safe; one internal mutex guards the queue and the flags. Borrows the stream, which must
// outlive it. Destroy it only after Drain and the stream's WaitQuiet: gRPC's threads call it
// until then.
#ifndef KVOFFLOAD_DAEMON_SERVICE_SESSION_WRITER_H_
#define KVOFFLOAD_DAEMON_SERVICE_SESSION_WRITER_H_

#include <cstddef>
#include <deque>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "daemon/engine/engine.h"
#include "daemon/service/session_stream.h"
#include "kvoffload/v1/kvoffload.pb.h"
#include "proto/status_convert.h"

namespace kvoffload::daemon {

class SessionWriter final : public JobListener {
 public:
  // `max_queued`: see Flow control above.
  SessionWriter(SessionStream* stream, size_t max_queued)
      : stream_(stream), max_queued_(max_queued) {}

  SessionWriter(const SessionWriter&) = delete;
  SessionWriter& operator=(const SessionWriter&) = delete;

  // The registration reply: written before anything queued so far.
  void SendRegistered(v1::DaemonMessage message) ABSL_LOCKS_EXCLUDED(mu_) {
    {
      absl::MutexLock lock(&mu_);
      queue_.push_front(std::move(message));
      ready_ = true;
    }
    Pump();
  }

  void OnJobFinished(const JobResult& result) override ABSL_LOCKS_EXCLUDED(mu_) {
    v1::DaemonMessage message;
    v1::JobFinished* f = message.mutable_finished();
    f->set_job_id(result.job_id);
    StatusToMessage(result.status, f);  // code, message and reason
    f->set_bytes(result.bytes);
    {
      absl::MutexLock lock(&mu_);
      queue_.push_back(std::move(message));
    }
    Pump();
  }

  void OnEngineClosed(const absl::Status& why) override ABSL_LOCKS_EXCLUDED(mu_) {
    {
      absl::MutexLock lock(&mu_);
      closed_why_ = why;
      closing_ = true;
    }
    Pump();
    ResumeReadsIfRoom();
  }

  absl::Status closed_why() ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    return closed_why_;
  }

  // After a message was handled: whether to read the next one now. false pauses the reads;
  // the writer resumes them (SessionStream::ResumeReads) when there is room.
  bool ContinueReads() ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    if (HasRoom()) return true;
    reads_paused_ = true;
    return false;
  }

  // The stream's write completed (ok) or the call is broken (!ok).
  void OnWritten(bool ok) ABSL_LOCKS_EXCLUDED(mu_) {
    bool last;
    {
      absl::MutexLock lock(&mu_);
      in_flight_ = false;
      last = current_.has_closed();
      if (!ok) {
        // The worker is gone; the reads notice and the session detaches. Drop what is queued.
        queue_.clear();
        write_failed_ = true;
      }
    }
    if (last) stream_->Cancel();
    ResumeReadsIfRoom();
    Pump();
  }

  // Blocks until everything queued has been written, or can no longer be (the writes failed,
  // the registration reply was never sent, or SessionClosed is out): the session's end, after
  // the engine's Detach.
  void Drain() ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    mu_.Await(absl::Condition(this, &SessionWriter::Drained));
  }

 private:
  bool HasRoom() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return queue_.size() < max_queued_ || closing_ || write_failed_;
  }
  bool CloseDue() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return closing_ && !close_sent_; }
  bool Drained() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return !in_flight_ &&
           (write_failed_ || !ready_ || close_sent_ || (queue_.empty() && !CloseDue()));
  }

  // Starts the next write when none is in flight.
  void Pump() ABSL_LOCKS_EXCLUDED(mu_) {
    {
      absl::MutexLock lock(&mu_);
      // SessionClosed is the last message: nothing is written after it (the call is cancelled
      // once it is out; a verdict queued meanwhile would otherwise slip in before the cancel).
      if (in_flight_ || !ready_ || write_failed_ || close_sent_) return;
      if (!queue_.empty()) {
        current_ = std::move(queue_.front());
        queue_.pop_front();
      } else if (CloseDue()) {
        current_.Clear();
        v1::SessionClosed* closed = current_.mutable_closed();
        StatusToMessage(closed_why_, closed);
        close_sent_ = true;
      } else {
        return;
      }
      in_flight_ = true;
    }
    stream_->StartWrite(&current_);  // current_ is not touched again until OnWritten
  }

  void ResumeReadsIfRoom() ABSL_LOCKS_EXCLUDED(mu_) {
    {
      absl::MutexLock lock(&mu_);
      if (!reads_paused_ || !HasRoom()) return;
      reads_paused_ = false;
    }
    stream_->ResumeReads();
  }

  SessionStream* const stream_;
  const size_t max_queued_;
  absl::Mutex mu_;
  std::deque<v1::DaemonMessage> queue_ ABSL_GUARDED_BY(mu_);
  v1::DaemonMessage current_;  // the write in flight: set under mu_ while none is
  bool in_flight_ ABSL_GUARDED_BY(mu_) = false;
  bool ready_ ABSL_GUARDED_BY(mu_) = false;
  bool closing_ ABSL_GUARDED_BY(mu_) = false;
  bool close_sent_ ABSL_GUARDED_BY(mu_) = false;
  bool write_failed_ ABSL_GUARDED_BY(mu_) = false;
  bool reads_paused_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status closed_why_ ABSL_GUARDED_BY(mu_);
};

}  // namespace kvoffload::daemon

#endif  // KVOFFLOAD_DAEMON_SERVICE_SESSION_WRITER_H_
