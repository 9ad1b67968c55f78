// Runs: how a job's blocks travel from the service edge to the copy backends. One run is
// `num_blocks` consecutive GPU blocks into (or out of) as many consecutive region blocks, so a
// job of a million consecutive blocks is one value at every stage — the engine, the index's copy
// guards, the descriptor table and the planner — never a per-block list that is merged again.
//
// Region blocks number a slot's blocks across rows: region block b is block b % blocks_per_row of
// row b / blocks_per_row. A row run names rows [first_row, first_row + num_rows) as the index
// guards them, with the ticket they were planned under (0 = not checked).
//
// A plain header of values (no dependencies), shared by daemon/copy, daemon/engine and
// daemon/index, so that neither the index nor the job table depends on the copy backend.
#ifndef KVOFFLOAD_DAEMON_COPY_COPY_RUN_H_
#define KVOFFLOAD_DAEMON_COPY_COPY_RUN_H_

#include <cstdint>
#include <vector>

namespace kvoffload::daemon {

enum class CopyDirection { kStore, kLoad };  // store: GPU → region; load: region → GPU

inline const char* CopyDirectionName(CopyDirection d) {
  return d == CopyDirection::kStore ? "store" : "load";
}

// GPU blocks [gpu_block, gpu_block + num_blocks) ↔ region blocks
// [region_block, region_block + num_blocks) of the worker's slot.
struct CopyRun {
  uint64_t gpu_block = 0;
  uint64_t region_block = 0;  // row × blocks_per_row + block within the row
  uint64_t num_blocks = 0;    // ≥ 1

  bool operator==(const CopyRun& o) const {
    return gpu_block == o.gpu_block && region_block == o.region_block &&
           num_blocks == o.num_blocks;
  }
  bool operator!=(const CopyRun& o) const { return !(*this == o); }
};

// Rows [first_row, first_row + num_rows), each checked against `ticket` (0 = not checked).
struct RowRun {
  uint64_t first_row = 0;
  uint64_t num_rows = 0;  // ≥ 1
  uint32_t ticket = 0;

  bool operator==(const RowRun& o) const {
    return first_row == o.first_row && num_rows == o.num_rows && ticket == o.ticket;
  }
  bool operator!=(const RowRun& o) const { return !(*this == o); }
};

// Appends a run, extending the last one when it continues it on both sides.
inline void AppendRun(std::vector<CopyRun>* runs, const CopyRun& run) {
  if (!runs->empty()) {
    CopyRun& last = runs->back();
    if (last.gpu_block + last.num_blocks == run.gpu_block &&
        last.region_block + last.num_blocks == run.region_block) {
      last.num_blocks += run.num_blocks;
      return;
    }
  }
  runs->push_back(run);
}

// Appends rows, extending the last run when they continue it under the same ticket.
inline void AppendRows(std::vector<RowRun>* rows, const RowRun& run) {
  if (!rows->empty()) {
    RowRun& last = rows->back();
    if (last.ticket == run.ticket && last.first_row + last.num_rows == run.first_row) {
      last.num_rows += run.num_rows;
      return;
    }
  }
  rows->push_back(run);
}

// Σ num_blocks / Σ num_rows.
inline uint64_t CountBlocks(const std::vector<CopyRun>& runs) {
  uint64_t n = 0;
  for (const CopyRun& r : runs) n += r.num_blocks;
  return n;
}
inline uint64_t CountRows(const std::vector<RowRun>& rows) {
  uint64_t n = 0;
  for (const RowRun& r : rows) n += r.num_rows;
  return n;
}

// Explicit lists as runs (tests, tools): row rows[i] takes GPU blocks
// gpu_blocks[i × bpr .. (i + 1) × bpr); consecutive entries merge. The caller guarantees
// gpu_blocks.size() == rows.size() × blocks_per_row.
inline std::vector<CopyRun> RunsOfLists(const std::vector<uint64_t>& gpu_blocks,
                                        const std::vector<uint64_t>& rows,
                                        uint32_t blocks_per_row) {
  std::vector<CopyRun> runs;
  for (size_t i = 0; i < gpu_blocks.size(); ++i) {
    const uint64_t row = rows[i / blocks_per_row];
    AppendRun(&runs, CopyRun{gpu_blocks[i], row * blocks_per_row + i % blocks_per_row, 1});
  }
  return runs;
}

}  // namespace kvoffload::daemon

#endif  // KVOFFLOAD_DAEMON_COPY_COPY_RUN_H_
