#include "client/kvoffload_client.h"

#include <sys/types.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <iterator>
#include <map>
#include <thread>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "client/daemon_socket.h"
#include "common/status_macros.h"
#include "grpcpp/grpcpp.h"
#include "kvoffload/v1/kvoffload.grpc.pb.h"
#include "proto/spec_convert.h"

namespace kvoffload::client {
namespace {

absl::Status FromGrpcStatus(const grpc::Status& status) {
  if (status.ok()) return absl::OkStatus();
  return absl::Status(static_cast<absl::StatusCode>(status.error_code()), status.error_message());
}

// A call's status; a deadline names the call, the socket and the deadline so that the caller
// can tell a slow daemon from a dead one.
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

// Cancels a call whose current operation outlives its deadline: gRPC's synchronous streams have
// no deadline per message, only per call. One thread; Arm and Disarm are cheap. Thread-safe.
class Watchdog {
 public:
  explicit Watchdog(grpc::ClientContext* context)
      : context_(context), thread_([this] { Run(); }) {}
  ~Watchdog() {
    {
      absl::MutexLock lock(&mu_);
      stop_ = true;
    }
    thread_.join();
  }
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;

  void Arm(absl::Time deadline) {
    absl::MutexLock lock(&mu_);
    deadline_ = deadline;
  }
  // True when a deadline passed and the call was cancelled (ever, on this call).
  bool Disarm() {
    absl::MutexLock lock(&mu_);
    deadline_ = absl::InfiniteFuture();
    return fired_;
  }

 private:
  void Run() {
    absl::MutexLock lock(&mu_);
    while (!stop_) {
      const absl::Time deadline = deadline_;
      auto changed = [this, deadline]() ABSL_NO_THREAD_SAFETY_ANALYSIS {
        return stop_ || deadline_ != deadline;
      };
      if (deadline == absl::InfiniteFuture()) {
        mu_.Await(absl::Condition(&changed));
      } else if (!mu_.AwaitWithDeadline(absl::Condition(&changed), deadline)) {
        fired_ = true;
        deadline_ = absl::InfiniteFuture();
        context_->TryCancel();
      }
    }
  }

  grpc::ClientContext* const context_;
  absl::Mutex mu_;
  absl::Time deadline_ ABSL_GUARDED_BY(mu_) = absl::InfiniteFuture();
  bool fired_ ABSL_GUARDED_BY(mu_) = false;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;  // last: starts once the fields above exist
};

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

}  // namespace

// ---------------------------------------------------------------------------------------------
// WorkerClient

struct WorkerClient::Impl {
  std::shared_ptr<grpc::Channel> channel;
  std::unique_ptr<v1::Worker::Stub> stub;
  grpc::ClientContext context;
  std::unique_ptr<grpc::ClientReaderWriter<v1::WorkerMessage, v1::DaemonMessage>> stream;
  Registered registration;
  std::string socket_path;
  absl::Duration call_timeout;
  std::thread reader;
  // Declared after `context`, so destroyed (its thread joined) before it.
  std::unique_ptr<Watchdog> watchdog;

  absl::Mutex write_mu;  // one writer at a time on the stream; Finish excludes writers
  bool stream_finished ABSL_GUARDED_BY(write_mu) = false;
  mutable absl::Mutex mu;
  std::map<uint64_t, FinishedJob> finished ABSL_GUARDED_BY(mu);
  absl::Status session_status ABSL_GUARDED_BY(mu);
  absl::Status closed_reason ABSL_GUARDED_BY(mu);  // from SessionClosed, if the daemon sent one
  bool ended ABSL_GUARDED_BY(mu) = false;

