#include "daemon/engine/engine.h"

#include <algorithm>
#include <functional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/check.h"
#include "common/logging.h"
#include "common/status_macros.h"

namespace kvoffload::daemon {
namespace {

// True when a row repeats. Rows that only go up (a run, or rows the index handed out in order)
// are checked in one pass; anything else is sorted (O(n log n), a copy).
bool HasDuplicateRow(const std::vector<uint64_t>& rows) {
  if (std::adjacent_find(rows.begin(), rows.end(), std::greater_equal<uint64_t>()) == rows.end()) {
    return false;
  }
  std::vector<uint64_t> sorted = rows;
  std::sort(sorted.begin(), sorted.end());
  return std::adjacent_find(sorted.begin(), sorted.end()) != sorted.end();
}

spdlog::logger* Log() {
  static spdlog::logger* log = common::Logger("engine");
  return log;
}


}  // namespace

absl::StatusOr<EngineCost> Engine::CostOf(const common::Geometry& geometry) {
  if (geometry.num_rows > SlotIndex::kMaxRows) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "an engine of ", geometry.num_rows, " rows of ", geometry.row_bytes,
        " bytes exceeds the ", SlotIndex::kMaxRows, " rows one index can hold; lower budget_bytes"));
  }
  EngineCost cost;
  cost.region_bytes = geometry.capacity_bytes;
  cost.index_bytes = SlotIndex::MetadataBytesFor(geometry.num_rows);
  cost.total_bytes = cost.region_bytes > UINT64_MAX - cost.index_bytes
                         ? UINT64_MAX
                         : cost.region_bytes + cost.index_bytes;
  return cost;
}

absl::StatusOr<std::shared_ptr<Engine>> Engine::Create(const common::EngineSpec& spec,
                                                       const EngineDeps& deps,
                                                       uint64_t region_epoch) {
  ASSIGN_OR_RETURN(common::Geometry geometry, common::ComputeGeometry(spec));
  // Admission before allocation: the whole cost (region + index metadata) is reserved first, so
  // a request that does not fit is refused in O(1) with nothing allocated, whatever its budget.
  // Then the region, then the index; each step is undone by RAII if a later one fails.
  ASSIGN_OR_RETURN(EngineCost cost, CostOf(geometry));
  ASSIGN_OR_RETURN(
      MemoryReservation reservation,
      MemoryReservation::Reserve(
          deps.budget, cost.total_bytes,
          absl::StrCat("engine ", spec.Key(), " (region ", cost.region_bytes,
                       " bytes + index metadata ", cost.index_bytes, " bytes)")));
  ASSIGN_OR_RETURN(std::unique_ptr<Region> region,
                   Region::Create(spec.Key(), geometry.capacity_bytes, deps.region_options));
  RETURN_IF_ERROR(deps.backend->RegisterRegion(region->data(), region->size(), geometry.row_bytes));
  absl::StatusOr<std::unique_ptr<SlotIndex>> index = SlotIndex::Create(geometry.num_rows);
  if (!index.ok()) {
    deps.backend->UnregisterRegion(region->data());
    return index.status();
  }
  Log()->info(
      "engine {} ready: {} rows of {} bytes ({} copies, replicated={}), index {} bytes, region "
      "epoch {:x}, populated in {:.2f}s",
      spec.Key(), geometry.num_rows, geometry.row_bytes, geometry.num_copies, geometry.replicated,
      cost.index_bytes, region_epoch, region->populate_seconds());
  return std::shared_ptr<Engine>(new Engine(spec, geometry, deps, region_epoch,
                                            std::move(reservation), std::move(region),
                                            std::move(*index)));
}

Engine::Engine(const common::EngineSpec& spec, const common::Geometry& geometry,
               const EngineDeps& deps, uint64_t region_epoch, MemoryReservation reservation,
               std::unique_ptr<Region> region, std::unique_ptr<SlotIndex> index)
    : spec_(spec),
      geometry_(geometry),
      deps_(deps),
      region_epoch_(region_epoch),
      reservation_(std::move(reservation)),
      region_(std::move(region)),
      index_(std::move(index)),
      retired_(deps.finished_jobs_remembered),
      idle_since_(absl::Now()) {}

