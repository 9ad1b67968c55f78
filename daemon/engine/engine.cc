#include "daemon/engine/engine.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/check.h"
#include "common/logging.h"
#include "common/refusals.h"
#include "common/status_macros.h"
#include "daemon/pool/segment_runs.h"
#include "daemon/tier/tier_namespace.h"

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
      reservation_(std::move(resources.reservation)),
      region_(std::move(resources.region)),
      index_(std::move(resources.index)),
      active_index_(index_.get()),
      part_geometry_(geometry),
      record_layout_(std::move(resources.record_layout)),
      preparer_(std::move(resources.preparer)),
      rows_not_durable_(std::move(resources.rows_not_durable)),
      sessions_(geometry, spec.Key(), std::move(resources.layout)),
      jobs_(VoteRule::For(geometry, spec), deps.jobs, spec.Key()) {}

Engine::~Engine() {
  // Every copy holds a reference to the engine, so none is in flight here; no chunk is being
  // pinned once the preparer has stopped.
  preparer_.reset();
  deps_.backend->UnregisterRegion(region_->data());
  Log()->info("engine {} released its region of {} bytes", spec_.Key(), region_->size());
}

absl::Status Engine::WaitFirstRowsUsable(absl::Duration timeout) {
  if (preparer_ == nullptr) return absl::OkStatus();
  preparer_->RetryNow();
  // In short steps, so that an engine closed or drained meanwhile (a shutdown, a drop) does
  // not keep its registering worker, and with it the server's shutdown, waiting.
  const absl::Time deadline = absl::Now() + timeout;
  for (;;) {
    const absl::Duration left = deadline - absl::Now();
    absl::Status s = preparer_->WaitFirstChunkUsable(std::min(left, absl::Milliseconds(50)));
    if (s.code() != absl::StatusCode::kDeadlineExceeded || left <= absl::Milliseconds(50)) {
      return s;
    }
    absl::MutexLock lock(&mu_);
    if (closed_ || draining_) {
      return absl::CancelledError("the engine closed while its first rows were prepared");
    }
  }
}

void Engine::set_pool(std::shared_ptr<Pool> pool, uint32_t member) {
  KVO_CHECK(pool_ == nullptr && pool != nullptr, "engine ", key(), " joins a second pool");
  pool_ = std::move(pool);
  member_ = member;
  active_index_ = &pool_->index();
  part_geometry_.num_rows = active_index_->num_rows();
}

void Engine::LinkTier() {
  if (deps_.tiers == nullptr) return;
  if (pool_ != nullptr) {
    tier_link_ = pool_->LinkTier(deps_.tiers, pool_);
  } else {
    TierTarget target;
    target.index = index_.get();
    target.row_bytes = geometry_.row_bytes;
    target.namespace_id = TierNamespace(spec_, owner_uid_, geometry_);
    target.label = absl::StrCat("engine ", key());
    std::weak_ptr<Engine> weak = weak_from_this();
    target.lock_owner = [weak]() -> std::shared_ptr<void> { return weak.lock(); };
    // The owner's reference (lock_owner) keeps the region mapped.
    uint8_t* const base = region_->data();
    const uint64_t row_bytes = geometry_.row_bytes;
    target.row_memory = [base, row_bytes](uint64_t row, std::shared_ptr<void>*) {
      return base + row * row_bytes;
    };
    tier_link_ = deps_.tiers->Link(std::move(target));
  }
  if (tier_link_ == nullptr) {
    Log()->warn("engine {}: rows of {} bytes are larger than any tier holds (--disk_tier_row_bytes): "
                "its rows are not tiered",
                key(), geometry_.row_bytes);
  }
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
  if (fixed_layout && record_layout_) record_layout_(pages);
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
  Deliver(verdicts);
}

