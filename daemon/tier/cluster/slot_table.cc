#include "daemon/tier/cluster/slot_table.h"

#include <algorithm>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace kvoffload::tier::cluster {

absl::StatusOr<SlotTable> SlotTable::Build(const std::vector<SlotRange>& ranges) {
  SlotTable t;
  t.owner_.fill(-1);
  for (const SlotRange& r : ranges) {
    if (r.first < 0 || r.last >= kClusterSlots || r.first > r.last) {
      return absl::InvalidArgumentError(
          absl::StrCat("slot range ", r.first, "-", r.last, " is not within 0-16383"));
    }
    auto it = std::find(t.masters_.begin(), t.masters_.end(), r.master);
    const auto index = static_cast<int16_t>(it - t.masters_.begin());
    if (it == t.masters_.end()) t.masters_.push_back(r.master);
    std::fill(t.owner_.begin() + r.first, t.owner_.begin() + r.last + 1, index);
  }
  return t;
}

const NodeAddress* SlotTable::owner(uint16_t slot) const {
  const int16_t i = owner_[slot % kClusterSlots];
  return i < 0 ? nullptr : &masters_[i];
}

int SlotTable::covered_slots() const {
  return static_cast<int>(std::count_if(owner_.begin(), owner_.end(),
                                        [](int16_t i) { return i >= 0; }));
}

std::optional<Redirect> ParseRedirect(absl::string_view error) {
  std::vector<absl::string_view> words = absl::StrSplit(error, ' ', absl::SkipEmpty());
  if (words.size() != 3) return std::nullopt;
  Redirect r;
  if (words[0] == "MOVED") {
    r.kind = Redirect::kMoved;
  } else if (words[0] == "ASK") {
    r.kind = Redirect::kAsk;
  } else {
    return std::nullopt;
  }
  int slot = 0;
  if (!absl::SimpleAtoi(words[1], &slot) || slot < 0 || slot >= kClusterSlots) return std::nullopt;
  r.slot = static_cast<uint16_t>(slot);
  absl::StatusOr<NodeAddress> target = ParseHostPort(words[2]);
  if (!target.ok()) return std::nullopt;
  r.target = *std::move(target);
  return r;
}

}  // namespace kvoffload::tier::cluster