Engine::~Engine() {
  // Every copy holds a reference to the engine, so none is in flight here.
  deps_.backend->UnregisterRegion(region_->data());
  Log()->info("engine {} released its region of {} bytes", spec_.Key(), region_->size());
}

absl::Status Engine::CheckSameSpec(const common::EngineSpec& spec) const {
  if (spec == spec_) return absl::OkStatus();
  auto other = common::ComputeGeometry(spec);
  return absl::FailedPreconditionError(
      absl::StrCat("engine ", spec_.Key(), " exists with a different spec or geometry: existing {",
                   spec_.DebugString(), "} geometry {", geometry_.DebugString(), "}; requested {",
                   spec.DebugString(), "} geometry {",
                   other.ok() ? other->DebugString() : std::string(other.status().message()), "}"));
}

absl::Status Engine::CheckRegistration(const common::EngineSpec& spec,
                                       const common::Geometry& geometry, uint32_t mp_rank,
                                       const WorkerRegistration& registration) {
  RETURN_IF_ERROR(common::SlotOf(spec, geometry, mp_rank).status());
  if (registration.tensors.empty()) {
    return absl::InvalidArgumentError("worker registered no KV tensors");
  }
  std::vector<uint64_t> pages;
  uint64_t bytes_per_block = 0;
  for (const TensorRegistration& t : registration.tensors) {
    pages.push_back(t.page_bytes);
    if (t.page_bytes > UINT64_MAX - bytes_per_block) {
      return absl::InvalidArgumentError(
          absl::StrCat("mp_rank ", mp_rank, ": tensor page sizes overflow 64 bits"));
    }
    bytes_per_block += t.page_bytes;
  }
  if (bytes_per_block != geometry.worker_bytes_per_block) {
    return absl::InvalidArgumentError(
        absl::StrCat("mp_rank ", mp_rank, ": its tensors hold ", bytes_per_block,
                     " bytes per block (pages [", absl::StrJoin(pages, ","),
                     "]) but the engine geometry says "
                     "worker_bytes_per_block=",
                     geometry.worker_bytes_per_block, " (", geometry.DebugString(), ")"));
  }
  return absl::OkStatus();
}

namespace {

std::vector<uint64_t> PagesOf(const WorkerRegistration& registration) {
  std::vector<uint64_t> pages;
  for (const TensorRegistration& t : registration.tensors) pages.push_back(t.page_bytes);
  return pages;
}

}  // namespace

absl::Status Engine::CheckAttachLocked(uint32_t mp_rank, uint32_t slot,
                                       const std::vector<uint64_t>& pages) const {
  if (closed_) return closed_why_;
  auto departed = departed_.find(mp_rank);
  if (departed != departed_.end() && !departed->second.expired()) {
    return absl::UnavailableError(absl::StrCat(
        "mp_rank ", mp_rank, " of engine ", key(),
        ": copies of its previous session are still running; register again shortly"));
  }
  if (!tensor_pages_.empty() && tensor_pages_ != pages) {
    return absl::FailedPreconditionError(absl::StrCat(
        "mp_rank ", mp_rank, ": layout ", common::LayoutFingerprint(geometry_, pages),
        " differs from the engine's registered layout ",
        common::LayoutFingerprint(geometry_, tensor_pages_)));
  }
  for (const auto& [id, s] : sessions_) {
    if (s.mp_rank == mp_rank) {
      return absl::AlreadyExistsError(
          absl::StrCat("mp_rank ", mp_rank, " of engine ", key(), " is already registered"));
    }
    if (!geometry_.replicated && s.slot == slot) {
      return absl::AlreadyExistsError(absl::StrCat(
          "slot ", slot, " of engine ", key(), " is held by mp_rank ", s.mp_rank, "; mp_rank ",
          mp_rank, " maps to the same slot (local_world_size ", geometry_.local_world_size, ")"));
    }
  }
  if (sessions_.size() >= geometry_.local_world_size) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "engine ", key(), " already has its ", geometry_.local_world_size, " local workers"));
  }
  return absl::OkStatus();
}

