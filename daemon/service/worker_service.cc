#include "daemon/service/worker_service.h"

#include <deque>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/logging.h"
#include "daemon/service/convert.h"
#include "daemon/service/session_writer.h"

namespace kvoffload::daemon {
using Stream = WorkerService::Stream;

WorkerService::WorkerService(EngineRegistry* registry, const CallerSource* peers,
                             const WorkerServiceOptions& options)
    : registry_(registry),
      peers_(peers),
      options_(options),
      watcher_([this] { WatchFirstMessages(); }) {}

WorkerService::~WorkerService() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  watcher_.join();
}

void WorkerService::WatchFirstMessages() {
  absl::MutexLock lock(&mu_);
  while (!mu_.AwaitWithTimeout(absl::Condition(this, &WorkerService::WatchHasWork),
                               absl::Milliseconds(100))) {
    const absl::Time now = absl::Now();
    for (auto& [context, deadline] : awaiting_first_) {
      // TryCancel makes the session's blocked Read return false; the session then ends itself.
      if (now >= deadline) context->TryCancel();
    }
  }
}

grpc::Status WorkerService::Session(grpc::ServerContext* context, Stream* stream) {
  // The session's caller, fixed for its lifetime: looked up once, while its connection is live.
  const absl::StatusOr<Caller> caller = peers_->CallerOf(context);
  if (!caller.ok()) return ToGrpcStatus(caller.status());
  {
    absl::MutexLock lock(&mu_);
    if (sessions_ >= options_.max_sessions) {
      return grpc::Status(
          grpc::StatusCode::RESOURCE_EXHAUSTED,
          absl::StrCat(sessions_, " worker sessions are open, the limit is ", options_.max_sessions,
                       " (--max_worker_sessions)"));
    }
    ++sessions_;
    awaiting_first_[context] = absl::Now() + options_.first_message_timeout;
  }
  struct Count {
    WorkerService* service;
    grpc::ServerContext* context;
    ~Count() {
      absl::MutexLock lock(&service->mu_);
      --service->sessions_;
      service->awaiting_first_.erase(context);
    }
  } count{this, context};

  v1::WorkerMessage first;
  grpc::Status read = ReadRegistration(context, stream, &first);
  if (!read.ok()) return read;
  return Serve(context, stream, *caller, first.register_());
}

grpc::Status WorkerService::ReadRegistration(grpc::ServerContext* context, Stream* stream,
                                             v1::WorkerMessage* first) {
  const bool got_first = stream->Read(first);
  bool timed_out = false;
  {
    absl::MutexLock lock(&mu_);
    auto it = awaiting_first_.find(context);
    timed_out = it != awaiting_first_.end() && absl::Now() >= it->second;
    awaiting_first_.erase(context);
  }
  if (!got_first || (timed_out && context->IsCancelled())) {
    if (timed_out) {
      return grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED,
                          absl::StrCat("no `register` within ",
                                       absl::FormatDuration(options_.first_message_timeout),
                                       " of opening the session (--first_message_timeout_s)"));
    }
    return grpc::Status(grpc::StatusCode::CANCELLED, "session ended before registering");
  }
  if (!first->has_register_()) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                        "the first message of a worker session must be `register`");
  }
  return grpc::Status::OK;
}

grpc::Status WorkerService::Serve(grpc::ServerContext* context, Stream* stream,
                                  const Caller& caller, const v1::RegisterWorker& reg) {
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

  SessionWriter writer(context, stream, options_.max_queued_verdicts);
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
  {
    v1::DaemonMessage message;
    v1::Registered* r = message.mutable_registered();
    GeometryToProto(engine->geometry(), r->mutable_geometry());
    r->set_slot(info.slot);
    r->set_writer(info.writer);
    r->set_session_id(info.session_id);
    r->set_region_epoch(info.region_epoch);
    r->set_owner_uid(engine->owner_uid());
    writer.SendRegistered(std::move(message));
  }

  // Parts until the worker leaves; a refused part is answered with its error as a verdict.
  v1::WorkerMessage message;
  for (;;) {
    writer.WaitForRoom();
    if (!stream->Read(&message)) break;
    if (!message.has_submit()) {
      writer.OnJobFinished(
          JobResult{0, absl::InvalidArgumentError("only `submit` may follow `register`"), 0});
      continue;
    }
    auto part = FromProto(message.submit());
    absl::Status status =
        part.ok() ? engine->Submit(info.session_id, *std::move(part)) : part.status();
    if (!status.ok()) writer.OnJobFinished(JobResult{message.submit().job_id(), status, 0});
  }
  engine->Detach(info.session_id);
  absl::Status why = writer.closed_why();
  return why.ok() ? grpc::Status::OK : ToGrpcStatus(why);
}

}  // namespace kvoffload::daemon
