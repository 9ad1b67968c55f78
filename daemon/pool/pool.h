// Pool: one cache shared by several engines of a node — data-parallel replicas of one
// model, or engines of one model run by cooperating users. A pool is ONE SlotIndex (one key
// space, one LRU) over segments: each member brings its own region (its own budget, admitted as
// any engine's) as one segment, so the pool's capacity is the sum of its members' budgets and
// nobody's rows are remapped when a member joins or leaves. Pool row r lies in segment
// r / segment_rows at local row r % segment_rows; a copy touching several segments is one
// CopyJob per segment (Engine::Submit).
//
//   ASSIGN_OR_RETURN(std::shared_ptr<Pool> pool, Pool::Create(spec, geometry, owner, options));
//   RETURN_IF_ERROR(pool->CheckJoin(&caller, spec, geometry));   // before allocating a region
//   ASSIGN_OR_RETURN(uint32_t member, pool->Join(key, keepalive, region_base));
//   ... index calls: pool->index().Lookup(keys, member) ...
//   pool->Leave(member);   // its segment drains; its memory stays while a row of it is in use
//
// Rules (README "Pools"):
//   - who may join: the creator's uid, root, and the uids/groups the creator's spec lists in
//     member_uids/member_gids; anyone else is PERMISSION_DENIED before anything about the pool
//     is compared or told (the message names the caller and the pool, nothing else);
//   - members agree on model_identity and the layout fingerprint (rows per segment, row bytes,
//     copies, blocks per row, bytes per block, replicated or not) — FAILED_PRECONDITION naming
//     the field — and on the per-tensor page layout of their workers (CheckLayout);
//   - a leaving member's segment goes offline (index.segments().TakeOffline): rows nobody uses
//     are freed at once, rows in use are parked when released; the segment's region (the
//     keepalive) is let go once every row of it is parked (Maintain), so no copy can touch it;
//   - the pool is empty when no member is left and no segment is draining; its table forgets it
//     then (PoolTable::Maintain). A pool does not outlive the daemon: members are not durable.
//
// Thread-safety: thread-safe; mu_ is taken inside Engine::mu_ (Submit asks for segments) and
// never calls out while held. Ownership: the pool owns its index and one keepalive reference
// per segment (the member engine), released through DeferredRelease, never under mu_.
#ifndef KVOFFLOAD_DAEMON_POOL_POOL_H_
#define KVOFFLOAD_DAEMON_POOL_POOL_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "common/engine_spec.h"
#include "common/geometry.h"
#include "daemon/access/caller.h"
#include "daemon/index/slot_index.h"
#include "daemon/lifetime/deferred_release.h"
#include "daemon/region/memory_budget.h"
#include "daemon/tier/tier_link.h"

namespace kvoffload::daemon {

struct PoolOptions {
  // Members a pool holds at most (its row space is reserved for them: index metadata of
  // max_members × rows per member, charged to the pool's creator).
  uint32_t max_members = 8;
  // Of the rows a member stored, the fraction of its own budget it keeps against the other
  // members' stores (SlotIndex "Pools"); 0 disables the floor.
  double member_floor = 0.25;
};

// A member's view, for stats.
struct PoolMemberSnapshot {
  uint32_t member = 0;
  std::string engine;  // "engine_id/dp_rank"
  bool draining = false;
  SlotIndex::MemberCounts counts;
};

struct PoolSnapshot {
  std::string name;
  uint32_t owner_uid = 0;
  std::string model_identity;
  uint64_t segment_rows = 0;
  uint64_t row_bytes = 0;
  uint64_t rows_online = 0;  // the pool's capacity now
  uint64_t reserved_bytes = 0;  // its index metadata, charged to the node cap
  SlotIndex::Counts index;
  std::vector<PoolMemberSnapshot> members;  // active and draining
};

class Pool {
 public:
  // A pool shaped after its creator's spec and geometry, its index metadata (MetadataBytesFor)
  // charged to `budget` first. INVALID_ARGUMENT for a bad name or model identity, or a geometry
  // an index cannot number max_members times; RESOURCE_EXHAUSTED when the node cap is reached.
  static absl::StatusOr<std::shared_ptr<Pool>> Create(const common::EngineSpec& creator,
                                                      const common::Geometry& geometry,
                                                      uint32_t owner_uid,
                                                      const PoolOptions& options,
                                                      MemoryBudget* budget,
                                                      DeferredRelease* release);
  // What a pool of that shape costs in index metadata (charged before it exists).
  static uint64_t MetadataBytesFor(const common::Geometry& geometry, const PoolOptions& options);
  // INVALID_ARGUMENT unless `name` is 1..128 of [A-Za-z0-9._-] and the identity 1..1024 bytes.
  static absl::Status CheckNames(const common::EngineSpec& spec);
  ~Pool() = default;
  Pool(const Pool&) = delete;
  Pool& operator=(const Pool&) = delete;

