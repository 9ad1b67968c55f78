#include "daemon/pool/pool.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "daemon/tier/tier_namespace.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/check.h"
#include "common/logging.h"
#include "common/refusals.h"
#include "common/status_macros.h"
#include "daemon/tier/tier_namespace.h"

namespace kvoffload::daemon {
namespace {

spdlog::logger* Log() {
  static spdlog::logger* log = common::Logger("pool");
  return log;
}

constexpr size_t kMaxNameBytes = 128;
constexpr size_t kMaxIdentityBytes = 1024;

bool NameChar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
         c == '_' || c == '-';
}

// FAILED_PRECONDITION naming the field a would-be member differs in.
template <typename T>
absl::Status Differs(const std::string& pool, const char* field, const T& has, const T& wants) {
  return absl::FailedPreconditionError(absl::StrCat("pool ", pool, ": ", field,
                                                    " differs: the pool's members have ", has,
                                                    ", this engine has ", wants));
}

uint64_t FloorRows(const common::Geometry& geometry, double fraction) {
  if (!(fraction > 0)) return 0;
  const double rows = std::floor(static_cast<double>(geometry.num_rows) * std::min(fraction, 1.0));
  return static_cast<uint64_t>(rows);
}

}  // namespace

absl::Status Pool::CheckNames(const common::EngineSpec& spec) {
  const std::string& name = spec.pool;
  if (name.empty() || name.size() > kMaxNameBytes || !std::all_of(name.begin(), name.end(), NameChar)) {
    return common::SpecRule(absl::StatusCode::kInvalidArgument, "pool_name_format",
                            absl::StrCat("pool \"", absl::CHexEscape(name.substr(0, 64)),
                                         "\" must be 1..", kMaxNameBytes,
                                         " characters of [A-Za-z0-9._-]"));
  }
  if (spec.model_identity.empty() || spec.model_identity.size() > kMaxIdentityBytes) {
    return common::SpecRule(
        absl::StatusCode::kInvalidArgument, "pool_model_identity",
        absl::StrCat("an engine joining pool ", name, " must give a model_identity of 1..",
                     kMaxIdentityBytes, " bytes (it has ", spec.model_identity.size(),
                     "): members share KV bytes only when they are the same model with the same "
                     "dtypes"));
  }
  if (spec.rows_assigned_by_engine) {
    return common::SpecRule(
        absl::StatusCode::kInvalidArgument, "pool_needs_daemon_index",
        absl::StrCat("engine ", spec.Key(), " assigns its rows itself (rows_assigned_by_engine) "
                     "and cannot share the daemon's index of pool ", name));
  }
  return absl::OkStatus();
}

uint64_t Pool::MetadataBytesFor(const common::Geometry& geometry, const PoolOptions& options) {
  const uint64_t rows = geometry.num_rows * options.max_members;
  return SlotIndex::MetadataBytesFor(rows) + sizeof(Pool);
}

absl::StatusOr<std::shared_ptr<Pool>> Pool::Create(const common::EngineSpec& creator,
                                                   const common::Geometry& geometry,
                                                   uint32_t owner_uid, const PoolOptions& options,
                                                   MemoryBudget* budget,
                                                   DeferredRelease* release) {
  RETURN_IF_ERROR(CheckNames(creator));
  if (options.max_members == 0 || options.max_members > SlotIndex::kMaxMembers) {
    return absl::InvalidArgumentError(absl::StrCat("pool max_members is ", options.max_members,
                                                   "; it must be 1..", SlotIndex::kMaxMembers));
  }
  if (geometry.num_rows == 0 || geometry.num_rows > SlotIndex::kMaxRows / options.max_members) {
    return absl::InvalidArgumentError(absl::StrCat(
        "pool ", creator.pool, ": ", options.max_members, " members of ", geometry.num_rows,
        " rows do not fit one index (at most ", SlotIndex::kMaxRows, " rows); use larger rows "
        "(blocks_per_row) or a smaller budget"));
  }
  SlotIndex::PoolShape shape;
  shape.segment_rows = static_cast<uint32_t>(geometry.num_rows);
  shape.num_segments = options.max_members;
  shape.member_floor_rows = FloorRows(geometry, options.member_floor);
  ASSIGN_OR_RETURN(MemoryReservation reservation,
                   MemoryReservation::Reserve(budget, MetadataBytesFor(geometry, options),
                                              absl::StrCat("pool ", creator.pool, " index")));
  ASSIGN_OR_RETURN(std::unique_ptr<SlotIndex> index, SlotIndex::CreatePool(shape));
  return std::shared_ptr<Pool>(new Pool(creator, geometry, owner_uid, options.max_members,
                                        std::move(reservation), std::move(index), release));
}

