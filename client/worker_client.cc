// WorkerClient: one worker's session with kvoffloadd, registered again when the daemon returns.
//
// One thread (the reader) owns the session's lifecycle: it reads verdicts until the stream ends,
// then fails the jobs still in flight, decides whether the daemon went away (and registers
// again, with backoff) or ended the session for good. Submit writes on the live session.
// Lock order: write_mu before mu.
#include <sys/types.h>
#include <unistd.h>

#include <algorithm>
#include <map>
#include <set>
#include <thread>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "client/daemon_socket.h"
#include "client/internal/grpc_call.h"
#include "client/kvoffload_client.h"
#include "common/error_info.h"
#include "grpcpp/grpcpp.h"
#include "kvoffload/v1/kvoffload.grpc.pb.h"
#include "proto/spec_convert.h"
#include "proto/status_convert.h"

namespace kvoffload::client {
namespace {

using internal::FromGrpcStatus;
using internal::Watchdog;
using Phase = WorkerSessionState::Phase;

// One registration's stream. Members are destroyed bottom-up: the watchdog (which names the
// context) and the stream go before the context.
struct Session {
  std::shared_ptr<grpc::Channel> channel;
  std::unique_ptr<v1::Worker::Stub> stub;
  grpc::ClientContext context;
  std::unique_ptr<grpc::ClientReaderWriter<v1::WorkerMessage, v1::DaemonMessage>> stream;
  std::unique_ptr<Watchdog> watchdog;
};

v1::WorkerMessage RegistrationMessage(const WorkerOptions& options, uint64_t region_epoch) {
  v1::WorkerMessage first;
  v1::RegisterWorker* reg = first.mutable_register_();
  SpecToProto(options.spec, reg->mutable_spec());
  reg->set_mp_rank(options.mp_rank);
  reg->set_device(options.device);
  reg->set_device_uuid(options.device_uuid);
  for (const TensorHandle& t : options.tensors) {
    v1::TensorSpec* p = reg->add_tensors();
    p->set_allocation_handle(t.allocation_handle);
    p->set_allocation_bytes(t.allocation_bytes);
    p->set_offset(t.offset);
    p->set_num_blocks(t.num_blocks);
    p->set_block_stride_bytes(t.block_stride_bytes);
    p->set_page_bytes(t.page_bytes);
  }
  for (const std::string& h : options.event_handles) reg->add_event_handles(h);
  reg->set_pid(static_cast<uint32_t>(getpid()));
  reg->set_region_epoch(region_epoch);
  return first;
}

// Dials and registers on `session`, which the caller owns and may cancel meanwhile (TryCancel
// on its context, from another thread) as long as it outlives this call. `wait_connected`: the
// first Connect waits for the channel (its historical message); a reconnect lets the call fail
// fast instead and retries on its own schedule.
absl::Status OpenSession(const WorkerOptions& options, uint64_t region_epoch,
                         bool wait_connected, Session* session, Registered* registered) {
  const absl::Time deadline = absl::Now() + options.connect_timeout;
  session->channel = internal::Dial(options.socket_path);
  if (wait_connected && !session->channel->WaitForConnected(absl::ToChronoTime(deadline))) {
    return absl::DeadlineExceededError(absl::StrCat(
        "cannot connect to kvoffloadd at ", options.socket_path, " within ",
        absl::FormatDuration(options.connect_timeout), " (WorkerOptions.connect_timeout)"));
  }
  session->stub = v1::Worker::NewStub(session->channel);
  // Registration (which may create the region) is bounded by what is left of connect_timeout.
  session->watchdog = std::make_unique<Watchdog>(&session->context);
  session->watchdog->Arm(deadline);
  session->stream = session->stub->Session(&session->context);
  auto registration_failed = [&](absl::Status status) {
    if (session->watchdog->Disarm()) {
      return absl::DeadlineExceededError(absl::StrCat(
          "kvoffloadd at ", options.socket_path, " did not answer the registration within ",
          absl::FormatDuration(options.connect_timeout), " (WorkerOptions.connect_timeout)"));
    }
    return status;
  };
  if (!session->stream->Write(RegistrationMessage(options, region_epoch))) {
    return registration_failed(FromGrpcStatus(session->stream->Finish()));
  }
  v1::DaemonMessage reply;
  if (!session->stream->Read(&reply)) {
    absl::Status status = FromGrpcStatus(session->stream->Finish());
    return registration_failed(
        status.ok() ? absl::UnavailableError("kvoffloadd ended the session") : status);
  }
  if (session->watchdog->Disarm()) {
    session->context.TryCancel();
    session->stream->Finish();
    return registration_failed(absl::OkStatus());
  }
  if (!reply.has_registered()) {
    session->context.TryCancel();
    session->stream->Finish();
    return absl::InternalError("kvoffloadd answered registration with an unexpected message");
  }
  registered->geometry = internal::FromProto(reply.registered().geometry());
  registered->slot = reply.registered().slot();
  registered->writer = reply.registered().writer();
  registered->session_id = reply.registered().session_id();
  registered->region_epoch = reply.registered().region_epoch();
  return absl::OkStatus();
}

// A refusal that registering again cannot cure (the session then ends with it).
bool Permanent(const absl::Status& status) {
  switch (status.code()) {
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kPermissionDenied:
    case absl::StatusCode::kFailedPrecondition:
    case absl::StatusCode::kUnauthenticated:
      return true;
    default:
      return false;
  }
}

}  // namespace

struct WorkerClient::Impl {
  const WorkerOptions options;  // re-sent unchanged (but region_epoch 0) to register again
  std::thread reader;

