#include "client/host/store_rows.h"

#include <memory>

#include "client/host/host_kv_memory.h"
#include "common/status_macros.h"

namespace kvoffload::client {

absl::Status StoreRows(const std::string& socket_path, const EngineSpec& spec,
                       const std::vector<uint64_t>& rows, uint64_t job_id) {
  HostKvMemory memory;
  const uint64_t blocks = rows.empty() ? 1 : rows.size() * spec.blocks_per_row;
  RETURN_IF_ERROR(memory.Create("separate_kv", spec.num_layers, spec.page_bytes, blocks));
  memory.Fill(job_id);
  WorkerOptions options;
  options.socket_path = socket_path;
  options.spec = spec;
  options.tensors = memory.Handles();
  ASSIGN_OR_RETURN(std::unique_ptr<WorkerClient> worker, WorkerClient::Connect(options));
  JobRequest job;
  job.job_id = job_id;
  job.direction = Direction::kStore;
  job.rows = rows;
  for (uint64_t b = 0; b < blocks; ++b) job.gpu_blocks.push_back(b);
  RETURN_IF_ERROR(worker->Submit(job));
  ASSIGN_OR_RETURN(FinishedJob done, worker->WaitFinished(job_id, absl::Seconds(30)));
  return done.status;
}

}  // namespace kvoffload::client