absl::Status Engine::CheckAttach(uint32_t mp_rank, const WorkerRegistration& registration) const {
  RETURN_IF_ERROR(CheckRegistration(spec_, geometry_, mp_rank, registration));
  ASSIGN_OR_RETURN(uint32_t slot, common::SlotOf(spec_, geometry_, mp_rank));
  absl::MutexLock lock(&mu_);
  return CheckAttachLocked(mp_rank, slot, PagesOf(registration));
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
  absl::Status valid = CheckRegistration(spec_, geometry_, mp_rank, registration);
  if (!valid.ok()) return refuse(valid);
  absl::StatusOr<uint32_t> slot = common::SlotOf(spec_, geometry_, mp_rank);
  if (!slot.ok()) return refuse(slot.status());
  const std::vector<uint64_t> pages = PagesOf(registration);
  absl::MutexLock lock(&mu_);
  absl::Status free = CheckAttachLocked(mp_rank, *slot, pages);
  if (!free.ok()) return refuse(free);
  if (tensor_pages_.empty()) tensor_pages_ = pages;
  Session session;
  session.id = next_session_id_++;
  session.mp_rank = mp_rank;
  session.slot = *slot;
  session.writer = common::IsStoreWriter(geometry_, mp_rank);
  session.memory = std::move(memory);
  session.listener = listener;
  WorkerInfo info{session.id, *slot, session.writer, region_epoch_};
  sessions_.emplace(session.id, std::move(session));
  idle_since_ = absl::InfiniteFuture();
  Log()->info("engine {}: mp_rank {} attached in slot {} (writer={})", key(), mp_rank, *slot,
              info.writer);
  return info;
}

void Engine::Detach(uint64_t session_id) {
  absl::MutexLock delivery(&delivery_mu_);
  Notices notices;
  std::shared_ptr<WorkerMemory> memory;
  {
    absl::MutexLock lock(&mu_);
    auto it = sessions_.find(session_id);
    if (it == sessions_.end()) return;
    const uint32_t mp_rank = it->second.mp_rank;
    memory = std::move(it->second.memory);
    departed_[mp_rank] = memory;
    sessions_.erase(it);
    if (sessions_.empty()) idle_since_ = absl::Now();
    const absl::Status why = absl::UnavailableError(
        absl::StrCat("worker mp_rank ", mp_rank, " of engine ", key(), " disconnected"));
    std::vector<uint64_t> ids;
    for (auto& [id, job] : jobs_) {
      // A writer-only store never waits for a non-writer, so it does not fail when one leaves.
      const bool needs_rank =
          !(job.direction == CopyDirection::kStore && StoresByWriterOnly() && mp_rank != 0);
      if (needs_rank && !job.voted.count(mp_rank)) ids.push_back(id);
    }
    for (uint64_t id : ids) {
      auto j = jobs_.find(id);
      if (j != jobs_.end()) FailJob(j->second, why, &notices);
    }
    Log()->info("engine {}: mp_rank {} detached, {} open jobs failed", key(), mp_rank, ids.size());
  }
  // In-flight copies hold their own references; the mapping closes after the last one.
  deps_.release->Defer(std::move(memory));
  Deliver(notices);
}

absl::Status Engine::ValidatePart(const Session& session, const JobPart& part) const {
  return ValidateJobPart(part, geometry_,
                         PartBounds{region_epoch_, session.memory->num_blocks(),
                                    session.memory->num_events(), deps_.max_blocks_per_job},
                         absl::StrCat("job ", part.job_id, " of mp_rank ", session.mp_rank));
}

