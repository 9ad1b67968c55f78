#include "daemon/engine/job_rows.h"

#include "common/check.h"
#include "common/logging.h"

namespace kvoffload::daemon {
namespace {

spdlog::logger* Log() {
  static spdlog::logger* const log = common::Logger("engine");
  return log;
}

}  // namespace

absl::Status BeginJobRows(const common::EngineSpec& spec, SlotIndex& index, const ValidPart& part) {
  if (spec.rows_assigned_by_engine) return absl::OkStatus();
  return index.copies().Begin(part.direction, part.rows);
}

void EndJobRows(const common::EngineSpec& spec, SlotIndex& index, const Job& job) {
  if (spec.rows_assigned_by_engine) return;
  absl::Status ended = job.direction == CopyDirection::kStore
                           ? index.copies().EndStore(job.rows, job.status.ok())
                           : index.copies().End(job.rows);
  KVO_CHECK(ended.ok(), "engine ", spec.Key(), ": retiring ", CopyDirectionName(job.direction),
            " job ", job.id, " of ", CountRows(job.rows), " rows: ", ended.ToString());
}

void DropStaleCommits(const common::EngineSpec& spec, SlotIndex& index, absl::Time now,
                      absl::Duration job_timeout) {
  if (spec.rows_assigned_by_engine) return;
  const uint64_t dropped = index.copies().DropStaleCommits(now - job_timeout);
  if (dropped > 0) {
    Log()->warn("engine {}: dropped {} committed keys whose store job never arrived within {}",
                spec.Key(), dropped, absl::FormatDuration(job_timeout));
  }
}

}  // namespace kvoffload::daemon
