#include "daemon/service/worker_service.h"

#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/logging.h"
#include "common/thread_name.h"
#include "daemon/service/convert.h"
#include "daemon/service/session_writer.h"

namespace kvoffload::daemon {
namespace {

// A registered session's parts, from the stream to the engine on the gRPC thread that read them
// (no hop to the session's thread: that would cost each job a thread wake-up).
class PartReader final : public SessionStream::Listener {
 public:
  PartReader(Engine* engine, uint64_t session_id, SessionWriter* writer)
      : engine_(engine), session_id_(session_id), writer_(writer) {}

  bool OnMessage(const v1::WorkerMessage& message) override {
    if (!message.has_submit()) {
      writer_->OnJobFinished(
          JobResult{0, absl::InvalidArgumentError("only `submit` may follow `register`"), 0});
    } else {
      auto part = FromProto(message.submit());
      absl::Status status =
          part.ok() ? engine_->Submit(session_id_, *std::move(part)) : part.status();
      if (!status.ok()) writer_->OnJobFinished(JobResult{message.submit().job_id(), status, 0});
    }
    return writer_->ContinueReads();
  }
  void OnReadsEnded() override {}
  void OnWritten(bool ok) override { writer_->OnWritten(ok); }

 private:
  Engine* const engine_;
  const uint64_t session_id_;
  SessionWriter* const writer_;
};

}  // namespace

WorkerService::WorkerService(EngineRegistry* registry, const CallerSource* peers,
                             const WorkerServiceOptions& options)
    : registry_(registry), peers_(peers), options_(options) {}

WorkerService::~WorkerService() {
  {
    absl::MutexLock lock(&mu_);
    mu_.Await(absl::Condition(this, &WorkerService::NoSessions));
  }
  JoinEnded();
}

void WorkerService::JoinEnded() {
  std::vector<std::thread> ended;
  {
    absl::MutexLock lock(&mu_);
    for (std::thread::id id : ended_) {
      auto it = threads_.find(id);
      ended.push_back(std::move(it->second));
      threads_.erase(it);
    }
    ended_.clear();
  }
  for (std::thread& t : ended) t.join();
}

grpc::ServerBidiReactor<v1::WorkerMessage, v1::DaemonMessage>* WorkerService::Session(
    grpc::CallbackServerContext* context) {
  JoinEnded();
  auto* stream = new SessionStream(context);
  // The session's caller, fixed for its lifetime: looked up once, while its connection is live.
  const absl::StatusOr<Caller> caller = peers_->CallerOf(context);
  if (!caller.ok()) {
    stream->Finish(ToGrpcStatus(caller.status()));
    return stream;
  }
  absl::MutexLock lock(&mu_);
  if (sessions_ >= options_.max_sessions) {
    stream->Finish(grpc::Status(
        grpc::StatusCode::RESOURCE_EXHAUSTED,
        absl::StrCat(sessions_, " worker sessions are open, the limit is ", options_.max_sessions,
                     " (--max_worker_sessions)")));
    return stream;
  }
  ++sessions_;
  // Started under the lock: its last act (recording its end) cannot come before it is listed.
  std::thread thread([this, stream, c = *caller] { RunSession(stream, c); });
  const std::thread::id id = thread.get_id();
  threads_.emplace(id, std::move(thread));
  return stream;
}

void WorkerService::RunSession(SessionStream* stream, const Caller& caller) {
  common::SetThreadName("kvo-session");
  v1::WorkerMessage first;
  grpc::Status status = ReadRegistration(stream, &first);
  if (status.ok()) status = Serve(stream, caller, first.register_());
  stream->Finish(std::move(status));  // the stream may be gone from here on
  absl::MutexLock lock(&mu_);
  --sessions_;
  ended_.push_back(std::this_thread::get_id());
}

grpc::Status WorkerService::ReadRegistration(SessionStream* stream, v1::WorkerMessage* first) {
  switch (stream->Read(first, absl::Now() + options_.first_message_timeout)) {
    case SessionStream::ReadResult::kTimedOut:
      return grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED,
                          absl::StrCat("no `register` within ",
                                       absl::FormatDuration(options_.first_message_timeout),
                                       " of opening the session (--first_message_timeout_s)"));
    case SessionStream::ReadResult::kEnded:
      return grpc::Status(grpc::StatusCode::CANCELLED, "session ended before registering");
    case SessionStream::ReadResult::kMessage:
      break;
  }
  if (!first->has_register_()) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                        "the first message of a worker session must be `register`");
  }
  return grpc::Status::OK;
}

grpc::Status WorkerService::Serve(SessionStream* stream, const Caller& caller,
                                  const v1::RegisterWorker& reg) {
  static spdlog::logger* log = common::Logger("worker");
  auto spec = SpecFromProto(reg.spec());
  if (!spec.ok()) return ToGrpcStatus(spec.status());
  auto registration = FromProto(reg);
  if (!registration.ok()) return ToGrpcStatus(registration.status());
  // The backend opens memory of the connecting process only; a worker claiming another pid is
  // either confused or borrowing someone else's memory.
  if (static_cast<int64_t>(reg.pid()) != caller.pid) {
    return grpc::Status(
        grpc::StatusCode::PERMISSION_DENIED,
        absl::StrCat(caller.Describe(), " registered as pid ", reg.pid(),
                     ": a worker must register from the process it declares"));
  }
  registration->caller_pid = caller.pid;
  registration->caller_uid = caller.uid;

  SessionWriter writer(stream, options_.max_queued_verdicts);
  // Validates the registration and opens the worker's memory before the engine is created or
  // joined: a refused registration leaves nothing behind.
  auto attached = registry_->AttachWorker(*spec, reg.region_epoch(), reg.mp_rank(), *registration,
                                         &writer, &caller);
  if (!attached.ok()) {
    log->warn("engine {}: registration of mp_rank {} (pid {}) refused: {}", spec->Key(),
              reg.mp_rank(), reg.pid(), attached.status().ToString());
    return ToGrpcStatus(attached.status());
  }
  std::shared_ptr<Engine> engine = std::move(attached->engine);
  const WorkerInfo& info = attached->info;
  v1::DaemonMessage registered;
  {
    v1::Registered* r = registered.mutable_registered();
    GeometryToProto(engine->geometry(), r->mutable_geometry());
    r->set_slot(info.slot);
    r->set_writer(info.writer);
    r->set_session_id(info.session_id);
    r->set_region_epoch(info.region_epoch);
    r->set_owner_uid(engine->owner_uid());
  }

  // Parts until the worker leaves, taken on gRPC's threads (PartReader); a refused part is
  // answered with its error as a verdict. This thread waits for the end.
  PartReader reader(engine.get(), info.session_id, &writer);
  stream->Serve(&reader);
  writer.SendRegistered(std::move(registered));
  stream->WaitReadsEnded();
  engine->Detach(info.session_id);
  writer.Drain();
  stream->WaitQuiet();  // nothing calls the reader or the writer any more
  absl::Status why = writer.closed_why();
  return why.ok() ? grpc::Status::OK : ToGrpcStatus(why);
}

}  // namespace kvoffload::daemon
