// SchedulerClient: the scheduler's index calls, and re-opening the engine after the daemon went
// away (ClientOptions::reopen). Every public call takes one connection (Conn) at its start and
// uses it for all its requests, so a call split into several requests never spans two regions.
#include <algorithm>
#include <iterator>
#include <memory>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "client/daemon_socket.h"
#include "client/internal/grpc_call.h"
#include "client/kvoffload_client.h"
#include "common/error_info.h"
#include "common/refusals.h"
#include "common/status_macros.h"
#include "grpcpp/grpcpp.h"
#include "kvoffload/v1/kvoffload.grpc.pb.h"
#include "proto/spec_convert.h"

namespace kvoffload::client {
namespace {

using internal::After;
using internal::CallStatus;

// A connection to the daemon: the channel (whose state tells whether it had to connect again)
// and its stub.
struct Conn {
  std::shared_ptr<grpc::Channel> channel;
  std::shared_ptr<v1::Engine::Stub> stub;
  uint64_t region_epoch = 0;  // sent with every index request (checked by the daemon)
};

Conn Connect(const std::string& socket_path) {
  Conn c;
  c.channel = internal::Dial(socket_path);
  c.stub = v1::Engine::NewStub(c.channel);
  return c;
}

// The daemon went away (UNAVAILABLE), answers without the engine (engine_not_found: a restarted
// daemon that did not keep it; an operator's drop), or has another region than the one the
// request named (region_epoch_mismatch): the engine must be opened again. NOT_FOUND for a key
// (key_not_in_index) is an answer about the key, not the engine. Decided on code and reason,
// never on the message (common/refusals.h).
bool EngineGone(const absl::Status& status) {
  if (status.code() == absl::StatusCode::kUnavailable) return true;
  const std::string reason = common::ErrorReason(status);
  return reason == common::reason::kEngineNotFound ||
         reason == common::reason::kRegionEpochMismatch;
}

}  // namespace

struct SchedulerClient::Impl {
  Impl(std::string socket, const ClientOptions& o, const EngineSpec& s)
      : socket_path(std::move(socket)), options(o), spec(s) {}

  const std::string socket_path;
  const ClientOptions options;
  const EngineSpec spec;
  RegionGeometry geometry;  // set by Open; a re-open must find the same layout

  absl::Mutex reopen_mu;  // one re-open at a time; taken before mu
  mutable absl::Mutex mu;
  Conn conn ABSL_GUARDED_BY(mu);
  bool created ABSL_GUARDED_BY(mu) = false;
  uint64_t region_epoch ABSL_GUARDED_BY(mu) = 0;
  uint64_t region_changes ABSL_GUARDED_BY(mu) = 0;
  uint64_t reopens ABSL_GUARDED_BY(mu) = 0;
  bool stale ABSL_GUARDED_BY(mu) = false;  // the engine must be opened again before a call
  absl::Status stale_why ABSL_GUARDED_BY(mu);

  // OpenEngine on `c` (no retry, no wait for a daemon that is not there).
  grpc::Status OpenEngine(const Conn& c, uint64_t epoch, bool wait_for_ready,
                          absl::Duration timeout, v1::OpenEngineResponse* response) const {
    v1::OpenEngineRequest request;
    SpecToProto(spec, request.mutable_spec());
    request.set_region_epoch(epoch);
    grpc::ClientContext context;
    context.set_wait_for_ready(wait_for_ready);
    context.set_deadline(After(timeout));
    return c.stub->OpenEngine(&context, request, response);
  }

  // The connection for the next call, re-opening the engine first when needed.
  absl::StatusOr<Conn> Current() {
    {
      absl::MutexLock lock(&mu);
      CheckConnection();
      if (!stale) return conn;
    }
    absl::MutexLock reopening(&reopen_mu);
    absl::Status why;
    {
      absl::MutexLock lock(&mu);
      if (!stale) return conn;
      why = stale_why;
    }
    auto failed = [&](const absl::Status& s) {
      return common::Annotated(s, absl::StrCat("kvoffloadd at ", socket_path, " went away (",
                                               why.message(), "); re-opening the engine: ",
                                               s.message()));
    };
    if (absl::Status s = CheckDaemonSocket(socket_path); !s.ok()) return failed(s);
    Conn fresh = Connect(socket_path);
    v1::OpenEngineResponse response;
    // Epoch 0: the engine is joined whatever region it has now; comparing the epoch says
    // whether it is the one this client knew (one request, and the same answer as sending the
    // old epoch and then 0 after its FAILED_PRECONDITION).
    // Bounded by call_timeout, not open_timeout: it runs inside an index call, which must not
    // hang the caller for longer (a region still being pinned is joined by a later call).
    grpc::Status status = OpenEngine(fresh, /*epoch=*/0, /*wait_for_ready=*/false,
                                     options.call_timeout, &response);
    if (!status.ok()) {
      return failed(CallStatus(status, "OpenEngine (ClientOptions.call_timeout)", socket_path,
                               options.call_timeout));
    }
    if (response.geometry().fingerprint() != geometry.fingerprint) {
      return failed(absl::FailedPreconditionError(absl::StrCat(
          "the engine has another layout now (fingerprint ", response.geometry().fingerprint(),
          ", this client's ", geometry.fingerprint, ")")));
    }
    absl::MutexLock lock(&mu);
    conn = fresh;
    created = response.created();
    if (response.region_epoch() != region_epoch) ++region_changes;
    region_epoch = response.region_epoch();
    ++reopens;
    stale = false;
    conn.region_epoch = region_epoch;
    return conn;
  }

