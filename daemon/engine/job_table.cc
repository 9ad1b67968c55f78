#include "daemon/engine/job_table.h"

#include <algorithm>
#include <functional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/check.h"
#include "common/logging.h"

namespace kvoffload::daemon {
namespace {

// True when a row repeats. Runs that only go up (rows the index handed out in order, a run) are
// checked in one pass; anything else is sorted (O(runs log runs), a copy).
bool HasDuplicateRow(const std::vector<RowRun>& rows) {
  auto overlaps = [](const std::vector<RowRun>& sorted) {
    for (size_t i = 1; i < sorted.size(); ++i) {
      if (sorted[i].first_row < sorted[i - 1].first_row + sorted[i - 1].num_rows) return true;
    }
    return false;
  };
  if (!overlaps(rows)) return false;  // each run starts past the one before it
  std::vector<RowRun> sorted = rows;
  std::sort(sorted.begin(), sorted.end(),
            [](const RowRun& a, const RowRun& b) { return a.first_row < b.first_row; });
  return overlaps(sorted);
}

// Whether two parts name the same region blocks in the same order, whatever their GPU blocks
// (O(runs): runs that continue each other on the region side are walked as one).
bool SameRegionBlocks(const std::vector<CopyRun>& a, const std::vector<CopyRun>& b) {
  size_t i = 0, j = 0;
  uint64_t ai = 0, bj = 0;  // blocks of a[i] / b[j] already matched
  while (i < a.size() && j < b.size()) {
    const uint64_t at_a = a[i].region_block + ai;
    const uint64_t at_b = b[j].region_block + bj;
    if (at_a != at_b) return false;
    const uint64_t n = std::min(a[i].num_blocks - ai, b[j].num_blocks - bj);
    ai += n;
    bj += n;
    if (ai == a[i].num_blocks) ++i, ai = 0;
    if (bj == b[j].num_blocks) ++j, bj = 0;
  }
  return i == a.size() && j == b.size();
}

spdlog::logger* Log() {
  static spdlog::logger* log = common::Logger("engine");
  return log;
}

}  // namespace

VoteRule VoteRule::For(const common::Geometry& geometry, const common::EngineSpec& spec) {
  VoteRule rule;
  rule.replicated = geometry.replicated;
  rule.local_world_size = geometry.local_world_size;
  rule.stores_by_writer_only = geometry.replicated && spec.stores_by_writer_only;
  return rule;
}

bool VoteRule::AllVoted(const Job& job) const {
  if (job.direction == CopyDirection::kStore && stores_by_writer_only) {
    return job.voted.count(0) > 0;  // mp_rank 0 is the writer (common::IsStoreWriter)
  }
  return (replicated ? job.voted.size() : job.voted_slots.size()) >= local_world_size;
}

bool VoteRule::NeedsVoteOf(CopyDirection direction, uint32_t mp_rank) const {
  // A writer-only store never waits for a non-writer.
  return !(direction == CopyDirection::kStore && stores_by_writer_only && mp_rank != 0);
}

JobTable::JobTable(VoteRule rule, JobLimits limits, std::string engine_key)
    : rule_(rule),
      limits_(limits),
      engine_key_(std::move(engine_key)),
      retired_(limits.finished_remembered) {}

Job* JobTable::Find(uint64_t id) {
  auto it = jobs_.find(id);
  return it == jobs_.end() ? nullptr : &it->second;
}

absl::Status JobTable::CheckNew(const ValidPart& part, uint32_t mp_rank) const {
  if (const RetiredJobs::Outcome* done = retired_.Find(part.job_id)) {
    // A failed job's late part gets the job's verdict (the worker may not have heard it yet);
    // any other part with a retired id is a duplicate.
    if (!done->status.ok() && !done->submitted.count(mp_rank)) return done->status;
    return absl::AlreadyExistsError(absl::StrCat(
        "job ", part.job_id, " of engine ", engine_key_, " already finished (",
        done->status.ok() ? "OK" : done->status.ToString(), "); job ids must be unique"));
  }
  if (jobs_.size() >= limits_.max_jobs_per_engine) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "job ", part.job_id, ": engine ", engine_key_, " already has ", jobs_.size(),
        " jobs in flight (limit ", limits_.max_jobs_per_engine,
        " per engine, --max_jobs_per_engine); wait for verdicts"));
  }
  if (part.direction == CopyDirection::kStore && HasDuplicateRow(part.rows)) {
    // Loads may read a row twice; a store may not write one twice.
    return absl::InvalidArgumentError(
        absl::StrCat("job ", part.job_id, ": a row appears twice in one store"));
  }
  return absl::OkStatus();
}

Job& JobTable::Open(const ValidPart& part, absl::Time now) {
  Job job;
  job.id = part.job_id;
  job.direction = part.direction;
  job.rows = part.rows;
  std::vector<CopyRun>& ranges = job.region_ranges;
  for (const CopyRun& run : part.runs) {
    if (!ranges.empty() && ranges.back().region_block + ranges.back().num_blocks == run.region_block) {
      ranges.back().num_blocks += run.num_blocks;
    } else {
      ranges.push_back(CopyRun{0, run.region_block, run.num_blocks});
    }
  }
  job.started = now;
  job.deadline = now + limits_.job_timeout;
  return jobs_.emplace(part.job_id, std::move(job)).first->second;
}

