// SlotMapRefresher without a network: the nodes' answers come from a fake ask function.
#include "daemon/tier/cluster/slot_map_refresher.h"

#include <vector>

#include "absl/status/status.h"
#include "gtest/gtest.h"

namespace kvoffload::tier::cluster {
namespace {

// Seeds a (not answering) and b (answering, but not a cluster), in the order given.
absl::Status LoadFrom(const std::vector<NodeAddress>& seeds) {
  ClusterTierOptions options;
  options.seeds = seeds;
  SlotMapRefresher refresher(options, [](const NodeAddress& node, absl::Time) {
    if (node.host == "a") return absl::StatusOr<Reply>(absl::UnavailableError("refused"));
    return absl::StatusOr<Reply>(
        absl::InternalError("ERR This instance has cluster support disabled"));
  });
  return refresher.Load();
}

TEST(SlotMapRefresherTest, ANodeThatAnsweredWronglyDecidesWhateverTheSeedOrder) {
  const NodeAddress a{"a", 7000};
  const NodeAddress b{"b", 7000};
  EXPECT_EQ(LoadFrom({a, b}).code(), absl::StatusCode::kInternal);
  EXPECT_EQ(LoadFrom({b, a}).code(), absl::StatusCode::kInternal);
  EXPECT_EQ(LoadFrom({a}).code(), absl::StatusCode::kUnavailable);
}

}  // namespace
}  // namespace kvoffload::tier::cluster
