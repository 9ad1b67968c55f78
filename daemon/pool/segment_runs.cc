#include "daemon/pool/segment_runs.h"

#include <algorithm>

namespace kvoffload::daemon {

std::vector<SegmentRuns> SplitBySegment(const std::vector<CopyRun>& runs,
                                        uint64_t segment_blocks) {
  std::vector<SegmentRuns> out;
  for (const CopyRun& run : runs) {
    uint64_t gpu = run.gpu_block, block = run.region_block, left = run.num_blocks;
    while (left > 0) {
      const uint64_t segment = block / segment_blocks;
      const uint64_t first = segment * segment_blocks;
      const uint64_t take = std::min(left, first + segment_blocks - block);
      auto it = std::find_if(out.begin(), out.end(),
                             [&](const SegmentRuns& s) { return s.segment == segment; });
      if (it == out.end()) {
        out.push_back(SegmentRuns{static_cast<uint32_t>(segment), {}});
        it = out.end() - 1;
      }
      AppendRun(&it->runs, CopyRun{gpu, block - first, take});
      gpu += take;
      block += take;
      left -= take;
    }
  }
  return out;
}

}  // namespace kvoffload::daemon
