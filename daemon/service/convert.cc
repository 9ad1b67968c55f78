#include "daemon/service/convert.h"

#include "absl/strings/str_cat.h"

namespace kvoffload::daemon {

grpc::Status ToGrpcStatus(const absl::Status& status) {
  if (status.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()), std::string(status.message()));
}

absl::StatusOr<WorkerRegistration> FromProto(const v1::RegisterWorker& p) {
  WorkerRegistration r;
  r.device = p.device();
  r.device_uuid = p.device_uuid();
  if (p.tensors_size() == 0) return absl::InvalidArgumentError("register: no tensors");
  if (static_cast<size_t>(p.tensors_size()) > kMaxTensorsPerWorker) {
    return absl::InvalidArgumentError(absl::StrCat("register: ", p.tensors_size(),
                                                   " tensors exceed the limit of ",
                                                   kMaxTensorsPerWorker));
  }
  for (int i = 0; i < p.tensors_size(); ++i) {
    const v1::TensorSpec& t = p.tensors(i);
    if (t.allocation_handle().empty() || t.num_blocks() == 0 || t.page_bytes() == 0 ||
        t.block_stride_bytes() == 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "register: tensor ", i,
          " needs an allocation handle and non-zero num_blocks, page_bytes, block_stride_bytes"));
    }
    r.tensors.push_back(TensorRegistration{t.allocation_handle(), t.allocation_bytes(), t.offset(),
                                           t.num_blocks(), t.block_stride_bytes(), t.page_bytes()});
  }
  if (static_cast<size_t>(p.event_handles_size()) > kMaxEventsPerWorker) {
    return absl::InvalidArgumentError(
        absl::StrCat("register: more than ", kMaxEventsPerWorker, " event handles"));
  }
  r.event_handles.assign(p.event_handles().begin(), p.event_handles().end());
  return r;
}

absl::StatusOr<JobPart> FromProto(const v1::Submit& p, uint32_t blocks_per_row,
                                  uint64_t max_blocks) {
  JobPart part;
  part.job_id = p.job_id();
  switch (p.direction()) {
    case v1::DIRECTION_STORE:
      part.direction = CopyDirection::kStore;
      break;
    case v1::DIRECTION_LOAD:
      part.direction = CopyDirection::kLoad;
      break;
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("job ", p.job_id(), ": direction must be STORE or LOAD"));
  }
  // Sizes first, from the message alone: a hostile run cannot make the daemon allocate.
  const uint64_t bpr = blocks_per_row == 0 ? 1 : blocks_per_row;
  uint64_t run_rows = 0;
  uint64_t range_blocks = 0;  // blocks of runs addressed block by block (num_blocks > 0)
  for (const v1::BlockRun& r : p.runs()) {
    uint64_t end = 0;
    if (r.num_blocks() > 0) {
      uint64_t first = 0;
      if (r.num_rows() != 0 || r.first_block() >= bpr ||
          __builtin_mul_overflow(SlotIndex::RowOfHandle(r.row()), bpr, &first) ||
          __builtin_add_overflow(first, uint64_t{r.first_block()}, &first) ||
          __builtin_add_overflow(first, r.num_blocks(), &end) ||
          __builtin_add_overflow(r.gpu_block(), r.num_blocks(), &end) ||
          __builtin_add_overflow(range_blocks, r.num_blocks(), &range_blocks)) {
        return absl::InvalidArgumentError(absl::StrCat(
            "job ", p.job_id(), ": a block run needs num_rows 0, first_block < blocks_per_row (",
            bpr, ") and must not overflow (row ", r.row(), ", first_block ", r.first_block(),
            ", num_blocks ", r.num_blocks(), ")"));
      }
      continue;
    }
    if (r.num_rows() == 0 || r.first_block() != 0 ||
        __builtin_add_overflow(run_rows, r.num_rows(), &run_rows) ||
        __builtin_add_overflow(r.row(), r.num_rows(), &end)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "job ", p.job_id(), ": a run needs num_rows >= 1 (or num_blocks >= 1), first_block 0 "
          "unless num_blocks is set, and must not overflow (row ", r.row(), ", num_rows ",
          r.num_rows(), ", first_block ", r.first_block(), ")"));
    }
  }
  uint64_t run_blocks = 0;
  uint64_t total_blocks = 0;
  if (__builtin_mul_overflow(run_rows, bpr, &run_blocks) ||
      __builtin_add_overflow(run_blocks, uint64_t(p.gpu_blocks_size()), &total_blocks) ||
      __builtin_add_overflow(total_blocks, range_blocks, &total_blocks) ||
      total_blocks > max_blocks) {
    return absl::InvalidArgumentError(absl::StrCat(
        "job ", p.job_id(), ": ", p.gpu_blocks_size(), " listed blocks, runs of ", run_rows,
        " rows and block runs of ", range_blocks, " blocks exceed the limit of ", max_blocks,
        " blocks per job"));
  }
  if (range_blocks > 0 && part.direction != CopyDirection::kLoad) {
    return absl::InvalidArgumentError(absl::StrCat(
        "job ", p.job_id(), ": a store must write whole rows; runs of single blocks "
        "(num_blocks) are for loads only"));
  }
  part.gpu_blocks.reserve(total_blocks);
  part.rows.reserve(p.rows_size() + run_rows);
  part.gpu_blocks.assign(p.gpu_blocks().begin(), p.gpu_blocks().end());
  part.rows.assign(p.rows().begin(), p.rows().end());
  for (const v1::BlockRun& r : p.runs()) {
    if (r.num_blocks() > 0) continue;
    const uint64_t blocks = r.num_rows() * bpr;
    uint64_t last = 0;
    if (__builtin_add_overflow(r.gpu_block(), blocks, &last)) {
      return absl::InvalidArgumentError(absl::StrCat("job ", p.job_id(), ": run at gpu block ",
                                                     r.gpu_block(), " overflows"));
    }
    for (uint64_t i = 0; i < r.num_rows(); ++i) part.rows.push_back(r.row() + i);
    for (uint64_t b = 0; b < blocks; ++b) part.gpu_blocks.push_back(r.gpu_block() + b);
  }
  if (range_blocks > 0) {
    // Block by block: every entry gets its region block (of the row without its handle's
    // ticket), and rows become the rows covered, as handles with the tickets they came with.
    if (part.gpu_blocks.size() != part.rows.size() * bpr) {
      return absl::InvalidArgumentError(absl::StrCat(
          "job ", p.job_id(), ": ", part.gpu_blocks.size(), " gpu blocks for ", part.rows.size(),
          " rows of ", bpr, " blocks (want ", part.rows.size() * bpr, ")"));
    }
    std::vector<uint32_t> block_tickets;
    part.region_blocks.reserve(total_blocks);
    block_tickets.reserve(total_blocks);
    auto add = [&](uint64_t handle, uint64_t first, uint64_t n) {
      const uint64_t start = SlotIndex::RowOfHandle(handle) * bpr + first;  // < 2^32 × 2^32
      for (uint64_t b = 0; b < n; ++b) {
        part.region_blocks.push_back(start + b);
        block_tickets.push_back(SlotIndex::TicketOfHandle(handle));
      }
    };
    for (uint64_t row : part.rows) add(row, 0, bpr);
    for (const v1::BlockRun& r : p.runs()) {
      if (r.num_blocks() == 0) continue;
      for (uint64_t b = 0; b < r.num_blocks(); ++b) part.gpu_blocks.push_back(r.gpu_block() + b);
      add(r.row(), r.first_block(), r.num_blocks());
    }
    part.rows.clear();
    for (size_t i = 0; i < part.region_blocks.size(); ++i) {
      const uint64_t row = part.region_blocks[i] / bpr;
      if (!part.rows.empty() && SlotIndex::RowOfHandle(part.rows.back()) == row) continue;
      part.rows.push_back(SlotIndex::StoreHandle(block_tickets[i], row));
    }
  }
  part.event_index = p.event_index();
  part.region_epoch = p.region_epoch();
  return part;
}