absl::Status JobTable::CheckJoin(const Job& job, const ValidPart& part, uint32_t mp_rank) const {
  if (job.submitted.count(mp_rank)) {
    return absl::AlreadyExistsError(
        absl::StrCat("job ", part.job_id, ": mp_rank ", mp_rank, " already submitted its part"));
  }
  if (job.direction != part.direction || job.rows != part.rows ||
      !SameRegionBlocks(job.region_ranges, part.runs)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "job ", part.job_id, ": mp_rank ", mp_rank, " submitted a ",
        CopyDirectionName(part.direction), " of ", CountRows(part.rows),
        " rows that differs from the job's ", CopyDirectionName(job.direction), " of ",
        CountRows(job.rows), " rows"));
  }
  return absl::OkStatus();
}

void JobTable::Vote(Job& job, uint32_t mp_rank, uint32_t slot, const absl::Status& status) {
  job.voted.insert(mp_rank);
  job.voted_slots.insert(slot);
  if (!status.ok() && job.status.ok()) job.status = status;
}

void JobTable::CountCopied(Job& job, uint64_t bytes) {
  job.bytes += bytes;
  (job.direction == CopyDirection::kStore ? counters_.store_bytes : counters_.load_bytes) += bytes;
}

Job& JobTable::CopyEnded(uint64_t job_id, uint32_t mp_rank, uint32_t slot, absl::Status status,
                         uint64_t bytes) {
  Job* job = Find(job_id);
  KVO_CHECK(job != nullptr, "engine ", engine_key_, ": a copy of job ", job_id, " of mp_rank ",
            mp_rank, " ended, but the job was retired while it ran");
  --job->copies_in_flight;
  if (status.ok()) {
    CountCopied(*job, bytes);
  } else {
    status = absl::Status(status.code(), absl::StrCat("job ", job_id, " mp_rank ", mp_rank,
                                                      " copy failed: ", status.message()));
  }
  Vote(*job, mp_rank, slot, status);
  return *job;
}

void JobTable::Fail(Job& job, const absl::Status& why) {
  if (job.status.ok()) job.status = why;
}

void JobTable::StartDraining(const absl::Status& why) {
  draining_ = true;
  drain_why_ = why;
}

bool JobTable::Due(Job& job) {
  const bool all_voted = rule_.AllVoted(job);
  if (draining_ && !all_voted && job.copies_in_flight == 0 && job.status.ok()) {
    job.status = drain_why_;
  }
  return (all_voted || !job.status.ok()) && job.copies_in_flight == 0;
}

JobResult JobTable::Report(const Job& job) {
  if (job.status.ok()) {
    ++counters_.jobs_done;
    ++(job.direction == CopyDirection::kStore ? counters_.store_jobs : counters_.load_jobs);
  } else {
    ++counters_.jobs_failed;
    Log()->warn("engine {}: {} job {} failed: {}", engine_key_, CopyDirectionName(job.direction),
                job.id, job.status.ToString());
  }
  return JobResult{job.id, job.status, job.bytes};
}

void JobTable::Retire(Job& job) {
  const uint64_t id = job.id;
  retired_.Remember(id, job.status, job.submitted);
  jobs_.erase(id);
}

std::vector<uint64_t> JobTable::AwaitingVoteOf(uint32_t mp_rank) const {
  std::vector<uint64_t> ids;
  for (const auto& [id, job] : jobs_) {
    if (rule_.NeedsVoteOf(job.direction, mp_rank) && !job.voted.count(mp_rank)) ids.push_back(id);
  }
  return ids;
}

std::vector<std::pair<uint64_t, absl::Status>> JobTable::Expired(absl::Time now,
                                                                 uint32_t world_size) const {
  std::vector<std::pair<uint64_t, absl::Status>> expired;
  for (const auto& [id, job] : jobs_) {
    if (now < job.deadline) continue;
    std::vector<uint32_t> missing;
    for (uint32_t r = 0; r < world_size; ++r) {
      if (job.submitted.count(r) && !job.voted.count(r)) missing.push_back(r);
    }
    expired.emplace_back(
        id, absl::DeadlineExceededError(absl::StrCat(
                CopyDirectionName(job.direction), " job ", id, " of engine ", engine_key_,
                " not done after ", absl::FormatDuration(limits_.job_timeout), ": ",
                job.voted.size(), " of ", rule_.local_world_size, " local votes",
                missing.empty() ? ""
                                : absl::StrCat(", copies pending for mp_ranks [",
                                               absl::StrJoin(missing, ","), "]"))));
  }
  return expired;
}

std::vector<uint64_t> JobTable::WaitingForParts() const {
  std::vector<uint64_t> ids;
  for (const auto& [id, job] : jobs_) {
    if (job.copies_in_flight == 0) ids.push_back(id);
  }
  return ids;
}

std::vector<uint64_t> JobTable::Ids() const {
  std::vector<uint64_t> ids;
  ids.reserve(jobs_.size());
  for (const auto& [id, job] : jobs_) ids.push_back(id);
  return ids;
}

}  // namespace kvoffload::daemon