  // A channel that is no longer READY lost its connection since the last call: the daemon may
  // have restarted in between, and a new connection would reach it without any call failing.
  void CheckConnection() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    if (stale || !options.reopen) return;
    if (conn.channel->GetState(/*try_to_connect=*/false) != GRPC_CHANNEL_READY) {
      stale = true;
      stale_why = absl::UnavailableError("the connection to kvoffloadd was lost");
    }
  }

  // Marks the engine for re-opening when `status` says it is gone (from a call on `used`).
  void Saw(const Conn& used, const grpc::Status& status) {
    const absl::Status why = internal::FromGrpcStatus(status);
    if (!options.reopen || !EngineGone(why)) return;
    absl::MutexLock lock(&mu);
    if (used.stub != conn.stub || stale) return;  // already re-opened, or marked
    stale = true;
    stale_why = why;
  }

  v1::KeysRequest KeysRequest(const Conn& c, const std::vector<std::string>& keys) const {
    v1::KeysRequest request;
    request.set_engine_id(spec.engine_id);
    request.set_dp_rank(spec.dp_rank);
    request.set_region_epoch(c.region_epoch);
    for (const std::string& k : keys) request.add_keys(k);
    return request;
  }

  // A context bounded by call_timeout.
  std::unique_ptr<grpc::ClientContext> Context() const {
    auto context = std::make_unique<grpc::ClientContext>();
    context->set_deadline(After(options.call_timeout));
    return context;
  }

  absl::Status Status(const Conn& c, const grpc::Status& status, absl::string_view call) {
    Saw(c, status);
    return CallStatus(status, call, socket_path, options.call_timeout);
  }

  // One request each (at most max_keys_per_request keys).
  absl::StatusOr<std::vector<KeyState>> LookupOnce(const Conn& c,
                                                   const std::vector<std::string>& keys);
  absl::StatusOr<PreparedStore> PrepareStoreOnce(const Conn& c,
                                                 const std::vector<std::string>& keys);
  absl::Status CompleteStoreOnce(const Conn& c, const std::vector<std::string>& keys,
                                 bool success);
  absl::StatusOr<std::vector<uint64_t>> PrepareLoadOnce(const Conn& c,
                                                        const std::vector<std::string>& keys);
  absl::Status CompleteLoadOnce(const Conn& c, const std::vector<std::string>& keys);
  absl::Status TouchOnce(const Conn& c, const std::vector<std::string>& keys);
};

absl::StatusOr<std::unique_ptr<SchedulerClient>> SchedulerClient::Open(
    const std::string& socket_path, const EngineSpec& spec, uint64_t region_epoch,
    const ClientOptions& options) {
  if (absl::Status s = internal::CheckTimeout(options.open_timeout, "ClientOptions.open_timeout");
      !s.ok()) {
    return s;
  }
  if (absl::Status s = internal::CheckTimeout(options.call_timeout, "ClientOptions.call_timeout");
      !s.ok()) {
    return s;
  }
  if (options.max_keys_per_request == 0 ||
      options.max_keys_per_request > common::kMaxKeysPerRequest) {
    return absl::InvalidArgumentError(absl::StrCat(
        "ClientOptions.max_keys_per_request is ", options.max_keys_per_request, ", want 1..",
        common::kMaxKeysPerRequest));
  }
  if (absl::Status s = CheckDaemonSocket(socket_path); !s.ok()) return s;
  auto impl = std::make_unique<Impl>(socket_path, options, spec);
  Conn c = Connect(socket_path);
  v1::OpenEngineResponse response;
  // wait_for_ready: the socket exists, the daemon may still be starting.
  grpc::Status status = impl->OpenEngine(c, region_epoch, /*wait_for_ready=*/true,
                                         options.open_timeout, &response);
  if (!status.ok()) {
    return CallStatus(status, "OpenEngine (ClientOptions.open_timeout)", socket_path,
                      options.open_timeout);
  }
  impl->geometry = internal::FromProto(response.geometry());
  {
    absl::MutexLock lock(&impl->mu);
    impl->conn = std::move(c);
    impl->created = response.created();
    impl->region_epoch = response.region_epoch();
    impl->conn.region_epoch = response.region_epoch();
  }
  return std::unique_ptr<SchedulerClient>(new SchedulerClient(std::move(impl)));
}

