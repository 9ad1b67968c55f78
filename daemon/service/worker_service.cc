#include "daemon/service/worker_service.h"

#include <deque>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/logging.h"
#include "daemon/service/convert.h"

namespace kvoffload::daemon {
namespace {

using Stream = grpc::ServerReaderWriter<v1::DaemonMessage, v1::WorkerMessage>;

// Queues messages for one session and writes them from its own thread, so engine threads never
// block on a slow worker's flow control (gRPC allows one writer at a time). Nothing is written
// before `registered`, so a verdict that races the registration cannot overtake it; when the
// engine closes, the queue is drained, a SessionClosed with the reason is written, and only then
// is the call cancelled (which unblocks the session's Read).
class SessionWriter final : public JobListener {
 public:
  SessionWriter(grpc::ServerContext* context, Stream* stream)
      : context_(context), stream_(stream), thread_([this] { Run(); }) {}

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

 private:
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
      }
      if (last) context_->TryCancel();
    }
  }

  grpc::ServerContext* const context_;
  Stream* const stream_;
  absl::Mutex mu_;
  std::deque<v1::DaemonMessage> queue_ ABSL_GUARDED_BY(mu_);
  bool ready_ ABSL_GUARDED_BY(mu_) = false;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  bool closing_ ABSL_GUARDED_BY(mu_) = false;
  bool close_sent_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status closed_why_ ABSL_GUARDED_BY(mu_);
  std::thread thread_;
};

}  // namespace

grpc::Status WorkerService::Session(grpc::ServerContext* context, Stream* stream) {
  static spdlog::logger* log = common::Logger("worker");
  v1::WorkerMessage first;
  if (!stream->Read(&first)) {
    return grpc::Status(grpc::StatusCode::CANCELLED, "session ended before registering");
  }
  if (!first.has_register_()) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                        "the first message of a worker session must be `register`");
  }
  const v1::RegisterWorker& reg = first.register_();
  auto spec = SpecFromProto(reg.spec());
  if (!spec.ok()) return ToGrpcStatus(spec.status());
  auto registration = FromProto(reg);
  if (!registration.ok()) return ToGrpcStatus(registration.status());
  auto opened = registry_->Open(*spec);
  if (!opened.ok()) return ToGrpcStatus(opened.status());
  std::shared_ptr<Engine> engine = std::move(opened->engine);

  SessionWriter writer(context, stream);
  auto info = engine->Attach(reg.mp_rank(), *registration, &writer);
  if (!info.ok()) {
    log->warn("engine {}: registration of mp_rank {} (pid {}) refused: {}", engine->key(),
              reg.mp_rank(), reg.pid(), info.status().ToString());
    return ToGrpcStatus(info.status());
  }
  {
    v1::DaemonMessage message;
    v1::Registered* r = message.mutable_registered();
    GeometryToProto(engine->geometry(), r->mutable_geometry());
    r->set_slot(info->slot);
    r->set_writer(info->writer);
    r->set_session_id(info->session_id);
    writer.SendRegistered(std::move(message));
  }

  v1::WorkerMessage message;
  while (stream->Read(&message)) {
    if (!message.has_submit()) {
      writer.OnJobFinished(
          JobResult{0, absl::InvalidArgumentError("only `submit` may follow `register`"), 0});
      continue;
    }
    auto part = FromProto(message.submit());
    absl::Status status = part.ok() ? engine->Submit(info->session_id, *part) : part.status();
    if (!status.ok()) writer.OnJobFinished(JobResult{message.submit().job_id(), status, 0});
  }
  engine->Detach(info->session_id);
  absl::Status why = writer.closed_why();
  return why.ok() ? grpc::Status::OK : ToGrpcStatus(why);
}

}  // namespace kvoffload::daemon