absl::Status Engine::Submit(uint64_t session_id, JobPart part) {
  // Rows come back as the index handed them out, with their tickets (SlotIndex::StoreHandle):
  // split them, so that a part planned against a row that has since been handed to another key
  // is refused rather than copied into or out of that key's row. (Region blocks are plain.)
  std::vector<uint32_t> tickets;
  if (!spec_.rows_assigned_by_engine) {
    for (size_t i = 0; i < part.rows.size(); ++i) {
      const uint32_t ticket = SlotIndex::TicketOfHandle(part.rows[i]);
      if (ticket == 0) continue;
      if (tickets.empty()) tickets.resize(part.rows.size(), 0);
      tickets[i] = ticket;
      part.rows[i] = SlotIndex::RowOfHandle(part.rows[i]);
    }
  }
  CopyJob copy;
  std::shared_ptr<WorkerMemory> memory;
  uint32_t mp_rank = 0;
  {
    absl::ReaderMutexLock delivery(&delivery_mu_);
    Notices notices;
    {
      absl::MutexLock lock(&mu_);
      if (closed_) return closed_why_;
      if (draining_) return drain_why_;
      auto sit = sessions_.find(session_id);
      if (sit == sessions_.end()) {
        return absl::FailedPreconditionError(
            absl::StrCat("session ", session_id, " is not a registered worker of ", key()));
      }
      Session& session = sit->second;
      mp_rank = session.mp_rank;
      RETURN_IF_ERROR(ValidatePart(session, part));
      if (part.direction == CopyDirection::kStore && !session.writer && StoresByWriterOnly()) {
        return absl::FailedPreconditionError(absl::StrCat(
            "job ", part.job_id, ": mp_rank ", mp_rank, " is not the writer of engine ", key(),
            ", whose spec says stores_by_writer_only: only mp_rank 0 submits stores"));
      }
      if (session.jobs_in_flight >= deps_.max_jobs_per_session) {
        return absl::ResourceExhaustedError(absl::StrCat(
            "job ", part.job_id, ": mp_rank ", mp_rank, " already has ", session.jobs_in_flight,
            " jobs in flight (limit ", deps_.max_jobs_per_session,
            " per session, --max_jobs_per_session); wait for verdicts"));
      }

      auto jit = jobs_.find(part.job_id);
      if (jit == jobs_.end()) {
        if (const RetiredJobs::Outcome* done = retired_.Find(part.job_id)) {
          // A failed job's late part gets the job's verdict (the worker may not have heard it
          // yet); any other part with a retired id is a duplicate.
          if (!done->status.ok() && !done->submitted.count(mp_rank)) return done->status;
          return absl::AlreadyExistsError(
              absl::StrCat("job ", part.job_id, " of engine ", key(), " already finished (",
                           done->status.ok() ? "OK" : done->status.ToString(),
                           "); job ids must be unique"));
        }
        if (jobs_.size() >= deps_.max_jobs_per_engine) {
          return absl::ResourceExhaustedError(absl::StrCat(
              "job ", part.job_id, ": engine ", key(), " already has ", jobs_.size(),
              " jobs in flight (limit ", deps_.max_jobs_per_engine,
              " per engine, --max_jobs_per_engine); wait for verdicts"));
        }
        if (part.direction == CopyDirection::kStore && HasDuplicateRow(part.rows)) {
          // Loads may read a row twice; a store may not write one twice.
          return absl::InvalidArgumentError(
              absl::StrCat("job ", part.job_id, ": a row appears twice in one store"));
        }
        // A new job: its rows must be in the state the index expects, and stay quarantined until
        // the job retires (no eviction or reuse while a copy may still touch them). Engines that
        // assign rows themselves own that bookkeeping.
        if (!spec_.rows_assigned_by_engine) {
          RETURN_IF_ERROR(index_->BeginCopy(part.direction, part.rows, tickets));
        }
        Job job;
        job.id = part.job_id;
        job.direction = part.direction;
        job.rows = part.rows;
        job.tickets = tickets;
        job.region_blocks = part.region_blocks;
        job.started = absl::Now();
        job.deadline = job.started + deps_.job_timeout;
        jit = jobs_.emplace(part.job_id, std::move(job)).first;
      } else {
        Job& job = jit->second;
        if (job.submitted.count(mp_rank)) {
          return absl::AlreadyExistsError(absl::StrCat("job ", part.job_id, ": mp_rank ", mp_rank,
                                                       " already submitted its part"));
        }
        // Every part of a job names the same rows (and tickets, and blocks of rows): the ranks
        // of a replicated layout must load the same bytes.
        if (job.direction != part.direction || job.rows != part.rows || job.tickets != tickets ||
            job.region_blocks != part.region_blocks) {
          return absl::InvalidArgumentError(
              absl::StrCat("job ", part.job_id, ": mp_rank ", mp_rank, " submitted a ",
                           CopyDirectionName(part.direction), " of ", part.rows.size(),
                           " rows that differs from the job's ", CopyDirectionName(job.direction),
                           " of ", job.rows.size(), " rows"));
        }
        if (job.reported) {
          // The job already failed (timeout, a peer disconnected); this part is not copied.
          job.submitted.insert(mp_rank);
          return job.status;
        }
      }
      Job& job = jit->second;
      job.submitted.insert(mp_rank);
      job.sessions.insert(session_id);
      ++session.jobs_in_flight;
      if (part.direction == CopyDirection::kStore && !session.writer) {
        // Replicated non-writer: acknowledges without copying. The writer's vote is still needed.
        Vote(job, mp_rank, session.slot, absl::OkStatus(), &notices);
      } else {
        ++job.copies_in_flight;
        memory = session.memory;
        copy.direction = part.direction;
        copy.memory = memory.get();
        copy.region_base = region_->data();
        copy.row_bytes = geometry_.row_bytes;
        copy.slot_bytes = geometry_.slot_bytes;
        copy.slot = session.slot;
        copy.blocks_per_row = geometry_.blocks_per_row;
        copy.gpu_blocks = part.gpu_blocks;
        copy.rows = part.rows;
        copy.region_blocks = part.region_blocks;
        copy.event_index = part.event_index;
        copy.timeout = deps_.job_timeout;
      }
    }
    Deliver(notices);
  }
  if (memory != nullptr) {
    // The closure keeps the engine (region) and the worker's mapping alive until the copy ends.
    std::shared_ptr<Engine> self = shared_from_this();
    const uint64_t job_id = part.job_id;
    const uint32_t slot = copy.slot;
    std::atomic<int64_t>* running = deps_.callbacks_running;
    if (running != nullptr) running->fetch_add(1);
    deps_.backend->Submit(std::move(copy), [self, memory, job_id, mp_rank, slot, running](
                                               absl::Status status, uint64_t bytes) mutable {
      self->OnCopyDone(job_id, mp_rank, slot, std::move(status), bytes);
      DeferredRelease* release = self->deps_.release;
      release->Defer(std::move(memory));
      release->Defer(std::move(self));
      if (running != nullptr) running->fetch_sub(1);  // the callback's last act
    });
  }
  return absl::OkStatus();
}