Pool::Pool(const common::EngineSpec& creator, const common::Geometry& geometry, uint32_t owner_uid,
           uint32_t max_members, MemoryReservation reservation,
           std::unique_ptr<SlotIndex> index, DeferredRelease* release)
    : name_(creator.pool),
      creator_(creator),
      geometry_(geometry),
      owner_uid_(owner_uid),
      reservation_(std::move(reservation)),
      index_(std::move(index)),
      release_(release),
      segments_(max_members) {}

absl::Status Pool::CheckJoin(const Caller* caller, const common::EngineSpec& spec,
                             const common::Geometry& g) const {
  // Access before anything about the pool is compared: a refused caller learns nothing.
  if (caller != nullptr && !caller->IsRoot() && caller->uid != owner_uid_) {
    const auto& uids = creator_.member_uids;
    bool allowed = std::find(uids.begin(), uids.end(), caller->uid) != uids.end();
    for (uint32_t gid : creator_.member_gids) allowed = allowed || caller->InGroup(gid);
    if (!allowed) {
      return absl::PermissionDeniedError(absl::StrCat(
          caller->Describe(), " may not join pool ", name_, ": it belongs to another uid, which "
          "did not name this uid or one of its groups in member_uids/member_gids"));
    }
  }
  RETURN_IF_ERROR(CheckNames(spec));
  const common::Geometry& p = geometry_;
  if (spec.model_identity != creator_.model_identity) {
    return Differs(name_, "model_identity", absl::StrCat("\"", absl::CHexEscape(creator_.model_identity), "\""),
                   absl::StrCat("\"", absl::CHexEscape(spec.model_identity), "\""));
  }
  if (g.replicated != p.replicated) return Differs(name_, "replicated", p.replicated, g.replicated);
  if (g.num_copies != p.num_copies) return Differs(name_, "num_copies", p.num_copies, g.num_copies);
  if (g.blocks_per_row != p.blocks_per_row) {
    return Differs(name_, "blocks_per_row", p.blocks_per_row, g.blocks_per_row);
  }
  if (g.worker_bytes_per_block != p.worker_bytes_per_block) {
    return Differs(name_, "worker_bytes_per_block", p.worker_bytes_per_block,
                   g.worker_bytes_per_block);
  }
  if (g.row_bytes != p.row_bytes) return Differs(name_, "row_bytes", p.row_bytes, g.row_bytes);
  if (g.num_rows != p.num_rows) {
    return Differs(name_, "num_rows", p.num_rows, g.num_rows);
  }
  absl::MutexLock lock(&mu_);
  for (const Segment& s : segments_) {
    if (s.keepalive == nullptr) return absl::OkStatus();
  }
  return absl::ResourceExhaustedError(absl::StrCat(
      "pool ", name_, " has no free member slot: ", segments_.size(),
      " members joined or are still draining (--pool_max_members)"));
}

absl::StatusOr<uint32_t> Pool::Join(const std::string& engine_key, std::shared_ptr<void> keepalive,
                                    uint8_t* region_base, ReadyRows ready_rows) {
  KVO_CHECK(keepalive != nullptr && region_base != nullptr, "pool ", name_, ": member ",
            engine_key, " joins without a region");
  absl::MutexLock lock(&mu_);
  for (uint32_t m = 0; m < segments_.size(); ++m) {
    Segment& s = segments_[m];
    if (s.keepalive != nullptr) continue;
    // A free slot's segment is offline and drained (Maintain let go of it only then).
    const absl::Status online =
        index_->segments().BringOnline(m, ready_rows ? ready_rows() : UINT64_MAX);
    KVO_CHECK(online.ok(), "pool ", name_, ": free slot ", m, ": ", online.ToString());
    s.engine = engine_key;
    s.keepalive = std::move(keepalive);
    s.base = region_base;
    s.ready_rows = std::move(ready_rows);
    s.draining = false;
    Log()->info("pool {}: {} joined as member {} ({} rows)", name_, engine_key, m,
                index_->segments().segment_rows());
    return m;
  }
  return absl::ResourceExhaustedError(
      absl::StrCat("pool ", name_, " has no free member slot (", segments_.size(), " taken)"));
}

void Pool::Leave(uint32_t member) {
  absl::MutexLock lock(&mu_);
  if (member >= segments_.size()) return;
  Segment& s = segments_[member];
  if (s.keepalive == nullptr || s.draining) return;
  s.draining = true;
  absl::StatusOr<SlotIndex::SegmentDrain> drain = index_->segments().TakeOffline(member);
  KVO_CHECK(drain.ok(), "pool ", name_, ": member ", member, " leaves: ", drain.status().ToString());
  Log()->info(
      "pool {}: {} (member {}) left: {} keys dropped, {} unfinished stores ended, {} pins "
      "dropped, {} rows in use drain later",
      name_, s.engine, member, drain->keys_dropped, drain->stores_ended, drain->pins_dropped,
      drain->rows_pending);
}