  void ReadLoop() {
    v1::DaemonMessage message;
    while (stream->Read(&message)) {
      if (message.has_closed()) {
        // The daemon's reason for ending the session (it cancels the call right after).
        absl::MutexLock lock(&mu);
        closed_reason = absl::Status(static_cast<absl::StatusCode>(message.closed().code()),
                                     message.closed().message());
        continue;
      }
      if (!message.has_finished()) continue;
      const v1::JobFinished& f = message.finished();
      FinishedJob job;
      job.job_id = f.job_id();
      job.status = f.code() == 0
                       ? absl::OkStatus()
                       : absl::Status(static_cast<absl::StatusCode>(f.code()), f.message());
      job.bytes = f.bytes();
      absl::MutexLock lock(&mu);
      finished.emplace(job.job_id, std::move(job));  // the first verdict for an id wins
    }
    absl::Status status;
    {
      absl::MutexLock lock(&write_mu);  // gRPC: no Write may run concurrently with Finish
      status = FromGrpcStatus(stream->Finish());
      stream_finished = true;
    }
    absl::MutexLock lock(&mu);
    ended = true;
    if (!closed_reason.ok()) {
      session_status = closed_reason;
    } else {
      session_status = status.ok() ? absl::UnavailableError("session ended by kvoffloadd") : status;
    }
  }
};

absl::StatusOr<std::unique_ptr<WorkerClient>> WorkerClient::Connect(const WorkerOptions& options) {
  if (absl::Status s = CheckTimeout(options.connect_timeout, "WorkerOptions.connect_timeout");
      !s.ok()) {
    return s;
  }
  if (absl::Status s = CheckTimeout(options.call_timeout, "WorkerOptions.call_timeout"); !s.ok()) {
    return s;
  }
  if (absl::Status s = CheckDaemonSocket(options.socket_path); !s.ok()) return s;
  const absl::Time deadline = absl::Now() + options.connect_timeout;
  auto impl = std::make_unique<Impl>();
  impl->socket_path = options.socket_path;
  impl->call_timeout = options.call_timeout;
  impl->channel = Dial(options.socket_path);
  if (!impl->channel->WaitForConnected(absl::ToChronoTime(deadline))) {
    return absl::DeadlineExceededError(absl::StrCat(
        "cannot connect to kvoffloadd at ", options.socket_path, " within ",
        absl::FormatDuration(options.connect_timeout), " (WorkerOptions.connect_timeout)"));
  }
  impl->stub = v1::Worker::NewStub(impl->channel);
  impl->stream = impl->stub->Session(&impl->context);

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
  reg->set_region_epoch(options.region_epoch);
  // Registration (which may create the region) is bounded by what is left of connect_timeout.
  impl->watchdog = std::make_unique<Watchdog>(&impl->context);
  impl->watchdog->Arm(deadline);
  auto registration_failed = [&](absl::Status status) {
    if (impl->watchdog->Disarm()) {
      return absl::DeadlineExceededError(absl::StrCat(
          "kvoffloadd at ", options.socket_path, " did not answer the registration within ",
          absl::FormatDuration(options.connect_timeout), " (WorkerOptions.connect_timeout)"));
    }
    return status;
  };
  if (!impl->stream->Write(first)) {
    return registration_failed(FromGrpcStatus(impl->stream->Finish()));
  }
  v1::DaemonMessage reply;
  if (!impl->stream->Read(&reply)) {
    absl::Status status = FromGrpcStatus(impl->stream->Finish());
    return registration_failed(
        status.ok() ? absl::UnavailableError("kvoffloadd ended the session") : status);
  }
  if (impl->watchdog->Disarm()) {
    impl->context.TryCancel();
    impl->stream->Finish();
    return registration_failed(absl::OkStatus());
  }
  if (!reply.has_registered()) {
    impl->context.TryCancel();
    impl->stream->Finish();
    return absl::InternalError("kvoffloadd answered registration with an unexpected message");
  }
  impl->registration.geometry = FromProto(reply.registered().geometry());
  impl->registration.slot = reply.registered().slot();
  impl->registration.writer = reply.registered().writer();
  impl->registration.session_id = reply.registered().session_id();
  impl->registration.region_epoch = reply.registered().region_epoch();
  Impl* raw = impl.get();
  impl->reader = std::thread([raw] { raw->ReadLoop(); });
  return std::unique_ptr<WorkerClient>(new WorkerClient(std::move(impl)));
}

WorkerClient::WorkerClient(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

WorkerClient::~WorkerClient() {
  {
    absl::MutexLock lock(&impl_->write_mu);
    if (!impl_->stream_finished) {
      impl_->watchdog->Arm(absl::Now() + impl_->call_timeout);
      impl_->stream->WritesDone();
      impl_->watchdog->Disarm();
    }
  }
  impl_->context.TryCancel();
  impl_->reader.join();
}

const Registered& WorkerClient::registration() const { return impl_->registration; }

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
  s->set_region_epoch(job.region_epoch != 0 ? job.region_epoch
                                            : impl_->registration.region_epoch);
  bool written = false;
  {
    absl::MutexLock lock(&impl_->write_mu);
    if (impl_->stream_finished) {
      absl::MutexLock state(&impl_->mu);
      return impl_->session_status;
    }
    impl_->watchdog->Arm(absl::Now() + impl_->call_timeout);
    written = impl_->stream->Write(message);
    if (impl_->watchdog->Disarm()) {
      return absl::DeadlineExceededError(absl::StrCat(
          "job ", job.job_id, ": kvoffloadd at ", impl_->socket_path, " took no message for ",
          absl::FormatDuration(impl_->call_timeout),
          " (WorkerOptions.call_timeout); the session was ended"));
    }
  }
  if (written) return absl::OkStatus();
  // The stream broke: the reader is draining it and will have the daemon's reason (its
  // SessionClosed) in a moment; report that, not just that the session ended. The reader needs
  // write_mu to finish the stream, so it is not held here.
  absl::MutexLock state(&impl_->mu);
  impl_->mu.AwaitWithTimeout(absl::Condition(&impl_->ended), absl::Seconds(5));
  if (impl_->ended) return impl_->session_status;
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
    return impl_->ended || impl_->finished.count(job_id) > 0;
  };
  impl_->mu.AwaitWithTimeout(absl::Condition(&ready), timeout);
  auto it = impl_->finished.find(job_id);
  if (it != impl_->finished.end()) {
    FinishedJob job = std::move(it->second);
    impl_->finished.erase(it);
    return job;
  }
  if (impl_->ended) return impl_->session_status;
  return absl::DeadlineExceededError(
      absl::StrCat("job ", job_id, " not finished after ", absl::FormatDuration(timeout)));
}

