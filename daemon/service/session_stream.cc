#include "daemon/service/session_stream.h"

namespace kvoffload::daemon {

SessionStream::ReadResult SessionStream::Read(v1::WorkerMessage* message, absl::Time deadline) {
  {
    absl::MutexLock lock(&mu_);
    read_done_ = false;
  }
  StartRead(&read_buffer_);
  absl::MutexLock lock(&mu_);
  if (!mu_.AwaitWithDeadline(absl::Condition(this, &SessionStream::ReadDone), deadline)) {
    return ReadResult::kTimedOut;
  }
  if (!read_ok_) return ReadResult::kEnded;
  message->Swap(&read_buffer_);
  return ReadResult::kMessage;
}

void SessionStream::Serve(Listener* listener) {
  {
    absl::MutexLock lock(&mu_);
    listener_ = listener;
  }
  StartRead(&read_buffer_);
}

void SessionStream::StartWrite(const v1::DaemonMessage* message) {
  {
    absl::MutexLock lock(&mu_);
    ++writes_in_flight_;
  }
  ServerBidiReactor::StartWrite(message);
}

void SessionStream::WaitReadsEnded() {
  absl::MutexLock lock(&mu_);
  mu_.Await(absl::Condition(this, &SessionStream::ReadsEnded));
}

void SessionStream::WaitQuiet() {
  absl::MutexLock lock(&mu_);
  mu_.Await(absl::Condition(this, &SessionStream::Quiet));
}

void SessionStream::OnReadDone(bool ok) {
  Listener* listener;
  {
    absl::MutexLock lock(&mu_);
    if (listener_ == nullptr) {  // the registration's blocking Read
      read_ok_ = ok;
      read_done_ = true;
      return;
    }
    listener = listener_;
    ++listener_calls_;
  }
  if (!ok) {
    listener->OnReadsEnded();
  } else if (listener->OnMessage(read_buffer_)) {
    StartRead(&read_buffer_);  // the buffer is free again: OnMessage has returned
  }
  absl::MutexLock lock(&mu_);
  --listener_calls_;
  if (!ok) reads_ended_ = true;
}

void SessionStream::OnWriteDone(bool ok) {
  Listener* listener;
  {
    absl::MutexLock lock(&mu_);
    listener = listener_;
    ++listener_calls_;
  }
  if (listener != nullptr) listener->OnWritten(ok);
  absl::MutexLock lock(&mu_);
  --listener_calls_;
  --writes_in_flight_;
}

}  // namespace kvoffload::daemon
