#include "daemon/engine/worker_sessions.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"

namespace kvoffload::daemon {

absl::Status CheckWorkerRegistration(const common::EngineSpec& spec,
                                     const common::Geometry& geometry, uint32_t mp_rank,
                                     const WorkerRegistration& registration) {
  RETURN_IF_ERROR(common::SlotOf(spec, geometry, mp_rank).status());
  if (registration.tensors.empty()) {
    return absl::InvalidArgumentError("worker registered no KV tensors");
  }
  uint64_t bytes_per_block = 0;
  for (const TensorRegistration& t : registration.tensors) {
    if (t.page_bytes > UINT64_MAX - bytes_per_block) {
      return absl::InvalidArgumentError(
          absl::StrCat("mp_rank ", mp_rank, ": tensor page sizes overflow 64 bits"));
    }
    bytes_per_block += t.page_bytes;
  }
  if (bytes_per_block != geometry.worker_bytes_per_block) {
    return absl::InvalidArgumentError(absl::StrCat(
        "mp_rank ", mp_rank, ": its tensors hold ", bytes_per_block, " bytes per block (pages [",
        absl::StrJoin(PagesOf(registration), ","),
        "]) but the engine geometry says worker_bytes_per_block=", geometry.worker_bytes_per_block,
        " (", geometry.DebugString(), ")"));
  }
  return absl::OkStatus();
}

std::vector<uint64_t> PagesOf(const WorkerRegistration& registration) {
  std::vector<uint64_t> pages;
  pages.reserve(registration.tensors.size());
  for (const TensorRegistration& t : registration.tensors) pages.push_back(t.page_bytes);
  return pages;
}

WorkerSessions::WorkerSessions(const common::Geometry& geometry, std::string engine_key,
                               std::vector<uint64_t> layout)
    : geometry_(geometry),
      engine_key_(std::move(engine_key)),
      tensor_pages_(std::move(layout)),
      idle_since_(absl::Now()) {}

bool WorkerSessions::PreviousSessionCopying(uint32_t mp_rank) const {
  auto departed = departed_.find(mp_rank);
  return departed != departed_.end() && !departed->second.expired();
}

absl::Status WorkerSessions::CheckAttach(uint32_t mp_rank, uint32_t slot,
                                         const std::vector<uint64_t>& pages) const {
  if (PreviousSessionCopying(mp_rank)) {
    return absl::UnavailableError(
        absl::StrCat("mp_rank ", mp_rank, " of engine ", engine_key_,
                     ": copies of its previous session are still running; register again shortly"));
  }
  if (!tensor_pages_.empty() && tensor_pages_ != pages) {
    return absl::FailedPreconditionError(
        absl::StrCat("mp_rank ", mp_rank, ": layout ", common::LayoutFingerprint(geometry_, pages),
                     " differs from the engine's registered layout ",
                     common::LayoutFingerprint(geometry_, tensor_pages_)));
  }
  for (const auto& [id, s] : sessions_) {
    if (s.mp_rank == mp_rank) {
      return absl::AlreadyExistsError(
          absl::StrCat("mp_rank ", mp_rank, " of engine ", engine_key_, " is already registered"));
    }
    if (!geometry_.replicated && s.slot == slot) {
      return absl::AlreadyExistsError(
          absl::StrCat("slot ", slot, " of engine ", engine_key_, " is held by mp_rank ", s.mp_rank,
                       "; mp_rank ", mp_rank, " maps to the same slot (local_world_size ",
                       geometry_.local_world_size, ")"));
    }
  }
  if (sessions_.size() >= geometry_.local_world_size) {
    return absl::ResourceExhaustedError(absl::StrCat("engine ", engine_key_, " already has its ",
                                                     geometry_.local_world_size, " local workers"));
  }
  return absl::OkStatus();
}

WorkerSession& WorkerSessions::Add(uint32_t mp_rank, uint32_t slot, bool writer,
                                   const std::vector<uint64_t>& pages,
                                   std::shared_ptr<WorkerMemory> memory, JobListener* listener,
                                   bool* fixed_layout) {
  const bool first = tensor_pages_.empty();
  if (first) tensor_pages_ = pages;
  if (fixed_layout != nullptr) *fixed_layout = first;
  WorkerSession session;
  session.id = next_session_id_++;
  session.mp_rank = mp_rank;
  session.slot = slot;
  session.writer = writer;
  session.memory = std::move(memory);
  session.listener = listener;
  idle_since_ = absl::InfiniteFuture();
  const uint64_t id = session.id;
  return sessions_.emplace(id, std::move(session)).first->second;
}

WorkerSession* WorkerSessions::Find(uint64_t session_id) {
  auto it = sessions_.find(session_id);
  return it == sessions_.end() ? nullptr : &it->second;
}

std::shared_ptr<WorkerMemory> WorkerSessions::Remove(uint64_t session_id, uint32_t* mp_rank) {
  auto it = sessions_.find(session_id);
  if (it == sessions_.end()) return nullptr;
  *mp_rank = it->second.mp_rank;
  std::shared_ptr<WorkerMemory> memory = std::move(it->second.memory);
  departed_[*mp_rank] = memory;
  sessions_.erase(it);
  if (sessions_.empty()) idle_since_ = absl::Now();
  return memory;
}

void WorkerSessions::Tell(const JobResult& result, const std::set<uint64_t>& submitters,
                          std::vector<std::pair<JobListener*, JobResult>>* out) {
  for (auto& [id, s] : sessions_) {
    out->emplace_back(s.listener, result);
    if (submitters.count(id)) --s.jobs_in_flight;
  }
}

std::vector<JobListener*> WorkerSessions::Listeners() const {
  std::vector<JobListener*> listeners;
  listeners.reserve(sessions_.size());
  for (const auto& [id, s] : sessions_) listeners.push_back(s.listener);
  return listeners;
}

absl::Status WorkerSessions::CheckMaySubmit(const WorkerSession& session, uint64_t job_id,
                                            CopyDirection direction, bool stores_by_writer_only,
                                            uint64_t max_jobs_per_session) const {
  if (direction == CopyDirection::kStore && !session.writer && stores_by_writer_only) {
    return absl::FailedPreconditionError(absl::StrCat(
        "job ", job_id, ": mp_rank ", session.mp_rank, " is not the writer of engine ", engine_key_,
        ", whose spec says stores_by_writer_only: only mp_rank 0 submits stores"));
  }
  if (session.jobs_in_flight >= max_jobs_per_session) {
    return absl::ResourceExhaustedError(
        absl::StrCat("job ", job_id, ": mp_rank ", session.mp_rank, " already has ",
                     session.jobs_in_flight, " jobs in flight (limit ", max_jobs_per_session,
                     " per session, --max_jobs_per_session); wait for verdicts"));
  }
  return absl::OkStatus();
}

}  // namespace kvoffload::daemon
