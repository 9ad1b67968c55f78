// SlotTable: which master serves each of the 16384 key slots, as CLUSTER SLOTS reported it, and
// the parsing of the cluster's redirect errors (MOVED, ASK). Pure data: SlotMapRefresher
// (slot_map_refresher.h) keeps the current table behind a mutex and replaces it whole on refresh.
//
// Thread safety: immutable once built.
#ifndef KVOFFLOAD_DAEMON_TIER_CLUSTER_SLOT_TABLE_H_
#define KVOFFLOAD_DAEMON_TIER_CLUSTER_SLOT_TABLE_H_

#include <array>
#include <cstdint>
#include <optional>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "daemon/tier/cluster/cluster_options.h"
#include "daemon/tier/cluster/key_slot.h"

namespace kvoffload::tier::cluster {

struct SlotRange {
  int first = 0;  // inclusive
  int last = 0;   // inclusive
  NodeAddress master;
};

class SlotTable {
 public:
  // INVALID_ARGUMENT for a range outside 0..16383 or reversed. Slots no range names have no
  // owner (the cluster is not fully covered): keys there are UNAVAILABLE.
  static absl::StatusOr<SlotTable> Build(const std::vector<SlotRange>& ranges);

  // The master of `slot`, or nullptr when none serves it.
  const NodeAddress* owner(uint16_t slot) const;
  const std::vector<NodeAddress>& masters() const { return masters_; }
  int covered_slots() const;

 private:
  std::vector<NodeAddress> masters_;
  std::array<int16_t, kClusterSlots> owner_{};  // index into masters_, -1: none
};

struct Redirect {
  enum Kind { kMoved, kAsk };
  Kind kind = kMoved;
  uint16_t slot = 0;
  NodeAddress target;
};

// "MOVED <slot> <host>:<port>" / "ASK <slot> <host>:<port>" (an error reply's text); nullopt for
// any other error. An empty host (Redis's "unknown endpoint", ":6379") is nullopt too.
std::optional<Redirect> ParseRedirect(absl::string_view error);

}  // namespace kvoffload::tier::cluster

#endif  // KVOFFLOAD_DAEMON_TIER_CLUSTER_SLOT_TABLE_H_