void Engine::OnCopyDone(uint64_t job_id, uint32_t mp_rank, uint32_t slot, absl::Status status,
                        uint64_t bytes) {
  absl::ReaderMutexLock delivery(&delivery_mu_);
  Notices notices;
  {
    absl::MutexLock lock(&mu_);
    auto it = jobs_.find(job_id);
    KVO_CHECK(it != jobs_.end(), "engine ", key(), ": a copy of job ", job_id, " of mp_rank ",
              mp_rank, " ended, but the job was retired while it ran");
    Job& job = it->second;
    --job.copies_in_flight;
    if (status.ok()) {
      job.bytes += bytes;
      (job.direction == CopyDirection::kStore ? store_bytes_ : load_bytes_) += bytes;
    } else {
      status = absl::Status(status.code(), absl::StrCat("job ", job_id, " mp_rank ", mp_rank,
                                                        " copy failed: ", status.message()));
    }
    Vote(job, mp_rank, slot, status, &notices);
  }
  Deliver(notices);
}

void Engine::Vote(Job& job, uint32_t mp_rank, uint32_t slot, const absl::Status& status,
                  Notices* notices) {
  job.voted.insert(mp_rank);
  job.voted_slots.insert(slot);
  if (!status.ok() && job.status.ok()) job.status = status;
  MaybeFinish(job, notices);
}