absl::Status WorkerClient::session_status() const {
  absl::MutexLock lock(&impl_->mu);
  return impl_->ended ? impl_->session_status : absl::OkStatus();
}

// ---------------------------------------------------------------------------------------------
// SchedulerClient

struct SchedulerClient::Impl {
  std::unique_ptr<v1::Engine::Stub> stub;
  std::string socket_path;
  ClientOptions options;
  EngineSpec spec;
  RegionGeometry geometry;
  bool created = false;
  uint64_t region_epoch = 0;

  v1::KeysRequest KeysRequest(const std::vector<std::string>& keys) const {
    v1::KeysRequest request;
    request.set_engine_id(spec.engine_id);
    request.set_dp_rank(spec.dp_rank);
    for (const std::string& k : keys) request.add_keys(k);
    return request;
  }

  // A context bounded by call_timeout.
  std::unique_ptr<grpc::ClientContext> Context() const {
    auto context = std::make_unique<grpc::ClientContext>();
    context->set_deadline(After(options.call_timeout));
    return context;
  }

  absl::Status Status(const grpc::Status& status, absl::string_view call) const {
    return CallStatus(status, call, socket_path, options.call_timeout);
  }

  // One request each (at most max_keys_per_request keys).
  absl::StatusOr<std::vector<KeyState>> LookupOnce(const std::vector<std::string>& keys) const;
  absl::StatusOr<PreparedStore> PrepareStoreOnce(const std::vector<std::string>& keys) const;
  absl::Status CompleteStoreOnce(const std::vector<std::string>& keys, bool success) const;
  absl::StatusOr<std::vector<uint64_t>> PrepareLoadOnce(const std::vector<std::string>& keys) const;
  absl::Status CompleteLoadOnce(const std::vector<std::string>& keys) const;
  absl::Status TouchOnce(const std::vector<std::string>& keys) const;
};