SchedulerClient::SchedulerClient(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
SchedulerClient::~SchedulerClient() = default;

const RegionGeometry& SchedulerClient::geometry() const { return impl_->geometry; }
bool SchedulerClient::created() const {
  absl::MutexLock lock(&impl_->mu);
  return impl_->created;
}
uint64_t SchedulerClient::region_epoch() const {
  absl::MutexLock lock(&impl_->mu);
  return impl_->region_epoch;
}
uint64_t SchedulerClient::region_changes() const {
  absl::MutexLock lock(&impl_->mu);
  return impl_->region_changes;
}
uint64_t SchedulerClient::reopens() const {
  absl::MutexLock lock(&impl_->mu);
  return impl_->reopens;
}

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

// A refusal that names a key by its position (key_not_in_index's key_index) names it in the
// whole call, not in the request of consecutive keys from `begin` that the daemon answered.
absl::Status KeyIndexInCall(absl::Status status, size_t begin) {
  common::ErrorInfo info = common::ErrorInfoOf(status);
  auto it = info.metadata.find("key_index");
  uint64_t index = 0;
  if (begin == 0 || it == info.metadata.end() || !absl::SimpleAtoi(it->second, &index)) {
    return status;
  }
  it->second = absl::StrCat(index + begin);
  return common::WithErrorInfo(std::move(status), info);
}

absl::Status Annotated(const absl::Status& status, absl::string_view call, size_t done,
                       size_t total) {
  if (status.ok() || done == 0) return status;
  return common::Annotated(KeyIndexInCall(status, done),
                           absl::StrCat(status.message(), " (", call, " of ", total,
                                        " keys sent in parts: the first ", done,
                                        " keys were completed)"));
}

}  // namespace

absl::StatusOr<std::vector<KeyState>> SchedulerClient::Impl::LookupOnce(const Conn& c, const Keys& keys) {
  v1::LookupResponse response;
  grpc::Status status = c.stub->Lookup(Context().get(), KeysRequest(c, keys), &response);
  if (!status.ok()) return Status(c, status, "Lookup");
  std::vector<KeyState> out;
  for (int s : response.states()) {
    out.push_back(s == v1::KEY_STATE_HIT           ? KeyState::kHit
                  : s == v1::KEY_STATE_HIT_PENDING ? KeyState::kHitPending
                                                   : KeyState::kMiss);
  }
  return out;
}

absl::StatusOr<PreparedStore> SchedulerClient::Impl::PrepareStoreOnce(const Conn& c, const Keys& keys) {
  v1::PrepareStoreResponse response;
  grpc::Status status = c.stub->PrepareStore(Context().get(), KeysRequest(c, keys), &response);
  if (!status.ok()) return Status(c, status, "PrepareStore");
  PreparedStore out;
  out.region_epoch = c.region_epoch;
  out.keys.assign(response.keys().begin(), response.keys().end());
  out.rows.assign(response.rows().begin(), response.rows().end());
  out.evicted_keys.assign(response.evicted_keys().begin(), response.evicted_keys().end());
  return out;
}

absl::Status SchedulerClient::Impl::CompleteStoreOnce(const Conn& c, const Keys& keys, bool success) {
  v1::CompleteStoreRequest request;
  request.set_engine_id(spec.engine_id);
  request.set_dp_rank(spec.dp_rank);
  request.set_region_epoch(c.region_epoch);
  for (const std::string& k : keys) request.add_keys(k);
  request.set_success(success);
  v1::Empty response;
  return Status(c, c.stub->CompleteStore(Context().get(), request, &response), "CompleteStore");
}

absl::StatusOr<std::vector<uint64_t>> SchedulerClient::Impl::PrepareLoadOnce(
    const Conn& c, const Keys& keys) {
  v1::PrepareLoadResponse response;
  grpc::Status status = c.stub->PrepareLoad(Context().get(), KeysRequest(c, keys), &response);
  if (!status.ok()) return Status(c, status, "PrepareLoad");
  return std::vector<uint64_t>(response.rows().begin(), response.rows().end());
}