absl::Status Pool::CheckLayout(const std::vector<uint64_t>& pages) {
  absl::MutexLock lock(&mu_);
  if (layout_.empty()) {
    layout_ = pages;
    return absl::OkStatus();
  }
  if (layout_ == pages) return absl::OkStatus();
  return Differs(name_, "page layout (per-tensor page bytes)", absl::StrJoin(layout_, ","),
                 absl::StrJoin(pages, ","));
}

uint8_t* Pool::SegmentBase(uint32_t segment, std::shared_ptr<void>* keepalive) const {
  absl::MutexLock lock(&mu_);
  KVO_CHECK(segment < segments_.size() && segments_[segment].keepalive != nullptr, "pool ", name_,
            ": a copy names segment ", segment, ", which has no region");
  *keepalive = segments_[segment].keepalive;
  return segments_[segment].base;
}

std::shared_ptr<TierLink> Pool::LinkTier(TierManager* tiers, const std::shared_ptr<Pool>& self) {
  absl::MutexLock lock(&mu_);
  if (tier_link_ != nullptr) return tier_link_;
  TierTarget target;
  target.index = index_.get();
  target.row_bytes = geometry_.row_bytes;
  target.namespace_id = TierNamespace(creator_, owner_uid_, geometry_);
  target.label = absl::StrCat("pool ", name_);
  std::weak_ptr<Pool> weak = self;
  target.lock_owner = [weak]() -> std::shared_ptr<void> { return weak.lock(); };
  // A row's memory is its member's region, kept mapped by the member's reference; asked only
  // for rows a copy guard admitted (SegmentBase's rule).
  const uint64_t row_bytes = geometry_.row_bytes;
  const uint64_t segment_rows = index_->segments().segment_rows();
  target.row_memory = [weak, row_bytes, segment_rows](uint64_t row,
                                                       std::shared_ptr<void>* keepalive) {
    std::shared_ptr<Pool> pool = weak.lock();
    if (pool == nullptr) return static_cast<uint8_t*>(nullptr);
    uint8_t* base = pool->SegmentBase(static_cast<uint32_t>(row / segment_rows), keepalive);
    return base + (row % segment_rows) * row_bytes;
  };
  tier_link_ = tiers->Link(std::move(target));
  return tier_link_;
}

bool Pool::Maintain() {
  std::vector<std::shared_ptr<void>> released;
  bool empty = true;
  {
    absl::MutexLock lock(&mu_);
    for (uint32_t m = 0; m < segments_.size(); ++m) {
      Segment& s = segments_[m];
      if (s.keepalive == nullptr) continue;
      if (s.draining && index_->segments().Drained(m)) {
        Log()->info("pool {}: member {} ({}) drained; its region is released", name_, m, s.engine);
        released.push_back(std::move(s.keepalive));
        s = Segment{};
        continue;
      }
      if (!s.draining && s.ready_rows) index_->segments().MarkRowsReady(m, s.ready_rows());
      empty = false;
    }
  }
  for (auto& r : released) release_->Defer(std::move(r));
  return empty;
}

void Pool::Clear() {
  std::vector<std::shared_ptr<void>> released;
  {
    absl::MutexLock lock(&mu_);
    for (Segment& s : segments_) {
      if (s.keepalive != nullptr) released.push_back(std::move(s.keepalive));
      s = Segment{};
    }
  }
  for (auto& r : released) release_->Defer(std::move(r));
}

PoolSnapshot Pool::Snapshot() const {
  PoolSnapshot snap;
  snap.name = name_;
  snap.owner_uid = owner_uid_;
  snap.model_identity = creator_.model_identity;
  snap.segment_rows = index_->segments().segment_rows();
  snap.row_bytes = geometry_.row_bytes;
  snap.index = index_->counts();
  snap.rows_online = snap.index.rows_online() - snap.index.rows_not_ready;  // usable now
  snap.reserved_bytes = reservation_.bytes();
  absl::MutexLock lock(&mu_);
  for (uint32_t m = 0; m < segments_.size(); ++m) {
    const Segment& s = segments_[m];
    if (s.keepalive == nullptr) continue;
    snap.members.push_back(
        PoolMemberSnapshot{m, s.engine, s.draining, index_->segments().member_counts(m)});
  }
  return snap;
}

}  // namespace kvoffload::daemon
