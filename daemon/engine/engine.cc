#include "daemon/engine/engine.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "common/check.h"
#include "common/logging.h"
#include "common/refusals.h"
#include "common/status_macros.h"
#include "daemon/engine/engine_copy.h"
#include "daemon/engine/engine_tier.h"
#include "daemon/engine/job_rows.h"

namespace kvoffload::daemon {
namespace {

spdlog::logger* Log() {
  static spdlog::logger* log = common::Logger("engine");
  return log;
}

}  // namespace

absl::StatusOr<std::shared_ptr<Engine>> Engine::Create(const common::EngineSpec& spec,
                                                       const EngineDeps& deps,
                                                       uint64_t region_epoch) {
  ASSIGN_OR_RETURN(common::Geometry geometry, common::ComputeGeometry(spec));
  ASSIGN_OR_RETURN(
      EngineResources resources,
      AcquireEngineResources(spec, geometry, deps.budget, deps.backend, deps.region_options));
  Log()->info(
      "engine {} ready: {} rows of {} bytes ({} copies, replicated={}), index {} bytes, region "
      "epoch {:x}, populated in {:.2f}s",
      spec.Key(), geometry.num_rows, geometry.row_bytes, geometry.num_copies, geometry.replicated,
      SlotIndex::MetadataBytesFor(geometry.num_rows), region_epoch,
      resources.region->populate_seconds());
  return FromResources(spec, geometry, deps, region_epoch, std::move(resources));
}

std::shared_ptr<Engine> Engine::FromResources(const common::EngineSpec& spec,
                                              const common::Geometry& geometry,
                                              const EngineDeps& deps, uint64_t region_epoch,
                                              EngineResources resources) {
  KVO_CHECK(resources.region != nullptr && resources.index != nullptr &&
                resources.region->size() == geometry.capacity_bytes,
            "engine ", spec.Key(), ": resources do not match geometry ", geometry.DebugString());
  return std::shared_ptr<Engine>(
      new Engine(spec, geometry, deps, region_epoch, std::move(resources)));
}

Engine::Engine(const common::EngineSpec& spec, const common::Geometry& geometry,
               const EngineDeps& deps, uint64_t region_epoch, EngineResources resources)
    : spec_(spec),
      geometry_(geometry),
      deps_(deps),
      region_epoch_(region_epoch),
      own_(std::move(resources)),
      active_index_(own_.index.get()),
      part_geometry_(geometry),
      sessions_(geometry, spec.Key(), std::move(own_.layout)),
      jobs_(VoteRule::For(geometry, spec), deps.jobs, spec.Key()) {}

Engine::~Engine() {
  // Every copy holds a reference to the engine, so none is in flight here; no chunk is being
  // pinned once the preparer has stopped.
  own_.preparer.reset();
  deps_.backend->UnregisterRegion(own_.region->data());
  Log()->info("engine {} released its region of {} bytes", spec_.Key(), own_.region->size());
}

absl::Status Engine::WaitFirstRowsUsable(absl::Duration timeout) {
  return WaitFirstChunkUsable(own_.preparer.get(), timeout, [this] {
    absl::MutexLock lock(&mu_);
    return closed_ || draining_;
  });
}

void Engine::set_pool(std::shared_ptr<Pool> pool, uint32_t member) {
  KVO_CHECK(pool_ == nullptr && pool != nullptr, "engine ", key(), " joins a second pool");
  pool_ = std::move(pool);
  member_ = member;
  active_index_ = &pool_->index();
  part_geometry_.num_rows = active_index_->num_rows();
}

void Engine::LinkTier() {
  tier_link_ = MakeEngineTierLink(deps_.tiers, pool_, spec_, geometry_, owner_uid_,
                                  own_.index.get(), own_.region->data(), weak_from_this());
}

void Engine::LeavePool() {
  if (pool_ != nullptr) pool_->Leave(member_);
}

absl::Status Engine::CheckSameSpec(const common::EngineSpec& spec) const {
  if (spec == spec_) return absl::OkStatus();
  auto other = common::ComputeGeometry(spec);
  return common::SpecMismatch(
      spec_.Key(),
      absl::StrCat("existing {", spec_.DebugString(), "} geometry {", geometry_.DebugString(),
                   "}; requested {", spec.DebugString(), "} geometry {",
                   other.ok() ? other->DebugString() : std::string(other.status().message()), "}"));
}

absl::Status Engine::CheckAttach(uint32_t mp_rank, const WorkerRegistration& registration) const {
  ASSIGN_OR_RETURN(uint32_t slot, common::SlotOf(spec_, geometry_, mp_rank));
  absl::MutexLock lock(&mu_);
  if (closed_) return closed_why_;
  return sessions_.CheckAttach(mp_rank, slot, PagesOf(registration));
}

bool Engine::AwaitPreviousSession(uint32_t mp_rank, absl::Time deadline) const {
  for (;;) {
    {
      absl::MutexLock lock(&mu_);
      if (!sessions_.PreviousSessionCopying(mp_rank)) return true;
    }
    // The memory goes on the deferred-release thread once the last copy ends: no event to wait on.
    if (absl::Now() >= deadline) return false;
    absl::SleepFor(absl::Milliseconds(2));
  }
}

absl::StatusOr<WorkerInfo> Engine::Attach(uint32_t mp_rank, const WorkerRegistration& registration,
                                          std::unique_ptr<WorkerMemory> opened,
                                          JobListener* listener) {
  // The mapping is closed off this thread whatever happens (it may be an IPC mapping).
  std::shared_ptr<WorkerMemory> memory(std::move(opened));
  auto refuse = [&](absl::Status status) {
    deps_.release->Defer(std::move(memory));
    return status;
  };
  absl::Status valid = CheckWorkerRegistration(spec_, geometry_, mp_rank, registration);
  if (!valid.ok()) return refuse(valid);
  absl::StatusOr<uint32_t> slot = common::SlotOf(spec_, geometry_, mp_rank);
  if (!slot.ok()) return refuse(slot.status());
  const std::vector<uint64_t> pages = PagesOf(registration);
  absl::MutexLock lock(&mu_);
  if (closed_) return refuse(closed_why_);
  absl::Status free = sessions_.CheckAttach(mp_rank, *slot, pages);
  if (!free.ok()) return refuse(free);
  if (pool_ != nullptr) {
    // Every member's workers split a row's bytes the same way, or a shared row reads wrong.
    absl::Status same = pool_->CheckLayout(pages);
    if (!same.ok()) return refuse(same);
  }
  const bool writer = common::IsStoreWriter(geometry_, mp_rank);
  bool fixed_layout = false;
  WorkerSession& session =
      sessions_.Add(mp_rank, *slot, writer, pages, std::move(memory), listener, &fixed_layout);
  // Before any row can become READY (a store needs an attached worker): a restored engine then
  // refuses a worker whose tensors split the same bytes differently.
  if (fixed_layout && own_.record_layout) own_.record_layout(pages);
  Log()->info("engine {}: mp_rank {} attached in slot {} (writer={})", key(), mp_rank, *slot,
              writer);
  return WorkerInfo{session.id, *slot, writer, region_epoch_};
}

void Engine::Detach(uint64_t session_id) {
  absl::MutexLock delivery(&delivery_mu_);
  Verdicts verdicts;
  std::shared_ptr<WorkerMemory> memory;
  {
    absl::MutexLock lock(&mu_);
    uint32_t mp_rank = 0;
    memory = sessions_.Remove(session_id, &mp_rank);
    if (memory == nullptr) return;
    const absl::Status why = absl::UnavailableError(
        absl::StrCat("worker mp_rank ", mp_rank, " of engine ", key(), " disconnected"));
    const std::vector<uint64_t> ids = jobs_.AwaitingVoteOf(mp_rank);
    for (uint64_t id : ids) FailAndSettle(id, why, &verdicts);
    Log()->info("engine {}: mp_rank {} detached, {} open jobs failed", key(), mp_rank, ids.size());
  }
  // In-flight copies hold their own references; the mapping closes after the last one.
  deps_.release->Defer(std::move(memory));
  if (Deliver(verdicts)) AnnounceCloseLocked();
}

absl::StatusOr<Job*> Engine::OpenOrJoin(const WorkerSession& session, const ValidPart& part) {
  Job* job = jobs_.Find(part.job_id);
  if (job == nullptr) {
    RETURN_IF_ERROR(jobs_.CheckNew(part, session.mp_rank));
    RETURN_IF_ERROR(BeginJobRows(spec_, *active_index_, part));  // quarantined until retired
    job = &jobs_.Open(part, absl::Now());
  } else {
    RETURN_IF_ERROR(jobs_.CheckJoin(*job, part, session.mp_rank));
  }
  job->submitted.insert(session.mp_rank);
  job->sessions.insert(session.id);
  return job;
}

absl::Status Engine::Submit(uint64_t session_id, const JobPart& part) {
  CopyJob copy;
  std::shared_ptr<WorkerMemory> memory;
  uint32_t mp_rank = 0;
  bool close_due = false;
  {
    absl::ReaderMutexLock delivery(&delivery_mu_);
    Verdicts verdicts;
    {
      absl::MutexLock lock(&mu_);
      if (closed_) return closed_why_;
      if (draining_) return drain_why_;
      WorkerSession* session = sessions_.Find(session_id);
      if (session == nullptr) {
        return absl::FailedPreconditionError(
            absl::StrCat("session ", session_id, " is not a registered worker of ", key()));
      }
      mp_rank = session->mp_rank;
      // Rows come back as the index handed them out, with their tickets (row handles): the
      // validator splits them, so that a part planned against a row since handed to another
      // key is refused by the index's copy guard rather than copied into or out of that key's row.
      ASSIGN_OR_RETURN(
          ValidPart valid,
          ValidatePart(part, part_geometry_,
                       PartBounds{region_epoch_, session->memory->num_blocks(),
                                  session->memory->num_events(), deps_.jobs.max_blocks_per_job,
                                  /*row_handles=*/!spec_.rows_assigned_by_engine},
                       absl::StrCat("job ", part.job_id, " of mp_rank ", mp_rank)));
      RETURN_IF_ERROR(sessions_.CheckMaySubmit(*session, part.job_id, part.direction,
                                               jobs_.rule().stores_by_writer_only,
                                               deps_.jobs.max_jobs_per_session));
      ASSIGN_OR_RETURN(Job * job, OpenOrJoin(*session, valid));
      ++session->jobs_in_flight;
      if (part.direction == CopyDirection::kStore && !session->writer) {
        // Replicated non-writer: acknowledges without copying. The writer's vote is still needed.
        jobs_.Vote(*job, mp_rank, session->slot, absl::OkStatus());
        SettleIfDue(*job, &verdicts);
      } else {
        ++job->copies_in_flight;
        memory = session->memory;
        copy = MakeWorkerCopy(*session, std::move(valid), geometry_, own_.region->data(),
                              deps_.jobs.job_timeout);
      }
    }
    close_due = Deliver(verdicts);
  }
  if (close_due) AnnounceClose();
  if (memory == nullptr) return absl::OkStatus();
  // The callbacks keep the engine (region) alive, so `done` may borrow it.
  const uint32_t slot = copy.slot;
  StartWorkerCopy(
      CopyRoute{deps_.backend, deps_.release, deps_.callbacks_running, pool_.get(), &spec_},
      part.job_id, std::move(copy), std::move(memory), shared_from_this(),
      [this, job_id = part.job_id, mp_rank, slot](absl::Status status, uint64_t bytes) {
        OnCopyDone(job_id, mp_rank, slot, std::move(status), bytes);
      });
  return absl::OkStatus();
}

void Engine::OnCopyDone(uint64_t job_id, uint32_t mp_rank, uint32_t slot, absl::Status status,
                        uint64_t bytes) {
  bool close_due = false;
  {
    absl::ReaderMutexLock delivery(&delivery_mu_);
    Verdicts verdicts;
    {
      absl::MutexLock lock(&mu_);
      Job& job = jobs_.CopyEnded(job_id, mp_rank, slot, std::move(status), bytes);
      SettleIfDue(job, &verdicts);
    }
    close_due = Deliver(verdicts);
  }
  if (close_due) AnnounceClose();
}

bool Engine::SettleIfDue(Job& job, Verdicts* verdicts) {
  if (!jobs_.Due(job)) return false;
  latency_.Record(absl::Now() - job.started);
  sessions_.Tell(jobs_.Report(job), job.sessions, &verdicts->finished);
  // Retire: rows may be reused only now that no copy can touch them.
  EndJobRows(spec_, *active_index_, job);
  jobs_.Retire(job);  // `job` is dangling from here on
  MaybeAnnounceClosed(verdicts);
  return true;
}

void Engine::FailAndSettle(uint64_t job_id, const absl::Status& why, Verdicts* verdicts) {
  Job* job = jobs_.Find(job_id);
  if (job == nullptr) return;
  jobs_.Fail(*job, why);
  SettleIfDue(*job, verdicts);
}

void Engine::MaybeAnnounceClosed(Verdicts* verdicts) {
  if (!closed_ || closed_announced_ || !jobs_.empty()) return;
  closed_announced_ = true;
  verdicts->announces_close = true;
}

bool Engine::Deliver(const Verdicts& verdicts) {
  verdicts.DeliverTo();
  return verdicts.announces_close;
}

void Engine::AnnounceClose() {
  absl::MutexLock delivery(&delivery_mu_);
  AnnounceCloseLocked();
}

void Engine::AnnounceCloseLocked() {
  // Exclusive: every verdict another thread collected is delivered by now. The listeners are
  // read now, not when the close was decided: a session that left since must not be called.
  Verdicts close;
  {
    absl::MutexLock lock(&mu_);
    close.closed = sessions_.Listeners();
    close.closed_why = closed_why_;
  }
  close.DeliverTo();
  absl::MutexLock lock(&mu_);
  close_delivered_ = true;
}

void Engine::ExpireJobs(absl::Time now) {
  DropStaleCommits(spec_, *active_index_, now, deps_.jobs.job_timeout);
  bool close_due = false;
  {
    absl::ReaderMutexLock delivery(&delivery_mu_);
    Verdicts verdicts;
    {
      absl::MutexLock lock(&mu_);
      for (const auto& [id, why] : jobs_.Expired(now, spec_.world_size)) {
        FailAndSettle(id, why, &verdicts);
      }
    }
    close_due = Deliver(verdicts);
  }
  if (close_due) AnnounceClose();
}

void Engine::Drain(const absl::Status& why) {
  absl::ReaderMutexLock delivery(&delivery_mu_);
  Verdicts verdicts;
  {
    absl::MutexLock lock(&mu_);
    if (closed_ || draining_) return;
    draining_ = true;
    drain_why_ = why;
    jobs_.StartDraining(why);
    for (uint64_t id : jobs_.WaitingForParts()) FailAndSettle(id, why, &verdicts);
  }
  Deliver(verdicts);  // never the close: the engine is not closed yet
}

void Engine::Close(const absl::Status& why) {
  // Exclusive, as every close notice is delivered (AnnounceCloseLocked): a verdict settled by
  // another thread just before (a copy that ended: its job is no longer in jobs_) is still on its
  // way until that thread's Deliver returns; the daemon's shutdown closes engines as soon as no
  // job is in flight, and a notice ahead of that verdict lost it.
  absl::MutexLock delivery(&delivery_mu_);
  Verdicts verdicts;
  {
    absl::MutexLock lock(&mu_);
    if (closed_) return;
    closed_ = true;
    closed_why_ = why;
    for (uint64_t id : jobs_.Ids()) FailAndSettle(id, why, &verdicts);
    // Jobs whose copies still run are reported when those end; the sessions hear the close after
    // them (SettleIfDue), or now when nothing is running.
    MaybeAnnounceClosed(&verdicts);
    if (!closed_announced_) {
      Log()->info("engine {} closed; waiting for {} jobs' copies before ending its sessions", key(),
                  jobs_.size());
    }
  }
  if (Deliver(verdicts)) AnnounceCloseLocked();
}

bool Engine::WaitClosed(absl::Time deadline) const {
  absl::MutexLock lock(&mu_);
  return mu_.AwaitWithDeadline(absl::Condition(this, &Engine::CloseDelivered), deadline);
}

EngineSnapshot Engine::Snapshot() const {
  EngineSnapshot s;
  s.spec = spec_;
  s.geometry = geometry_;
  s.index = active_index_->counts();
  s.region_epoch = region_epoch_;
  s.owner_uid = owner_uid_;
  AddRegionCounters(own_, &s);
  s.latency = latency_.Get();
  s.pool = pool_ != nullptr ? pool_->name() : std::string();
  s.pool_member = member_;  // 0 for a private engine
  absl::MutexLock lock(&mu_);
  AddJobCounters(jobs_, sessions_, absl::Now(), &s);
  return s;
}

uint32_t Engine::num_workers() const {
  absl::MutexLock lock(&mu_);
  return sessions_.size();
}

absl::Time Engine::idle_since() const {
  absl::MutexLock lock(&mu_);
  return sessions_.idle_since();
}

}  // namespace kvoffload::daemon
