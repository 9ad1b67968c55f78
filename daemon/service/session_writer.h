// SessionWriter: the daemon's side of one worker session's outgoing stream. Engines hand it
// verdicts (JobListener) from their threads; it queues them and writes them from a thread of its
// own, so no engine thread ever blocks on a slow worker's flow control (gRPC allows one writer at
// a time). Nothing is written before the registration reply, so a verdict that races the
// registration cannot overtake it; when the engine closes, the queue is drained, a SessionClosed
// with the reason is written, and only then is the call cancelled (which unblocks the session's
// Read).
//
//   SessionWriter writer(stream, /*max_queued=*/1024);
//   ... engine->Attach(..., &writer) ...
//   writer.SendRegistered(reply);
//   for (;;) { writer.WaitForRoom(); if (stream->Read(&m) != kMessage) break; ... }
//
// Thread-safe; one internal mutex guards the queue and the flags. Borrows the stream, which must
// outlive it (the destructor joins the writing thread, so no Write is in progress after it).
#ifndef KVOFFLOAD_DAEMON_SERVICE_SESSION_WRITER_H_
#define KVOFFLOAD_DAEMON_SERVICE_SESSION_WRITER_H_

#include <cstddef>
#include <deque>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "daemon/engine/engine.h"
#include "daemon/service/session_stream.h"
#include "kvoffload/v1/kvoffload.pb.h"

namespace kvoffload::daemon {

class SessionWriter final : public JobListener {
 public:
  // `max_queued`: see WaitForRoom.
  SessionWriter(SessionStream* stream, size_t max_queued)
      : stream_(stream), max_queued_(max_queued), thread_([this] { Run(); }) {}

  SessionWriter(const SessionWriter&) = delete;
  SessionWriter& operator=(const SessionWriter&) = delete;

  ~SessionWriter() override {
    {
      absl::MutexLock lock(&mu_);
      stop_ = true;
    }
    thread_.join();
  }

  // The registration reply: written before anything queued so far.
  void SendRegistered(v1::DaemonMessage message) {
    absl::MutexLock lock(&mu_);
    queue_.push_front(std::move(message));
    ready_ = true;
  }

  void OnJobFinished(const JobResult& result) override {
    v1::DaemonMessage message;
    v1::JobFinished* f = message.mutable_finished();
    f->set_job_id(result.job_id);
    f->set_code(static_cast<int32_t>(result.status.code()));
    f->set_message(std::string(result.status.message()));
    f->set_bytes(result.bytes);
    absl::MutexLock lock(&mu_);
    queue_.push_back(std::move(message));
  }

  void OnEngineClosed(const absl::Status& why) override {
    absl::MutexLock lock(&mu_);
    closed_why_ = why;
    closing_ = true;
  }

  absl::Status closed_why() {
    absl::MutexLock lock(&mu_);
    return closed_why_;
  }

  // Blocks while `max_queued` or more messages wait to be written and the session is live: a
  // worker that does not read its verdicts stops being read, instead of growing this queue.
  void WaitForRoom() {
    absl::MutexLock lock(&mu_);
    mu_.Await(absl::Condition(this, &SessionWriter::HasRoom));
  }

 private:
  bool HasRoom() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return queue_.size() < max_queued_ || stop_ || closing_ || write_failed_;
  }

  bool HasWork() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return stop_ || (ready_ && (!queue_.empty() || (closing_ && !close_sent_)));
  }

  void Run() {
    for (;;) {
      v1::DaemonMessage message;
      {
        absl::MutexLock lock(&mu_);
        mu_.Await(absl::Condition(this, &SessionWriter::HasWork));
        if (stop_ && (queue_.empty() || !ready_)) return;
        if (!queue_.empty()) {
          message = std::move(queue_.front());
          queue_.pop_front();
        } else {
          v1::SessionClosed* closed = message.mutable_closed();
          closed->set_code(static_cast<int32_t>(closed_why_.code()));
          closed->set_message(std::string(closed_why_.message()));
          close_sent_ = true;
        }
      }
      const bool last = message.has_closed();
      if (!stream_->Write(message)) {
        // The worker is gone; the reader side notices and detaches. Drop what is queued.
        absl::MutexLock lock(&mu_);
        queue_.clear();
        write_failed_ = true;
      }
      if (last) stream_->Cancel();
    }
  }

  SessionStream* const stream_;
  const size_t max_queued_;
  absl::Mutex mu_;
  std::deque<v1::DaemonMessage> queue_ ABSL_GUARDED_BY(mu_);
  bool ready_ ABSL_GUARDED_BY(mu_) = false;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  bool closing_ ABSL_GUARDED_BY(mu_) = false;
  bool close_sent_ ABSL_GUARDED_BY(mu_) = false;
  bool write_failed_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status closed_why_ ABSL_GUARDED_BY(mu_);
  std::thread thread_;
};

}  // namespace kvoffload::daemon

#endif  // KVOFFLOAD_DAEMON_SERVICE_SESSION_WRITER_H_