  const std::string& name() const { return name_; }
  uint32_t owner_uid() const { return owner_uid_; }
  SlotIndex& index() { return *index_; }

  // Whether `spec` (geometry `geometry`) may join, in this order: PERMISSION_DENIED (caller;
  // null = in-process, not checked), FAILED_PRECONDITION naming the first differing field,
  // RESOURCE_EXHAUSTED when every member slot is taken or still draining. Changes nothing.
  absl::Status CheckJoin(const Caller* caller, const common::EngineSpec& spec,
                         const common::Geometry& geometry) const;
  // Rows of a member's region usable now (populated and registered: serve while pinning).
  using ReadyRows = std::function<uint64_t()>;
  // Adds a member whose region is `region_base` (geometry's capacity bytes; kept alive by
  // `keepalive` until its segment drained after Leave). Its segment's rows come online as
  // `ready_rows` says (asked now and at every Maintain; it must stay callable while the
  // keepalive is held and take no lock of the pool's). Returns its member tag (= segment).
  // Errors as CheckJoin's last (a slot may have been taken since).
  absl::StatusOr<uint32_t> Join(const std::string& engine_key, std::shared_ptr<void> keepalive,
                                uint8_t* region_base, ReadyRows ready_rows);
  // The member leaves: its segment goes offline (idempotent).
  void Leave(uint32_t member);

  // The page layout of the pool's workers: the first worker fixes it; FAILED_PRECONDITION
  // naming "page layout" when another member's worker splits its bytes differently.
  absl::Status CheckLayout(const std::vector<uint64_t>& pages);

  // The region base of segment `segment` and a reference that keeps it mapped, for a copy into
  // or out of its rows. Only valid for rows a copy guard (index.copies().Begin) admitted: such a
  // segment is online or still draining, so it is always here. CHECK-fails otherwise.
  uint8_t* SegmentBase(uint32_t segment, std::shared_ptr<void>* keepalive) const;

  // Brings rows of members' regions that became ready online, releases the keepalives of
  // drained segments; true when the pool is empty (no member, nothing draining).
  bool Maintain();
  // Drops every keepalive (daemon shutdown: the engines are closed).
  void Clear();

  PoolSnapshot Snapshot() const;

  // The pool's link to the node's tiers (tier_link.h), made by the first member that asks and
  // shared by all: one namespace for the pool (tier_namespace.h). `self` is this pool. Null when
  // no tier holds rows of the pool's size.
  std::shared_ptr<TierLink> LinkTier(TierManager* tiers, const std::shared_ptr<Pool>& self);

 private:
  struct Segment {
    std::string engine;
    std::shared_ptr<void> keepalive;  // null: the slot is free
    uint8_t* base = nullptr;
    ReadyRows ready_rows;
    bool draining = false;
  };

  Pool(const common::EngineSpec& creator, const common::Geometry& geometry, uint32_t owner_uid,
       uint32_t max_members, MemoryReservation reservation, std::unique_ptr<SlotIndex> index,
       DeferredRelease* release);

  const std::string name_;
  const common::EngineSpec creator_;  // its member lists say who may join
  const common::Geometry geometry_;   // the members' geometry
  const uint32_t owner_uid_;
  MemoryReservation reservation_;  // the index's metadata
  const std::unique_ptr<SlotIndex> index_;
  DeferredRelease* const release_;

  mutable absl::Mutex mu_;
  std::vector<Segment> segments_ ABSL_GUARDED_BY(mu_);
  std::vector<uint64_t> layout_ ABSL_GUARDED_BY(mu_);  // empty until a worker fixed it
  std::shared_ptr<TierLink> tier_link_ ABSL_GUARDED_BY(mu_);
};

}  // namespace kvoffload::daemon

#endif  // KVOFFLOAD_DAEMON_POOL_POOL_H_