void Engine::FailJob(Job& job, const absl::Status& why, Notices* notices) {
  if (job.status.ok()) job.status = why;
  // Reported only once no copy of the job can still write (MaybeFinish): a worker told "failed"
  // reuses its GPU blocks, and a load landing afterwards would corrupt them. The backend bounds
  // the wait: a copy not started by its deadline is cancelled.
  MaybeFinish(job, notices);
}

void Engine::MaybeFinish(Job& job, Notices* notices) {
  // Replicated: every local rank (all share slot 0), or the writer alone for stores when the
  // spec says so. Per-rank: every slot of the row.
  bool all_voted;
  if (job.direction == CopyDirection::kStore && StoresByWriterOnly()) {
    all_voted = job.voted.count(0) > 0;  // mp_rank 0 is the writer (common::IsStoreWriter)
  } else {
    all_voted = (geometry_.replicated ? job.voted.size() : job.voted_slots.size()) >=
                geometry_.local_world_size;
  }
  if (draining_ && !all_voted && job.copies_in_flight == 0 && job.status.ok()) {
    job.status = drain_why_;  // the missing parts will never be accepted
  }
  if (!job.reported && (all_voted || !job.status.ok()) && job.copies_in_flight == 0) {
    Report(job, notices);
  }
  if (!job.reported || job.copies_in_flight > 0) return;
  // Retire: rows may be reused only now that no copy can touch them.
  if (!spec_.rows_assigned_by_engine) {
    // A store tells the index whether its rows were written, in the same step as the copy ends:
    // a written row that was committed becomes READY; a failed one is refused CompleteStore(true)
    // (or dropped, when its commit came first), so it never reads as HIT.
    absl::Status ended = job.direction == CopyDirection::kStore
                             ? index_->EndStoreCopy(job.rows, job.status.ok())
                             : index_->EndCopy(job.rows);
    // Rows that could be served although no copy wrote them: the state cannot be trusted.
    KVO_CHECK(ended.ok(), "engine ", key(), ": retiring ", CopyDirectionName(job.direction),
              " job ", job.id, " of ", job.rows.size(), " rows: ", ended.ToString());
  }
  retired_.Remember(job.id, job.status, job.submitted);
  jobs_.erase(job.id);  // `job` is dangling from here on
  MaybeAnnounceClosed(notices);
}

void Engine::MaybeAnnounceClosed(Notices* notices) {
  if (!closed_ || closed_announced_ || !jobs_.empty()) return;
  closed_announced_ = true;
  notices->announces_close = true;
  notices->closed_why = closed_why_;
  for (const auto& [id, s] : sessions_) notices->closed.push_back(s.listener);
}

void Engine::Report(Job& job, Notices* notices) {
  job.reported = true;
  if (job.status.ok()) {
    ++jobs_done_;
    ++(job.direction == CopyDirection::kStore ? store_jobs_ : load_jobs_);
  } else {
    ++jobs_failed_;
    Log()->warn("engine {}: {} job {} failed: {}", key(), CopyDirectionName(job.direction), job.id,
                job.status.ToString());
  }
  latency_.Record(absl::Now() - job.started);
  JobResult result{job.id, job.status, job.bytes};
  for (auto& [id, s] : sessions_) {
    notices->finished.emplace_back(s.listener, result);
    if (job.sessions.count(id)) --s.jobs_in_flight;
  }
}

void Engine::Deliver(Notices& notices) {
  for (auto& [listener, result] : notices.finished) listener->OnJobFinished(result);
  for (JobListener* listener : notices.closed) listener->OnEngineClosed(notices.closed_why);
  if (notices.announces_close) {
    absl::MutexLock lock(&mu_);
    close_delivered_ = true;
  }
}