absl::StatusOr<Job*> Engine::OpenOrJoin(const WorkerSession& session, const ValidPart& part) {
  Job* job = jobs_.Find(part.job_id);
  if (job == nullptr) {
    RETURN_IF_ERROR(jobs_.CheckNew(part, session.mp_rank));
    // A new job: its rows must be in the state the index expects, and stay quarantined until
    // the job retires (no eviction or reuse while a copy may still touch them). Engines that
    // assign rows themselves own that bookkeeping.
    if (!spec_.rows_assigned_by_engine) {
      RETURN_IF_ERROR(active_index_->copies().Begin(part.direction, part.rows));
    }
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
      if (part.direction == CopyDirection::kStore && !session->writer &&
          jobs_.rule().stores_by_writer_only) {
        return absl::FailedPreconditionError(absl::StrCat(
            "job ", part.job_id, ": mp_rank ", mp_rank, " is not the writer of engine ", key(),
            ", whose spec says stores_by_writer_only: only mp_rank 0 submits stores"));
      }
      if (session->jobs_in_flight >= deps_.jobs.max_jobs_per_session) {
        return absl::ResourceExhaustedError(absl::StrCat(
            "job ", part.job_id, ": mp_rank ", mp_rank, " already has ", session->jobs_in_flight,
            " jobs in flight (limit ", deps_.jobs.max_jobs_per_session,
            " per session, --max_jobs_per_session); wait for verdicts"));
      }
      ASSIGN_OR_RETURN(Job * job, OpenOrJoin(*session, valid));
      ++session->jobs_in_flight;
      if (part.direction == CopyDirection::kStore && !session->writer) {
        // Replicated non-writer: acknowledges without copying. The writer's vote is still needed.
        jobs_.Vote(*job, mp_rank, session->slot, absl::OkStatus());
        SettleIfDue(*job, &verdicts);
      } else {
        ++job->copies_in_flight;
        memory = session->memory;
        copy.direction = part.direction;
        copy.memory = memory.get();
        copy.region_base = region_->data();
        copy.row_bytes = geometry_.row_bytes;
        copy.slot_bytes = geometry_.slot_bytes;
        copy.slot = session->slot;
        copy.blocks_per_row = geometry_.blocks_per_row;
        copy.runs = std::move(valid.runs);
        copy.event_index = valid.event_index;
        copy.timeout = deps_.jobs.job_timeout;
      }
    }
    Deliver(verdicts);
  }
  if (memory != nullptr) StartCopy(std::move(copy), std::move(memory), part.job_id, mp_rank);
  return absl::OkStatus();
}

void Engine::StartCopy(CopyJob copy, std::shared_ptr<WorkerMemory> memory, uint64_t job_id,
                       uint32_t mp_rank) {
  std::shared_ptr<Engine> self = shared_from_this();
  const uint32_t slot = copy.slot;
  std::atomic<int64_t>* running = deps_.callbacks_running;
  if (pool_ == nullptr) {
    // The closure keeps the engine (region) and the worker's mapping alive until the copy ends.
    if (running != nullptr) running->fetch_add(1);
    deps_.backend->Submit(std::move(copy), [self, memory, job_id, mp_rank, slot, running](
                                               absl::Status status, uint64_t bytes) mutable {
      self->OnCopyDone(job_id, mp_rank, slot, std::move(status), bytes);
      DeferredRelease* release = self->deps_.release;
      release->Defer(std::move(memory));
      release->Defer(std::move(self));
      if (running != nullptr) running->fetch_sub(1);  // the callback's last act
    });
    return;
  }
  // A pool: one copy per segment, each keeping its segment's region mapped (the rows passed
  // the copy guard, so their segments are online or still draining: SegmentBase has them).
  std::vector<SegmentRuns> split = SplitBySegment(
      copy.runs, uint64_t{active_index_->segments().segment_rows()} * geometry_.blocks_per_row);
  copy.runs.clear();
  KVO_CHECK(!split.empty(), "engine ", key(), ": job ", job_id, " has no runs to copy");
  struct FanIn {
    absl::Mutex mu;
    size_t left ABSL_GUARDED_BY(mu) = 0;
    absl::Status first ABSL_GUARDED_BY(mu);
    uint64_t bytes ABSL_GUARDED_BY(mu) = 0;
  };
  auto fan_in = std::make_shared<FanIn>();
  {
    absl::MutexLock lock(&fan_in->mu);
    fan_in->left = split.size();
  }
  if (running != nullptr) running->fetch_add(static_cast<int64_t>(split.size()));
  for (SegmentRuns& part : split) {
    std::shared_ptr<void> segment;
    CopyJob job = copy;
    job.runs = std::move(part.runs);
    job.region_base = pool_->SegmentBase(part.segment, &segment);
    deps_.backend->Submit(std::move(job), [self, memory, segment, fan_in, job_id, mp_rank, slot,
                                           running](absl::Status status, uint64_t bytes) mutable {
      bool last = false;
      absl::Status outcome;
      uint64_t total = 0;
      {
        absl::MutexLock lock(&fan_in->mu);
        if (status.ok()) {
          fan_in->bytes += bytes;
        } else if (fan_in->first.ok()) {
          fan_in->first = std::move(status);
        }
        last = --fan_in->left == 0;
        outcome = fan_in->first;
        total = fan_in->bytes;
      }
      if (last) self->OnCopyDone(job_id, mp_rank, slot, std::move(outcome), total);
      DeferredRelease* release = self->deps_.release;
      release->Defer(std::move(memory));
      release->Defer(std::move(segment));
      release->Defer(std::move(self));
      if (running != nullptr) running->fetch_sub(1);  // the callback's last act
    });
  }
}