  absl::Mutex write_mu;  // one writer at a time on the stream; Finish excludes writers
  std::unique_ptr<Session> session ABSL_GUARDED_BY(write_mu);  // null while reconnecting
  bool stream_finished ABSL_GUARDED_BY(write_mu) = false;

  mutable absl::Mutex mu;
  std::map<uint64_t, FinishedJob> finished ABSL_GUARDED_BY(mu);
  std::set<uint64_t> in_flight ABSL_GUARDED_BY(mu);  // written, no verdict yet
  // Parts Submit reported as not taken although they may have reached the daemon (a write that
  // broke or overran call_timeout): their verdicts, if any come, are dropped (one report a job).
  std::set<uint64_t> refused ABSL_GUARDED_BY(mu);
  Phase phase ABSL_GUARDED_BY(mu) = Phase::kLive;
  absl::Status status ABSL_GUARDED_BY(mu);        // see WorkerSessionState::status
  absl::Status last_end ABSL_GUARDED_BY(mu);      // why the last session ended
  absl::Status closed_reason ABSL_GUARDED_BY(mu);  // from SessionClosed, if the daemon sent one
  absl::Status ended_by_client ABSL_GUARDED_BY(mu);  // Submit's deadline ended the session
  Registered registration ABSL_GUARDED_BY(mu);
  uint64_t generation ABSL_GUARDED_BY(mu) = 1;
  uint64_t region_changes ABSL_GUARDED_BY(mu) = 0;
  uint64_t attempts ABSL_GUARDED_BY(mu) = 0;
  bool closing ABSL_GUARDED_BY(mu) = false;
  Session* connecting ABSL_GUARDED_BY(mu) = nullptr;  // a registration attempt, to cancel

  explicit Impl(const WorkerOptions& o) : options(o) {}

  void Run(Session* s) {
    while (s != nullptr) {
      ReadVerdicts(s);
      if (!EndSession()) return;
      s = Reconnect();
    }
  }

  void ReadVerdicts(Session* s) {
    v1::DaemonMessage message;
    while (s->stream->Read(&message)) {
      if (message.has_closed()) {
        // The daemon's reason for ending the session (it cancels the call right after).
        absl::MutexLock lock(&mu);
        closed_reason = StatusFromMessage(message.closed());
        continue;
      }
      if (!message.has_finished()) continue;
      const v1::JobFinished& f = message.finished();
      FinishedJob job;
      job.job_id = f.job_id();
      job.status = StatusFromMessage(f);  // code, message and reason
      job.bytes = f.bytes();
      absl::MutexLock lock(&mu);
      if (refused.erase(job.job_id) > 0) continue;  // Submit already reported it
      in_flight.erase(job.job_id);
      finished.emplace(job.job_id, std::move(job));  // the first verdict for an id wins
    }
  }

