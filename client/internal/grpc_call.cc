#include "client/internal/grpc_call.h"

#include "absl/strings/str_cat.h"
#include "proto/spec_convert.h"

namespace kvoffload::client::internal {

absl::Status CallStatus(const grpc::Status& status, absl::string_view call,
                        const std::string& socket_path, absl::Duration timeout) {
  if (status.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED) {
    return absl::DeadlineExceededError(absl::StrCat(
        call, ": no answer from kvoffloadd at ", socket_path, " within ",
        absl::FormatDuration(timeout), " (the client's deadline; ", status.error_message(), ")"));
  }
  return FromGrpcStatus(status);
}

absl::Status CheckTimeout(absl::Duration timeout, absl::string_view what) {
  if (timeout <= absl::ZeroDuration() || timeout == absl::InfiniteDuration()) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, " must be positive and finite, got ", absl::FormatDuration(timeout)));
  }
  return absl::OkStatus();
}

std::chrono::system_clock::time_point After(absl::Duration d) {
  return absl::ToChronoTime(absl::Now() + d);
}

std::shared_ptr<grpc::Channel> Dial(const std::string& socket_path) {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(256 << 20);
  args.SetMaxSendMessageSize(256 << 20);
  return grpc::CreateCustomChannel(absl::StrCat("unix:", socket_path),
                                   grpc::InsecureChannelCredentials(), args);
}

RegionGeometry FromProto(const v1::Geometry& g) {
  RegionGeometry out;
  static_cast<common::Geometry&>(out) = GeometryFromProto(g);
  out.fingerprint = g.fingerprint();
  return out;
}

Watchdog::Watchdog(grpc::ClientContext* context)
    : context_(context), thread_([this] { Run(); }) {}

Watchdog::~Watchdog() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
    cv_.Signal();
  }
  thread_.join();
}

void Watchdog::Arm(absl::Time deadline) {
  absl::MutexLock lock(&mu_);
  deadline_ = deadline;
  if (deadline < wake_at_) cv_.Signal();  // only an earlier deadline needs the thread now
}

bool Watchdog::Disarm() {
  absl::MutexLock lock(&mu_);
  deadline_ = absl::InfiniteFuture();  // the thread, if it wakes, finds nothing to do
  return fired_;
}

uint64_t Watchdog::TEST_wakeups() const {
  absl::MutexLock lock(&mu_);
  return wakeups_;
}

absl::Time Watchdog::TEST_sleeping_until() const {
  absl::MutexLock lock(&mu_);
  return wake_at_;
}

bool Watchdog::TEST_fired() const {
  absl::MutexLock lock(&mu_);
  return fired_;
}

void Watchdog::Run() {
  absl::MutexLock lock(&mu_);
  while (!stop_) {
    if (deadline_ <= absl::Now()) {
      fired_ = true;
      deadline_ = absl::InfiniteFuture();
      context_->TryCancel();
    }
    wake_at_ = deadline_;
    if (wake_at_ == absl::InfiniteFuture()) {
      cv_.Wait(&mu_);
    } else {
      cv_.WaitWithDeadline(&mu_, wake_at_);
    }
    ++wakeups_;
  }
}

}  // namespace kvoffload::client::internal