void ToProto(const EngineSnapshot& s, v1::EngineStats* p) {
  p->set_engine_id(s.spec.engine_id);
  p->set_dp_rank(s.spec.dp_rank);
  GeometryToProto(s.geometry, p->mutable_geometry());
  p->set_num_rows(s.index.num_rows);
  p->set_rows_free(s.index.rows_free);
  p->set_rows_writing(s.index.rows_writing);
  p->set_rows_ready(s.index.rows_ready);
  p->set_rows_reading(s.index.rows_reading);
  p->set_rows_quarantined(s.index.rows_quarantined);
  p->set_region_bytes(s.region_bytes);
  p->set_owner_uid(s.owner_uid);
  p->set_store_bytes(s.store_bytes);
  p->set_load_bytes(s.load_bytes);
  p->set_jobs_done(s.jobs_done);
  p->set_jobs_failed(s.jobs_failed);
  p->set_jobs_in_flight(s.jobs_in_flight);
  p->set_hits(s.index.hits);
  p->set_misses(s.index.misses);
  p->set_evictions(s.index.evictions);
  p->set_workers(s.workers);
  p->set_job_latency_p50_us(s.latency.QuantileMicros(0.5));
  p->set_job_latency_p99_us(s.latency.QuantileMicros(0.99));
  p->set_idle_seconds(s.idle_seconds);
  p->set_region_epoch(s.region_epoch);
  p->set_reserved_bytes(s.reserved_bytes);
}

absl::StatusOr<std::vector<std::string>> KeysFromProto(
    const google::protobuf::RepeatedPtrField<std::string>& keys) {
  if (keys.empty()) return absl::InvalidArgumentError("no keys in request");
  if (static_cast<size_t>(keys.size()) > kMaxKeysPerRequest) {
    return absl::InvalidArgumentError(absl::StrCat(keys.size(), " keys exceed the limit of ",
                                                   kMaxKeysPerRequest, " per request"));
  }
  return std::vector<std::string>(keys.begin(), keys.end());
}

}  // namespace kvoffload::daemon