absl::Status SchedulerClient::Impl::CompleteLoadOnce(const Conn& c, const Keys& keys) {
  v1::Empty response;
  return Status(c, c.stub->CompleteLoad(Context().get(), KeysRequest(c, keys), &response),
                "CompleteLoad");
}

absl::Status SchedulerClient::Impl::TouchOnce(const Conn& c, const Keys& keys) {
  v1::Empty response;
  return Status(c, c.stub->Touch(Context().get(), KeysRequest(c, keys), &response), "Touch");
}

// ---- The public calls. -----------------------------------------------------------------------

absl::StatusOr<std::vector<KeyState>> SchedulerClient::Lookup(const Keys& keys) {
  ASSIGN_OR_RETURN(const Conn c, impl_->Current());
  const size_t chunk = impl_->options.max_keys_per_request;
  if (keys.size() <= chunk) return impl_->LookupOnce(c, keys);
  std::vector<KeyState> out;
  out.reserve(keys.size());
  for (size_t begin = 0; begin < keys.size(); begin += chunk) {
    ASSIGN_OR_RETURN(std::vector<KeyState> part,
                     impl_->LookupOnce(c, Slice(keys, begin, std::min(keys.size(), begin + chunk))));
    out.insert(out.end(), part.begin(), part.end());
  }
  return out;
}