absl::StatusOr<std::unique_ptr<SchedulerClient>> SchedulerClient::Open(
    const std::string& socket_path, const EngineSpec& spec, uint64_t region_epoch,
    const ClientOptions& options) {
  if (absl::Status s = CheckTimeout(options.open_timeout, "ClientOptions.open_timeout"); !s.ok()) {
    return s;
  }
  if (absl::Status s = CheckTimeout(options.call_timeout, "ClientOptions.call_timeout"); !s.ok()) {
    return s;
  }
  if (options.max_keys_per_request == 0 ||
      options.max_keys_per_request > common::kMaxKeysPerRequest) {
    return absl::InvalidArgumentError(absl::StrCat(
        "ClientOptions.max_keys_per_request is ", options.max_keys_per_request, ", want 1..",
        common::kMaxKeysPerRequest));
  }
  if (absl::Status s = CheckDaemonSocket(socket_path); !s.ok()) return s;
  auto impl = std::make_unique<Impl>();
  impl->stub = v1::Engine::NewStub(Dial(socket_path));
  impl->socket_path = socket_path;
  impl->options = options;
  impl->spec = spec;
  v1::OpenEngineRequest request;
  SpecToProto(spec, request.mutable_spec());
  request.set_region_epoch(region_epoch);
  v1::OpenEngineResponse response;
  grpc::ClientContext context;
  context.set_wait_for_ready(true);  // the socket exists: the daemon may still be starting
  context.set_deadline(After(options.open_timeout));
  grpc::Status status = impl->stub->OpenEngine(&context, request, &response);
  if (!status.ok()) {
    return CallStatus(status, "OpenEngine (ClientOptions.open_timeout)", socket_path,
                      options.open_timeout);
  }
  impl->geometry = FromProto(response.geometry());
  impl->created = response.created();
  impl->region_epoch = response.region_epoch();
  return std::unique_ptr<SchedulerClient>(new SchedulerClient(std::move(impl)));
}

