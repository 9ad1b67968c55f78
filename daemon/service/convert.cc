#include "daemon/service/convert.h"

#include "absl/strings/str_cat.h"

namespace kvoffload::daemon {

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

absl::StatusOr<JobPart> FromProto(const v1::Submit& p) {
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
  // Copied as sent (bounded by the message size); every rule is ValidatePart's.
  part.gpu_blocks.assign(p.gpu_blocks().begin(), p.gpu_blocks().end());
  part.rows.assign(p.rows().begin(), p.rows().end());
  part.runs.reserve(p.runs_size());
  for (const v1::BlockRun& r : p.runs()) {
    part.runs.push_back(
        PartRun{r.gpu_block(), r.row(), r.num_rows(), r.first_block(), r.num_blocks()});
  }
  part.event_index = p.event_index();
  part.region_epoch = p.region_epoch();
  return part;
}

void ToProto(const EngineSnapshot& s, v1::EngineStats* p) {
  p->set_engine_id(s.spec.engine_id);
  p->set_dp_rank(s.spec.dp_rank);
  GeometryToProto(s.geometry, p->mutable_geometry());
  p->set_num_rows(s.index.rows_online());  // a pool member: the pool's rows online
  p->set_rows_free(s.index.rows_free);
  p->set_rows_writing(s.index.rows_writing);
  p->set_rows_ready(s.index.rows_ready);
  p->set_rows_reading(s.index.rows_reading);
  p->set_rows_quarantined(s.index.rows_quarantined);
  p->set_region_bytes(s.region_bytes);
  p->set_region_ready_bytes(s.region_ready_bytes);
  p->set_rows_not_ready(s.index.rows_not_ready);
  p->set_region_first_ready_seconds(s.region_first_ready_seconds);
  p->set_region_fully_ready_seconds(s.region_fully_ready_seconds);
  p->set_rows_not_durable(s.rows_not_durable);
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
  p->set_pool(s.pool);
  p->set_pool_member(s.pool_member);
}

void ToProto(const PoolSnapshot& s, v1::PoolStats* p) {
  p->set_name(s.name);
  p->set_owner_uid(s.owner_uid);
  p->set_model_identity(s.model_identity);
  p->set_rows_per_member(s.segment_rows);
  p->set_row_bytes(s.row_bytes);
  p->set_rows_online(s.rows_online);
  p->set_rows_free(s.index.rows_free);
  p->set_rows_writing(s.index.rows_writing);
  p->set_rows_ready(s.index.rows_ready);
  p->set_rows_reading(s.index.rows_reading);
  p->set_hits(s.index.hits);
  p->set_misses(s.index.misses);
  p->set_evictions(s.index.evictions);
  p->set_reserved_bytes(s.reserved_bytes);
  for (const PoolMemberSnapshot& m : s.members) {
    v1::PoolMemberStats* out = p->add_members();
    out->set_member(m.member);
    out->set_engine(m.engine);
    out->set_draining(m.draining);
    out->set_rows_held(m.counts.rows_held);
    out->set_hits(m.counts.hits);
    out->set_cross_member_hits(m.counts.cross_member_hits);
    out->set_loads(m.counts.loads);
    out->set_cross_member_loads(m.counts.cross_member_loads);
    out->set_stores(m.counts.stores);
    out->set_evicted(m.counts.evicted);
    out->set_floor_skips(m.counts.floor_skips);
  }
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

void ToProto(const TierManager::TierLine& line, v1::TierStats* proto) {
  const tier::RecordStoreStats& store = line.store;
  const TierCounters& links = line.links;
  proto->set_name(line.name);
  proto->set_capacity_bytes(store.capacity_bytes);
  proto->set_used_bytes(store.used_bytes);
  proto->set_records(store.records);
  proto->set_writes_ok(store.writes_ok);
  proto->set_write_errors(store.write_errors);
  proto->set_bytes_written(store.bytes_written);
  proto->set_reads_ok(store.reads_ok);
  proto->set_read_misses(store.read_misses);
  proto->set_read_corrupt(store.read_corrupt);
  proto->set_read_errors(store.read_errors);
  proto->set_bytes_read(store.bytes_read);
  proto->set_evictions(store.evictions);
  proto->set_queue_depth(store.queue_depth);
  proto->set_spills_queued(links.spills_queued);
  proto->set_spills_ok(links.spills_ok);
  proto->set_spill_bytes(links.spill_bytes);
  proto->set_spills_failed(links.spills_failed);
  proto->set_spills_already_held(links.spills_already_held);
  proto->set_spills_gone(links.spills_gone);
  proto->set_spill_queue_dropped(links.spill_queue_dropped);
  proto->set_lookup_tier_hits(links.lookup_tier_hits);
  proto->set_promotions_started(links.promotions_started);
  proto->set_promotions_ok(links.promotions_ok);
  proto->set_promotions_failed(links.promotions_failed);
  proto->set_promotion_bytes(links.promotion_bytes);
  proto->set_promotions_timed_out(links.promotions_timed_out);
  proto->set_promotion_seconds_sum(links.promotion_seconds_sum);
  proto->set_promotion_seconds_max(links.promotion_seconds_max);
  proto->set_spill_queue_depth(links.spill_queue_depth);
  proto->set_promotions_in_flight(links.promotions_in_flight);
}

}  // namespace kvoffload::daemon