  // Finishes the ended stream, fails the jobs in flight, and says whether to register again.
  bool EndSession() {
    std::unique_ptr<Session> old;
    bool again = false;
    {
      absl::MutexLock write_lock(&write_mu);  // gRPC: no Write may run concurrently with Finish
      const absl::Status finish = FromGrpcStatus(session->stream->Finish());
      stream_finished = true;
      old = std::move(session);
      absl::MutexLock lock(&mu);
      absl::Status why;
      if (!ended_by_client.ok()) {
        why = ended_by_client;
      } else if (!closed_reason.ok()) {
        why = closed_reason;
      } else {
        why = finish.ok() ? absl::UnavailableError("session ended by kvoffloadd") : finish;
      }
      // The daemon went away: its stream broke (UNAVAILABLE) or it said it is stopping
      // (SessionClosed UNAVAILABLE). Any other end was meant; the client's own ends too.
      again = options.reconnect && !closing && ended_by_client.ok() &&
              why.code() == absl::StatusCode::kUnavailable;
      last_end = why;
      const absl::Status failed =
          again ? absl::UnavailableError(absl::StrCat(
                      "kvoffloadd at ", options.socket_path,
                      " went away with the job in flight (", why.message(),
                      "); the job failed and the worker registers again"))
                : common::Annotated(why, absl::StrCat("the session ended with the job in "
                                                      "flight: ", why.message()));
      for (uint64_t id : in_flight) finished.emplace(id, FinishedJob{id, failed, 0});
      in_flight.clear();
      refused.clear();
      closed_reason = absl::OkStatus();
      phase = again ? Phase::kReconnecting : Phase::kEnded;
      status = again ? absl::UnavailableError(absl::StrCat(
                           "the session with kvoffloadd at ", options.socket_path,
                           " ended (", why.message(), "); registering again"))
                     : why;
    }
    old.reset();  // joins its watchdog; no lock held
    return again;
  }

