#include "daemon/index/index_counts.h"

#include "absl/strings/str_format.h"

namespace kvoffload::daemon {

IndexCounts CountsOf(const IndexState& state) {
  const RowTable& rows = state.rows;
  const SegmentMap& segments = state.segments;
  IndexCounts c;
  c.num_rows = rows.num_rows();
  // A pool parks the rows of an online segment that are not ready yet as it parks an offline
  // segment's: they count as not ready, not offline (online rows add up without them).
  c.rows_not_ready = state.NotReadyRows();
  c.rows_free = rows.rows_free();
  c.rows_quarantined = rows.tally().quarantined;
  c.rows_writing = rows.tally().writing;
  c.rows_ready = rows.tally().ready;
  c.rows_reading = rows.tally().reading;
  c.rows_evictable = rows.rows_evictable();
  c.copies_in_flight = rows.tally().copies_in_flight;
  c.hits = state.hits;
  c.hits_pending = state.hits_pending;
  c.misses = state.misses;
  c.evictions = state.evictions;
  c.commits_pending = state.commits.pending();
  c.commits_dropped = state.commits.dropped();
  c.rows_offline = segments.rows_parked() - segments.NotReadyOnlineRows();
  return c;
}

absl::Status NoRoom(const IndexState& state, absl::string_view operation, uint64_t needed,
                    uint64_t evictable, uint64_t protected_evictable) {
  const RowTable& rows = state.rows;
  const SegmentMap& segments = state.segments;
  const uint64_t not_ready = state.NotReadyRows();
  const uint64_t unprotected = rows.rows_evictable() - protected_evictable;
  return absl::ResourceExhaustedError(absl::StrFormat(
      "%s: %d new keys need rows but only %d can be found (%d free, %d evictable); of %d rows "
      "%d are writing, %d reading, %d ready but busy or part of this request, %d quarantined, "
      "%d not ready yet, %d offline, %d kept for other members' floors (%d rows each)%s",
      operation, needed, rows.rows_free() + evictable, rows.rows_free(), evictable, rows.num_rows(),
      rows.tally().writing, rows.tally().reading, rows.tally().ready - unprotected,
      rows.tally().quarantined, not_ready, segments.rows_parked() - segments.NotReadyOnlineRows(),
      unprotected - evictable, segments.floor_rows(),
      not_ready == 0
          ? ""
          : "; rows not ready yet come online as the region is populated and registered "
            "(seconds per tens of GiB): retry when Stats' rows_not_ready is 0, or after a "
            "wait-until-ready call"));
}

}  // namespace kvoffload::daemon
