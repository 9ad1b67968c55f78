#include "daemon/pool/pool_table.h"

#include <utility>

#include "common/status_macros.h"

namespace kvoffload::daemon {

absl::Status PoolTable::Check(const Caller* caller, const common::EngineSpec& spec,
                              const common::Geometry& geometry) const {
  absl::MutexLock lock(&mu_);
  auto it = pools_.find(spec.pool);
  if (it != pools_.end()) return it->second->CheckJoin(caller, spec, geometry);
  RETURN_IF_ERROR(Pool::CheckNames(spec));
  if (geometry.num_rows == 0 || geometry.num_rows > SlotIndex::kMaxRows / options_.max_members) {
    return absl::InvalidArgumentError(
        absl::StrCat("pool ", spec.pool, ": ", options_.max_members, " members of ",
                     geometry.num_rows, " rows do not fit one index (at most ",
                     SlotIndex::kMaxRows, " rows)"));
  }
  return absl::OkStatus();
}

absl::StatusOr<PoolTable::Joined> PoolTable::Join(const Caller* caller,
                                                  const common::EngineSpec& spec,
                                                  const common::Geometry& geometry,
                                                  uint32_t owner_uid,
                                                  std::shared_ptr<void> keepalive,
                                                  uint8_t* region_base,
                                                  Pool::ReadyRows ready_rows) {
  absl::MutexLock lock(&mu_);
  Joined joined;
  auto it = pools_.find(spec.pool);
  if (it != pools_.end()) {
    // Checked again under the lock: the pool may have been created or changed since Check.
    RETURN_IF_ERROR(it->second->CheckJoin(caller, spec, geometry));
    joined.pool = it->second;
  } else {
    ASSIGN_OR_RETURN(joined.pool,
                     Pool::Create(spec, geometry, owner_uid, options_, budget_, release_));
    joined.created = true;
  }
  ASSIGN_OR_RETURN(joined.member,
                   joined.pool->Join(spec.Key(), std::move(keepalive), region_base,
                                     std::move(ready_rows)));
  if (joined.created) pools_.emplace(spec.pool, joined.pool);
  return joined;
}

void PoolTable::Maintain() {
  absl::MutexLock lock(&mu_);
  for (auto it = pools_.begin(); it != pools_.end();) {
    if (it->second->Maintain()) {
      it = pools_.erase(it);
    } else {
      ++it;
    }
  }
}

std::vector<std::shared_ptr<Pool>> PoolTable::List() const {
  absl::MutexLock lock(&mu_);
  std::vector<std::shared_ptr<Pool>> out;
  for (const auto& [name, pool] : pools_) out.push_back(pool);
  return out;
}

void PoolTable::Clear() {
  absl::MutexLock lock(&mu_);
  for (auto& [name, pool] : pools_) pool->Clear();
  pools_.clear();
}

}  // namespace kvoffload::daemon
