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

bool SessionStream::Write(const v1::DaemonMessage& message) {
  {
    absl::MutexLock lock(&mu_);
    write_done_ = false;
  }
  StartWrite(&message);
  absl::MutexLock lock(&mu_);
  mu_.Await(absl::Condition(this, &SessionStream::WriteDone));
  return write_ok_;
}

void SessionStream::OnReadDone(bool ok) {
  absl::MutexLock lock(&mu_);
  read_ok_ = ok;
  read_done_ = true;
}

void SessionStream::OnWriteDone(bool ok) {
  absl::MutexLock lock(&mu_);
  write_ok_ = ok;
  write_done_ = true;
}

}  // namespace kvoffload::daemon
