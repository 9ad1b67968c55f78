#include "daemon/index/readiness.h"

#include <algorithm>
#include <iterator>
#include <utility>

namespace kvoffload::daemon {
namespace {

bool ByRow(const RestoredRow& a, const RestoredRow& b) { return a.row < b.row; }

}  // namespace

Readiness::Readiness(uint32_t num_rows, uint64_t ready_rows)
    : num_rows_(num_rows), end_(static_cast<uint32_t>(std::min<uint64_t>(ready_rows, num_rows))) {}

void Readiness::SortParked() { std::sort(parked_.begin() + next_, parked_.end(), ByRow); }

bool Readiness::IsParked(uint32_t row) const {
  return std::binary_search(parked_.begin() + next_, parked_.end(), RestoredRow{row, {}, 0, 0},
                            ByRow);
}

Readiness::Raised Readiness::Raise(uint64_t end) {
  Raised raised;
  raised.from = raised.to = end_;
  const uint32_t new_end = static_cast<uint32_t>(std::min<uint64_t>(end, num_rows_));
  if (new_end <= end_) return raised;
  raised.to = end_ = new_end;
  const size_t first = next_;
  while (next_ < parked_.size() && parked_[next_].row < new_end) ++next_;
  raised.back.assign(std::make_move_iterator(parked_.begin() + first),
                     std::make_move_iterator(parked_.begin() + next_));
  if (next_ == parked_.size()) {
    std::vector<RestoredRow>().swap(parked_);
    next_ = 0;
  }
  return raised;
}

}  // namespace kvoffload::daemon