absl::StatusOr<PreparedStore> SchedulerClient::PrepareStore(const Keys& keys) {
  ASSIGN_OR_RETURN(const Conn c, impl_->Current());
  const size_t chunk = impl_->options.max_keys_per_request;
  if (keys.size() <= chunk) return impl_->PrepareStoreOnce(c, keys);
  RETURN_IF_ERROR(CheckNoDuplicates(keys, "PrepareStore"));
  PreparedStore out;
  out.region_epoch = c.region_epoch;
  for (size_t begin = 0; begin < keys.size(); begin += chunk) {
    absl::StatusOr<PreparedStore> part =
        impl_->PrepareStoreOnce(c, Slice(keys, begin, std::min(keys.size(), begin + chunk)));
    if (!part.ok()) {
      // All or nothing: give back the rows the earlier requests took.
      for (size_t done = 0; done < out.keys.size(); done += chunk) {
        absl::Status undone = impl_->CompleteStoreOnce(c, 
            Slice(out.keys, done, std::min(out.keys.size(), done + chunk)), false);
        if (!undone.ok()) {
          return common::Annotated(part.status(),
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
  ASSIGN_OR_RETURN(const Conn c, impl_->Current());
  const size_t chunk = impl_->options.max_keys_per_request;
  if (keys.size() <= chunk) return impl_->CompleteStoreOnce(c, keys, success);
  RETURN_IF_ERROR(CheckNoDuplicates(keys, "CompleteStore"));
  for (size_t begin = 0; begin < keys.size(); begin += chunk) {
    absl::Status s =
        impl_->CompleteStoreOnce(c, Slice(keys, begin, std::min(keys.size(), begin + chunk)), success);
    if (!s.ok()) return Annotated(s, "CompleteStore", begin, keys.size());
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<uint64_t>> SchedulerClient::PrepareLoad(const Keys& keys,
                                                                   uint64_t* region_epoch) {
  ASSIGN_OR_RETURN(const Conn c, impl_->Current());
  if (region_epoch != nullptr) *region_epoch = c.region_epoch;
  const size_t chunk = impl_->options.max_keys_per_request;
  if (keys.size() <= chunk) return impl_->PrepareLoadOnce(c, keys);
  RETURN_IF_ERROR(CheckNoDuplicates(keys, "PrepareLoad"));
  std::vector<uint64_t> rows;
  rows.reserve(keys.size());
  for (size_t begin = 0; begin < keys.size(); begin += chunk) {
    absl::StatusOr<std::vector<uint64_t>> part =
        impl_->PrepareLoadOnce(c, Slice(keys, begin, std::min(keys.size(), begin + chunk)));
    if (!part.ok()) {
      // All or nothing: unpin what the earlier requests pinned.
      for (size_t done = 0; done < begin; done += chunk) {
        absl::Status undone =
            impl_->CompleteLoadOnce(c, Slice(keys, done, std::min(begin, done + chunk)));
        if (!undone.ok()) {
          return common::Annotated(KeyIndexInCall(part.status(), begin),
                                   absl::StrCat(part.status().message(), "; and unpinning the ",
                                                begin, " keys pinned before failed: ",
                                                undone.ToString()));
        }
      }
      return KeyIndexInCall(part.status(), begin);
    }
    rows.insert(rows.end(), part->begin(), part->end());
  }
  return rows;
}

absl::Status SchedulerClient::CompleteLoad(const Keys& keys) {
  ASSIGN_OR_RETURN(const Conn c, impl_->Current());
  const size_t chunk = impl_->options.max_keys_per_request;
  if (keys.size() <= chunk) return impl_->CompleteLoadOnce(c, keys);
  RETURN_IF_ERROR(CheckNoDuplicates(keys, "CompleteLoad"));
  for (size_t begin = 0; begin < keys.size(); begin += chunk) {
    absl::Status s =
        impl_->CompleteLoadOnce(c, Slice(keys, begin, std::min(keys.size(), begin + chunk)));
    if (!s.ok()) return Annotated(s, "CompleteLoad", begin, keys.size());
  }
  return absl::OkStatus();
}

absl::Status SchedulerClient::Touch(const Keys& keys) {
  ASSIGN_OR_RETURN(const Conn c, impl_->Current());
  const size_t chunk = impl_->options.max_keys_per_request;
  if (keys.size() <= chunk) return impl_->TouchOnce(c, keys);
  // Last keys first: each request makes its keys the most recent, so keys[0] ends up on top.
  const size_t parts = (keys.size() + chunk - 1) / chunk;
  for (size_t p = parts; p-- > 0;) {
    RETURN_IF_ERROR(
        impl_->TouchOnce(c, Slice(keys, p * chunk, std::min(keys.size(), (p + 1) * chunk))));
  }
  return absl::OkStatus();
}

// ---- Readiness (Admin.Stats on the admin socket). --------------------------------------------

namespace {

// As daemon/daemon.h kAdminSocketName: the daemon puts both sockets in its runtime directory.
constexpr char kAdminSocketName[] = "admin.sock";

std::string AdminSocketBeside(const std::string& data_socket) {
  const size_t slash = data_socket.rfind('/');
  return slash == std::string::npos ? kAdminSocketName
                                    : data_socket.substr(0, slash + 1) + kAdminSocketName;
}

}  // namespace

absl::StatusOr<EngineReadiness> SchedulerClient::Readiness() {
  const std::string admin_socket = AdminSocketBeside(impl_->socket_path);
  RETURN_IF_ERROR(CheckDaemonSocket(admin_socket));
  v1::StatsResponse response;
  grpc::Status status = v1::Admin::NewStub(internal::Dial(admin_socket))
                            ->Stats(impl_->Context().get(), v1::StatsRequest(), &response);
  if (!status.ok()) {
    return CallStatus(status, "Stats (readiness)", admin_socket, impl_->options.call_timeout);
  }
  const EngineSpec& spec = impl_->spec;
  for (const v1::EngineStats& e : response.engines()) {
    if (e.engine_id() != spec.engine_id || e.dp_rank() != spec.dp_rank) continue;
    return EngineReadiness{e.region_epoch(),       e.num_rows(),
                           e.rows_not_ready(),     e.region_bytes(),
                           e.region_ready_bytes(), e.region_first_ready_seconds(),
                           e.region_fully_ready_seconds()};
  }
  return absl::NotFoundError(absl::StrCat(
      "engine ", spec.engine_id, "/", spec.dp_rank, " is not in the Stats of kvoffloadd at ",
      admin_socket, ": it is gone (dropped, idle TTL, a restart that did not keep it), or this "
      "uid may not administer it (only its owner, root and the daemon's --admin_group see it)"));
}

absl::Status SchedulerClient::WaitUntilReady(absl::Duration timeout, absl::Duration poll) {
  const absl::Time deadline = absl::Now() + timeout;
  for (;;) {
    ASSIGN_OR_RETURN(const EngineReadiness r, Readiness());
    if (r.ready()) return absl::OkStatus();
    const absl::Time now = absl::Now();
    if (now >= deadline) {
      const EngineSpec& spec = impl_->spec;
      return absl::DeadlineExceededError(absl::StrCat(
          "engine ", spec.engine_id, "/", spec.dp_rank, " not ready after ",
          absl::FormatDuration(timeout), ": ", r.rows_not_ready, " of ", r.num_rows,
          " rows not ready yet, ", r.region_ready_bytes, " of ", r.region_bytes,
          " region bytes registered"));
    }
    absl::SleepFor(std::max(absl::ZeroDuration(), std::min(poll, deadline - now)));
  }
}

}  // namespace kvoffload::client