SchedulerClient::SchedulerClient(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
SchedulerClient::~SchedulerClient() = default;

const RegionGeometry& SchedulerClient::geometry() const { return impl_->geometry; }
bool SchedulerClient::created() const { return impl_->created; }
uint64_t SchedulerClient::region_epoch() const { return impl_->region_epoch; }

// ---- One request each; the public calls split larger calls into these. -----------------------

namespace {

using Keys = std::vector<std::string>;

// [begin, end) of the keys, copied: protobuf wants its own strings anyway.
Keys Slice(const Keys& keys, size_t begin, size_t end) {
  return Keys(keys.begin() + begin, keys.begin() + end);
}

// INVALID_ARGUMENT naming the first key that appears twice (its position), else OK.
absl::Status CheckNoDuplicates(const Keys& keys, absl::string_view call) {
  absl::flat_hash_set<absl::string_view> seen;
  seen.reserve(keys.size());
  for (size_t i = 0; i < keys.size(); ++i) {
    if (!seen.insert(keys[i]).second) {
      return absl::InvalidArgumentError(
          absl::StrCat(call, ": key #", i, " appears more than once in the request"));
    }
  }
  return absl::OkStatus();
}

absl::Status Annotated(const absl::Status& status, absl::string_view call, size_t done,
                       size_t total) {
  if (status.ok() || done == 0) return status;
  return absl::Status(status.code(),
                      absl::StrCat(status.message(), " (", call, " of ", total, " keys sent in ",
                                   "parts: the first ", done, " keys were completed)"));
}

}  // namespace

absl::StatusOr<std::vector<KeyState>> SchedulerClient::Impl::LookupOnce(const Keys& keys) const {
  v1::LookupResponse response;
  grpc::Status status = stub->Lookup(Context().get(), KeysRequest(keys), &response);
  if (!status.ok()) return Status(status, "Lookup");
  std::vector<KeyState> out;
  for (int s : response.states()) {
    out.push_back(s == v1::KEY_STATE_HIT           ? KeyState::kHit
                  : s == v1::KEY_STATE_HIT_PENDING ? KeyState::kHitPending
                                                   : KeyState::kMiss);
  }
  return out;
}

absl::StatusOr<PreparedStore> SchedulerClient::Impl::PrepareStoreOnce(const Keys& keys) const {
  v1::PrepareStoreResponse response;
  grpc::Status status = stub->PrepareStore(Context().get(), KeysRequest(keys), &response);
  if (!status.ok()) return Status(status, "PrepareStore");
  PreparedStore out;
  out.keys.assign(response.keys().begin(), response.keys().end());
  out.rows.assign(response.rows().begin(), response.rows().end());
  out.evicted_keys.assign(response.evicted_keys().begin(), response.evicted_keys().end());
  return out;
}

absl::Status SchedulerClient::Impl::CompleteStoreOnce(const Keys& keys, bool success) const {
  v1::CompleteStoreRequest request;
  request.set_engine_id(spec.engine_id);
  request.set_dp_rank(spec.dp_rank);
  for (const std::string& k : keys) request.add_keys(k);
  request.set_success(success);
  v1::Empty response;
  return Status(stub->CompleteStore(Context().get(), request, &response), "CompleteStore");
}

absl::StatusOr<std::vector<uint64_t>> SchedulerClient::Impl::PrepareLoadOnce(
    const Keys& keys) const {
  v1::PrepareLoadResponse response;
  grpc::Status status = stub->PrepareLoad(Context().get(), KeysRequest(keys), &response);
  if (!status.ok()) return Status(status, "PrepareLoad");
  return std::vector<uint64_t>(response.rows().begin(), response.rows().end());
}

absl::Status SchedulerClient::Impl::CompleteLoadOnce(const Keys& keys) const {
  v1::Empty response;
  return Status(stub->CompleteLoad(Context().get(), KeysRequest(keys), &response),
                "CompleteLoad");
}

absl::Status SchedulerClient::Impl::TouchOnce(const Keys& keys) const {
  v1::Empty response;
  return Status(stub->Touch(Context().get(), KeysRequest(keys), &response), "Touch");
}

// ---- The public calls. -----------------------------------------------------------------------

absl::StatusOr<std::vector<KeyState>> SchedulerClient::Lookup(const Keys& keys) {
  const size_t chunk = impl_->options.max_keys_per_request;
  if (keys.size() <= chunk) return impl_->LookupOnce(keys);
  std::vector<KeyState> out;
  out.reserve(keys.size());
  for (size_t begin = 0; begin < keys.size(); begin += chunk) {
    ASSIGN_OR_RETURN(std::vector<KeyState> part,
                     impl_->LookupOnce(Slice(keys, begin, std::min(keys.size(), begin + chunk))));
    out.insert(out.end(), part.begin(), part.end());
  }
  return out;
}

absl::StatusOr<PreparedStore> SchedulerClient::PrepareStore(const Keys& keys) {
  const size_t chunk = impl_->options.max_keys_per_request;
  if (keys.size() <= chunk) return impl_->PrepareStoreOnce(keys);
  RETURN_IF_ERROR(CheckNoDuplicates(keys, "PrepareStore"));
  PreparedStore out;
  for (size_t begin = 0; begin < keys.size(); begin += chunk) {
    absl::StatusOr<PreparedStore> part =
        impl_->PrepareStoreOnce(Slice(keys, begin, std::min(keys.size(), begin + chunk)));
    if (!part.ok()) {
      // All or nothing: give back the rows the earlier requests took.
      for (size_t done = 0; done < out.keys.size(); done += chunk) {
        absl::Status undone = impl_->CompleteStoreOnce(
            Slice(out.keys, done, std::min(out.keys.size(), done + chunk)), false);
        if (!undone.ok()) {
          return absl::Status(part.status().code(),
                              absl::StrCat(part.status().message(), "; and undoing the ",
                                           out.keys.size(), " keys prepared before failed: ",
                                           undone.ToString()));
        }
      }
      return part.status();
    }
    std::move(part->keys.begin(), part->keys.end(), std::back_inserter(out.keys));
    out.rows.insert(out.rows.end(), part->rows.begin(), part->rows.end());
    std::move(part->evicted_keys.begin(), part->evicted_keys.end(),
              std::back_inserter(out.evicted_keys));
  }
  return out;
}

absl::Status SchedulerClient::CompleteStore(const Keys& keys, bool success) {
  const size_t chunk = impl_->options.max_keys_per_request;
  if (keys.size() <= chunk) return impl_->CompleteStoreOnce(keys, success);
  RETURN_IF_ERROR(CheckNoDuplicates(keys, "CompleteStore"));
  for (size_t begin = 0; begin < keys.size(); begin += chunk) {
    absl::Status s =
        impl_->CompleteStoreOnce(Slice(keys, begin, std::min(keys.size(), begin + chunk)), success);
    if (!s.ok()) return Annotated(s, "CompleteStore", begin, keys.size());
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<uint64_t>> SchedulerClient::PrepareLoad(const Keys& keys) {
  const size_t chunk = impl_->options.max_keys_per_request;
  if (keys.size() <= chunk) return impl_->PrepareLoadOnce(keys);
  RETURN_IF_ERROR(CheckNoDuplicates(keys, "PrepareLoad"));
  std::vector<uint64_t> rows;
  rows.reserve(keys.size());
  for (size_t begin = 0; begin < keys.size(); begin += chunk) {
    absl::StatusOr<std::vector<uint64_t>> part =
        impl_->PrepareLoadOnce(Slice(keys, begin, std::min(keys.size(), begin + chunk)));
    if (!part.ok()) {
      // All or nothing: unpin what the earlier requests pinned.
      for (size_t done = 0; done < begin; done += chunk) {
        absl::Status undone =
            impl_->CompleteLoadOnce(Slice(keys, done, std::min(begin, done + chunk)));
        if (!undone.ok()) {
          return absl::Status(part.status().code(),
                              absl::StrCat(part.status().message(), "; and unpinning the ", begin,
                                           " keys pinned before failed: ", undone.ToString()));
        }
      }
      return part.status();
    }
    rows.insert(rows.end(), part->begin(), part->end());
  }
  return rows;
}

absl::Status SchedulerClient::CompleteLoad(const Keys& keys) {
  const size_t chunk = impl_->options.max_keys_per_request;
  if (keys.size() <= chunk) return impl_->CompleteLoadOnce(keys);
  RETURN_IF_ERROR(CheckNoDuplicates(keys, "CompleteLoad"));
  for (size_t begin = 0; begin < keys.size(); begin += chunk) {
    absl::Status s =
        impl_->CompleteLoadOnce(Slice(keys, begin, std::min(keys.size(), begin + chunk)));
    if (!s.ok()) return Annotated(s, "CompleteLoad", begin, keys.size());
  }
  return absl::OkStatus();
}

absl::Status SchedulerClient::Touch(const Keys& keys) {
  const size_t chunk = impl_->options.max_keys_per_request;
  if (keys.size() <= chunk) return impl_->TouchOnce(keys);
  // Last keys first: each request makes its keys the most recent, so keys[0] ends up on top.
  const size_t parts = (keys.size() + chunk - 1) / chunk;
  for (size_t p = parts; p-- > 0;) {
    RETURN_IF_ERROR(
        impl_->TouchOnce(Slice(keys, p * chunk, std::min(keys.size(), (p + 1) * chunk))));
  }
  return absl::OkStatus();
}

}  // namespace kvoffload::client
