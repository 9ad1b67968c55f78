// SplitBySegment: a job's runs (copy_run.h) cut at the pool's segment boundaries. A
// pool's region blocks are numbered across its segments (segment s holds region blocks
// [s × segment_blocks, (s + 1) × segment_blocks)), but each segment is its own member's region,
// so a copy is one CopyJob per segment touched, its runs renumbered to the segment's blocks.
// Pure function; O(runs + segments touched).
#ifndef KVOFFLOAD_DAEMON_POOL_SEGMENT_RUNS_H_
#define KVOFFLOAD_DAEMON_POOL_SEGMENT_RUNS_H_

#include <cstddef>  // copy_run.h uses size_t
#include <cstdint>
#include <vector>

#include "daemon/copy/copy_run.h"

namespace kvoffload::daemon {

struct SegmentRuns {
  uint32_t segment = 0;
  std::vector<CopyRun> runs;  // region blocks local to the segment, in the job's order
};

// Segments in the order the job first touches them. `segment_blocks` >= 1.
std::vector<SegmentRuns> SplitBySegment(const std::vector<CopyRun>& runs, uint64_t segment_blocks);

}  // namespace kvoffload::daemon

#endif  // KVOFFLOAD_DAEMON_POOL_SEGMENT_RUNS_H_