void Engine::ExpireJobs(absl::Time now) {
  if (!spec_.rows_assigned_by_engine) {
    // Commits recorded for stores that never came (DESIGN.md §7): after a job timeout no part of
    // theirs can still be accepted as new work worth waiting for.
    const uint64_t dropped = index_->DropStaleCommits(now - deps_.job_timeout);
    if (dropped > 0) {
      Log()->warn("engine {}: dropped {} committed keys whose store job never arrived within {}",
                  key(), dropped, absl::FormatDuration(deps_.job_timeout));
    }
  }
  absl::ReaderMutexLock delivery(&delivery_mu_);
  Notices notices;
  {
    absl::MutexLock lock(&mu_);
    std::vector<uint64_t> expired;
    for (const auto& [id, job] : jobs_) {
      if (!job.reported && now >= job.deadline) expired.push_back(id);
    }
    for (uint64_t id : expired) {
      Job& job = jobs_.at(id);
      std::vector<uint32_t> missing;
      for (uint32_t r = 0; r < spec_.world_size; ++r) {
        if (job.submitted.count(r) && !job.voted.count(r)) missing.push_back(r);
      }
      FailJob(job,
              absl::DeadlineExceededError(
                  absl::StrCat(CopyDirectionName(job.direction), " job ", id, " of engine ", key(),
                               " not done after ", absl::FormatDuration(deps_.job_timeout), ": ",
                               job.voted.size(), " of ", geometry_.local_world_size, " local votes",
                               missing.empty() ? ""
                                               : absl::StrCat(", copies pending for mp_ranks [",
                                                              absl::StrJoin(missing, ","), "]"))),
              &notices);
    }
  }
  Deliver(notices);
}

void Engine::Drain(const absl::Status& why) {
  absl::ReaderMutexLock delivery(&delivery_mu_);
  Notices notices;
  {
    absl::MutexLock lock(&mu_);
    if (closed_ || draining_) return;
    draining_ = true;
    drain_why_ = why;
    std::vector<uint64_t> waiting;
    for (const auto& [id, job] : jobs_) {
      if (!job.reported && job.copies_in_flight == 0) waiting.push_back(id);
    }
    for (uint64_t id : waiting) FailJob(jobs_.at(id), why, &notices);
  }
  Deliver(notices);
}

void Engine::Close(const absl::Status& why) {
  absl::ReaderMutexLock delivery(&delivery_mu_);
  Notices notices;
  {
    absl::MutexLock lock(&mu_);
    if (closed_) return;
    closed_ = true;
    closed_why_ = why;
    std::vector<uint64_t> ids;
    for (const auto& [id, job] : jobs_) ids.push_back(id);
    for (uint64_t id : ids) {
      auto it = jobs_.find(id);
      if (it != jobs_.end() && !it->second.reported) FailJob(it->second, why, &notices);
    }
    // Jobs whose copies still run are reported when those end; the sessions hear the close after
    // them (MaybeFinish), or now when nothing is running.
    MaybeAnnounceClosed(&notices);
    if (!closed_announced_) {
      Log()->info("engine {} closed; waiting for {} jobs' copies before ending its sessions",
                  key(), jobs_.size());
    }
  }
  Deliver(notices);
}

bool Engine::WaitClosed(absl::Time deadline) const {
  absl::MutexLock lock(&mu_);
  return mu_.AwaitWithDeadline(absl::Condition(this, &Engine::CloseDelivered), deadline);
}

EngineSnapshot Engine::Snapshot() const {
  EngineSnapshot s;
  s.spec = spec_;
  s.geometry = geometry_;
  s.index = index_->counts();
  s.region_epoch = region_epoch_;
  s.owner_uid = owner_uid_;
  s.region_bytes = region_->size();
  s.reserved_bytes = reservation_.bytes();
  s.populate_seconds = region_->populate_seconds();
  s.latency = latency_.Get();
  absl::MutexLock lock(&mu_);
  s.store_bytes = store_bytes_;
  s.load_bytes = load_bytes_;
  s.store_jobs = store_jobs_;
  s.load_jobs = load_jobs_;
  s.jobs_done = jobs_done_;
  s.jobs_failed = jobs_failed_;
  s.jobs_in_flight = jobs_.size();
  s.workers = sessions_.size();
  s.idle_seconds = sessions_.empty() ? absl::ToDoubleSeconds(absl::Now() - idle_since_) : 0.0;
  return s;
}

uint32_t Engine::num_workers() const {
  absl::MutexLock lock(&mu_);
  return sessions_.size();
}

absl::Time Engine::idle_since() const {
  absl::MutexLock lock(&mu_);
  return idle_since_;
}

}  // namespace kvoffload::daemon
