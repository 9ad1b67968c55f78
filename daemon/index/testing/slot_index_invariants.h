// The slot index's invariant walk, for tests: every row and list is checked against the states,
// counters, member tags and key table (O(num_rows)). It lives in a testonly target, so no
// production binary links it; SlotIndex names SlotIndexInvariants its friend for this alone.
//
//   EXPECT_TRUE(CheckSlotIndexInvariants(*index).ok()) << CheckSlotIndexInvariants(*index);
//
// Thread-safety: takes the index's lock for reading; call it from any thread.
#ifndef KVOFFLOAD_DAEMON_INDEX_TESTING_SLOT_INDEX_INVARIANTS_H_
#define KVOFFLOAD_DAEMON_INDEX_TESTING_SLOT_INDEX_INVARIANTS_H_

#include "absl/status/status.h"
#include "daemon/index/slot_index.h"

namespace kvoffload::daemon {

class SlotIndexInvariants {
 public:
  static absl::Status Check(const SlotIndex& index) { return index.CheckInvariants(); }
};

// OK, or INTERNAL naming the first violation.
absl::Status CheckSlotIndexInvariants(const SlotIndex& index);

}  // namespace kvoffload::daemon

#endif  // KVOFFLOAD_DAEMON_INDEX_TESTING_SLOT_INDEX_INVARIANTS_H_