  // Registers again until it works (returns the new session, installed), the daemon refuses
  // for good, or the client closes (nullptr).
  Session* Reconnect() {
    absl::Duration backoff = options.reconnect_initial_backoff;
    for (;;) {
      uint64_t number = 0;
      {
        absl::MutexLock lock(&mu);
        auto closed = [this]() ABSL_NO_THREAD_SAFETY_ANALYSIS { return closing; };
        mu.AwaitWithTimeout(absl::Condition(&closed), backoff);
        if (closing) return nullptr;
        number = ++attempts;
      }
      backoff = std::min(backoff * 2, options.reconnect_max_backoff);
      Registered registered;
      // The attempt belongs to this thread; the destructor may cancel it through `connecting`,
      // which is cleared under mu below before the attempt can be destroyed.
      auto attempt = std::make_unique<Session>();
      absl::Status opened = CheckDaemonSocket(options.socket_path);
      if (opened.ok()) {
        {
          absl::MutexLock lock(&mu);
          if (closing) return nullptr;
          connecting = attempt.get();
        }
        opened = OpenSession(options, /*region_epoch=*/0, /*wait_connected=*/false,
                             attempt.get(), &registered);
      }
      absl::MutexLock write_lock(&write_mu);
      absl::MutexLock lock(&mu);
      connecting = nullptr;
      if (closing) {
        if (opened.ok()) {  // cancelled here, finished by the destructor
          attempt->context.TryCancel();
          session = std::move(attempt);
          stream_finished = false;
        }
        return nullptr;
      }
      if (!opened.ok()) {
        if (Permanent(opened)) {
          phase = Phase::kEnded;
          status = common::Annotated(
              opened,
              absl::StrCat("kvoffloadd refused to register the worker again after it went away: ",
                           opened.message()));
          return nullptr;
        }
        status = absl::UnavailableError(absl::StrCat(
            "the session with kvoffloadd at ", options.socket_path, " ended (",
            last_end.message(), "); registering again, attempt ", number, ": ",
            opened.ToString()));
        continue;  // `attempt` dies here, no longer published
      }
      if (registered.region_epoch != registration.region_epoch) ++region_changes;
      registration = registered;
      ++generation;
      ended_by_client = absl::OkStatus();
      phase = Phase::kLive;
      status = absl::OkStatus();
      session = std::move(attempt);
      stream_finished = false;
      return session.get();
    }
  }
};

absl::StatusOr<std::unique_ptr<WorkerClient>> WorkerClient::Connect(const WorkerOptions& options) {
  if (absl::Status s =
          internal::CheckTimeout(options.connect_timeout, "WorkerOptions.connect_timeout");
      !s.ok()) {
    return s;
  }
  if (absl::Status s = internal::CheckTimeout(options.call_timeout, "WorkerOptions.call_timeout");
      !s.ok()) {
    return s;
  }
  if (options.reconnect &&
      (options.reconnect_initial_backoff <= absl::ZeroDuration() ||
       options.reconnect_max_backoff < options.reconnect_initial_backoff ||
       options.reconnect_max_backoff == absl::InfiniteDuration())) {
    return absl::InvalidArgumentError(absl::StrCat(
        "WorkerOptions: want 0 < reconnect_initial_backoff (",
        absl::FormatDuration(options.reconnect_initial_backoff), ") <= reconnect_max_backoff (",
        absl::FormatDuration(options.reconnect_max_backoff), ") < infinity"));
  }
  if (absl::Status s = CheckDaemonSocket(options.socket_path); !s.ok()) return s;
  Registered registered;
  auto session = std::make_unique<Session>();
  if (absl::Status s = OpenSession(options, options.region_epoch, /*wait_connected=*/true,
                                   session.get(), &registered);
      !s.ok()) {
    return s;
  }
  auto impl = std::make_unique<Impl>(options);
  Session* first = session.get();
  {
    absl::MutexLock write_lock(&impl->write_mu);
    absl::MutexLock lock(&impl->mu);
    impl->session = std::move(session);
    impl->registration = registered;
  }
  Impl* raw = impl.get();
  impl->reader = std::thread([raw, first] { raw->Run(first); });
  return std::unique_ptr<WorkerClient>(new WorkerClient(std::move(impl)));
}

WorkerClient::WorkerClient(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

WorkerClient::~WorkerClient() {
  {
    absl::MutexLock lock(&impl_->mu);
    impl_->closing = true;
    if (impl_->connecting != nullptr) impl_->connecting->context.TryCancel();
  }
  {
    absl::MutexLock write_lock(&impl_->write_mu);
    if (impl_->session != nullptr && !impl_->stream_finished) {
      impl_->session->watchdog->Arm(absl::Now() + impl_->options.call_timeout);
      impl_->session->stream->WritesDone();
      impl_->session->watchdog->Disarm();
    }
    if (impl_->session != nullptr) impl_->session->context.TryCancel();
  }
  impl_->reader.join();
  // A session registered while closing was cancelled but not finished by the reader.
  absl::MutexLock write_lock(&impl_->write_mu);
  if (impl_->session != nullptr && !impl_->stream_finished) impl_->session->stream->Finish();
}

Registered WorkerClient::registration() const {
  absl::MutexLock lock(&impl_->mu);
  return impl_->registration;
}

absl::Status WorkerClient::Submit(const JobRequest& job) {
  v1::WorkerMessage message;
  v1::Submit* s = message.mutable_submit();
  s->set_job_id(job.job_id);
  s->set_direction(job.direction == Direction::kStore ? v1::DIRECTION_STORE : v1::DIRECTION_LOAD);
  s->mutable_gpu_blocks()->Add(job.gpu_blocks.begin(), job.gpu_blocks.end());
  s->mutable_rows()->Add(job.rows.begin(), job.rows.end());
  for (const BlockRun& r : job.runs) {
    v1::BlockRun* run = s->add_runs();
    run->set_gpu_block(r.gpu_block);
    run->set_row(r.row);
    run->set_num_rows(r.num_rows);
  }
  for (const BlockRange& r : job.ranges) {
    v1::BlockRun* run = s->add_runs();
    run->set_gpu_block(r.gpu_block);
    run->set_row(r.row);
    run->set_first_block(r.first_block);
    run->set_num_blocks(r.num_blocks);
  }
  s->set_event_index(job.event_index);
  uint64_t generation = 0;
  {
    absl::MutexLock write_lock(&impl_->write_mu);
    if (impl_->session == nullptr || impl_->stream_finished) {
      absl::MutexLock lock(&impl_->mu);
      if (impl_->phase == Phase::kEnded) return impl_->status;
      return absl::UnavailableError(
          absl::StrCat(impl_->status.message(), " (job ", job.job_id, " not sent)"));
    }
    {
      absl::MutexLock lock(&impl_->mu);
      s->set_region_epoch(job.region_epoch != 0 ? job.region_epoch
                                                : impl_->registration.region_epoch);
      impl_->in_flight.insert(job.job_id);
      generation = impl_->generation;
    }
    Session* session = impl_->session.get();
    session->watchdog->Arm(absl::Now() + impl_->options.call_timeout);
    const bool written = session->stream->Write(message);
    const bool fired = session->watchdog->Disarm();
    if (written && !fired) return absl::OkStatus();
    // Not taken: no verdict will come, the error is the job's report. The reader cannot fail
    // the job meanwhile: it needs write_mu to end the session.
    absl::MutexLock lock(&impl_->mu);
    impl_->in_flight.erase(job.job_id);
    impl_->refused.insert(job.job_id);
    if (fired) {
      impl_->ended_by_client = absl::DeadlineExceededError(absl::StrCat(
          "job ", job.job_id, ": kvoffloadd at ", impl_->options.socket_path,
          " took no message for ", absl::FormatDuration(impl_->options.call_timeout),
          " (WorkerOptions.call_timeout); the session was ended"));
      return impl_->ended_by_client;
    }
  }
  // The stream broke: the reader is draining it and will have the daemon's reason (its
  // SessionClosed) in a moment; report that, not just that the session ended. The reader needs
  // write_mu to finish the stream, so it is not held here.
  absl::MutexLock lock(&impl_->mu);
  auto ended = [this, generation]() ABSL_NO_THREAD_SAFETY_ANALYSIS {
    return impl_->generation != generation || impl_->phase != Phase::kLive;
  };
  impl_->mu.AwaitWithTimeout(absl::Condition(&ended), absl::Seconds(5));
  if (ended()) return impl_->last_end;  // the daemon's reason, as it gave it
  return absl::UnavailableError("the session with kvoffloadd has ended");
}

std::vector<FinishedJob> WorkerClient::PollFinished(size_t max) {
  absl::MutexLock lock(&impl_->mu);
  std::vector<FinishedJob> out;
  auto it = impl_->finished.begin();
  for (; it != impl_->finished.end() && out.size() < max; ++it) out.push_back(std::move(it->second));
  impl_->finished.erase(impl_->finished.begin(), it);
  return out;
}

absl::StatusOr<FinishedJob> WorkerClient::WaitFinished(uint64_t job_id, absl::Duration timeout) {
  absl::MutexLock lock(&impl_->mu);
  auto ready = [&]() ABSL_NO_THREAD_SAFETY_ANALYSIS {
    return impl_->phase == Phase::kEnded || impl_->finished.count(job_id) > 0;
  };
  impl_->mu.AwaitWithTimeout(absl::Condition(&ready), timeout);
  auto it = impl_->finished.find(job_id);
  if (it != impl_->finished.end()) {
    FinishedJob job = std::move(it->second);
    impl_->finished.erase(it);
    return job;
  }
  if (impl_->phase == Phase::kEnded) return impl_->status;
  return absl::DeadlineExceededError(
      absl::StrCat("job ", job_id, " not finished after ", absl::FormatDuration(timeout)));
}

absl::Status WorkerClient::session_status() const {
  absl::MutexLock lock(&impl_->mu);
  return impl_->status;
}

WorkerSessionState WorkerClient::session_state() const {
  absl::MutexLock lock(&impl_->mu);
  WorkerSessionState state;
  state.phase = impl_->phase;
  state.status = impl_->status;
  state.generation = impl_->generation;
  state.region_changes = impl_->region_changes;
  state.reconnect_attempts = impl_->attempts;
  state.registration = impl_->registration;
  return state;
}

}  // namespace kvoffload::client