void Engine::OnCopyDone(uint64_t job_id, uint32_t mp_rank, uint32_t slot, absl::Status status,
                        uint64_t bytes) {
  absl::ReaderMutexLock delivery(&delivery_mu_);
  Verdicts verdicts;
  {
    absl::MutexLock lock(&mu_);
    Job* job = jobs_.Find(job_id);
    KVO_CHECK(job != nullptr, "engine ", key(), ": a copy of job ", job_id, " of mp_rank ", mp_rank,
              " ended, but the job was retired while it ran");
    --job->copies_in_flight;
    if (status.ok()) {
      jobs_.CountCopied(*job, bytes);
    } else {
      status = absl::Status(status.code(), absl::StrCat("job ", job_id, " mp_rank ", mp_rank,
                                                        " copy failed: ", status.message()));
    }
    jobs_.Vote(*job, mp_rank, slot, status);
    SettleIfDue(*job, &verdicts);
  }
  Deliver(verdicts);
}

bool Engine::SettleIfDue(Job& job, Verdicts* verdicts) {
  if (!jobs_.Due(job)) return false;
  latency_.Record(absl::Now() - job.started);
  sessions_.Tell(jobs_.Report(job), job.sessions, &verdicts->finished);
  // Retire: rows may be reused only now that no copy can touch them.
  if (!spec_.rows_assigned_by_engine) {
    // A store tells the index whether its rows were written, in the same step as the copy ends:
    // a written row that was committed becomes READY; a failed one is refused CompleteStore(true)
    // (or dropped, when its commit came first), so it never reads as HIT.
    absl::Status ended = job.direction == CopyDirection::kStore
                             ? active_index_->copies().EndStore(job.rows, job.status.ok())
                             : active_index_->copies().End(job.rows);
    // Rows that could be served although no copy wrote them: the state cannot be trusted.
    KVO_CHECK(ended.ok(), "engine ", key(), ": retiring ", CopyDirectionName(job.direction),
              " job ", job.id, " of ", CountRows(job.rows), " rows: ", ended.ToString());
  }
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
  verdicts->closed_why = closed_why_;
  verdicts->closed = sessions_.Listeners();
}

void Engine::Deliver(const Verdicts& verdicts) {
  verdicts.DeliverTo();
  if (verdicts.announces_close) {
    absl::MutexLock lock(&mu_);
    close_delivered_ = true;
  }
}

void Engine::ExpireJobs(absl::Time now) {
  if (!spec_.rows_assigned_by_engine) {
    // Commits recorded for stores that never came (DESIGN.md §7): after a job timeout no part of
    // theirs can still be accepted as new work worth waiting for.
    const uint64_t dropped = active_index_->copies().DropStaleCommits(now - deps_.jobs.job_timeout);
    if (dropped > 0) {
      Log()->warn("engine {}: dropped {} committed keys whose store job never arrived within {}",
                  key(), dropped, absl::FormatDuration(deps_.jobs.job_timeout));
    }
  }
  absl::ReaderMutexLock delivery(&delivery_mu_);
  Verdicts verdicts;
  {
    absl::MutexLock lock(&mu_);
    for (const auto& [id, why] : jobs_.Expired(now, spec_.world_size)) {
      FailAndSettle(id, why, &verdicts);
    }
  }
  Deliver(verdicts);
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
  Deliver(verdicts);
}

void Engine::Close(const absl::Status& why) {
  absl::ReaderMutexLock delivery(&delivery_mu_);
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
  Deliver(verdicts);
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
  s.region_bytes = region_->size();
  s.reserved_bytes = reservation_.bytes();
  s.populate_seconds = region_->populate_seconds();
  const RegionReadiness readiness = ReadinessOf(*region_, preparer_.get());
  s.region_ready_bytes = readiness.ready_bytes;
  s.rows_not_durable = rows_not_durable_ ? rows_not_durable_() : 0;
  s.region_first_ready_seconds = readiness.first_ready_seconds;
  s.region_fully_ready_seconds = readiness.fully_ready_seconds;
  s.latency = latency_.Get();
  if (pool_ != nullptr) {
    s.pool = pool_->name();
    s.pool_member = member_;
  }
  absl::MutexLock lock(&mu_);
  const JobCounters& c = jobs_.counters();
  s.store_bytes = c.store_bytes;
  s.load_bytes = c.load_bytes;
  s.store_jobs = c.store_jobs;
  s.load_jobs = c.load_jobs;
  s.jobs_done = c.jobs_done;
  s.jobs_failed = c.jobs_failed;
  s.jobs_in_flight = jobs_.size();
  s.workers = sessions_.size();
  s.idle_seconds =
      sessions_.empty() ? absl::ToDoubleSeconds(absl::Now() - sessions_.idle_since()) : 0.0;
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
