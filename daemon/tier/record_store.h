// RecordStore: a tier below the pinned host region — a store of whole rows, keyed by
// (namespace id, key), that the daemon spills READY rows to and promotes them back from
// (tier_link.h). The disk tier (disk_tier.h) and the cluster tier implement it.
//
// Contract shared by every tier:
//   - Keys name immutable content within a namespace (block hashes): a tier may keep, lose or
//     bring back any record of a key, and each is correct for it. Namespaces are fingerprints of
//     who may read (engine owner or pool) + model identity + row layout (tier_namespace.h): a
//     record is never read into a row of another namespace.
//   - Write/Read either refuse at once (a non-OK return; `done` is never called) or return OK
//     and call `done` exactly once, later, on a thread of the tier. Callbacks must not block and
//     must not destroy the tier. The caller's memory (payload or destination) must stay valid and
//     untouched until `done` runs.
//   - A record whose integrity header or payload checksum does not match is DATA_LOSS to Read's
//     `done` and never served; the tier forgets it.
//   - Every call is bounded in time: a tier whose backing device or service is slow or down
//     answers misses (ContainsAll false, Read NOT_FOUND/UNAVAILABLE) within its configured bound,
//     never stalling the caller.
//
// Thread-safety: implementations are thread-safe. Ownership: the daemon owns its tiers; they
// outlive every TierLink, and their destructors wait for in-flight I/O and its callbacks.
#ifndef KVOFFLOAD_DAEMON_TIER_RECORD_STORE_H_
#define KVOFFLOAD_DAEMON_TIER_RECORD_STORE_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace kvoffload::tier {

// Counters every tier reports (kvoffloadctl stats, metrics); cumulative unless noted.
struct RecordStoreStats {
  uint64_t capacity_bytes = 0;  // gauge: what the tier may hold (0: bounded elsewhere)
  uint64_t used_bytes = 0;      // gauge: bytes of records held now
  uint64_t records = 0;         // gauge
  uint64_t writes_ok = 0;
  uint64_t write_errors = 0;
  uint64_t bytes_written = 0;
  uint64_t reads_ok = 0;
  uint64_t read_misses = 0;   // NOT_FOUND: not in the tier
  uint64_t read_corrupt = 0;  // DATA_LOSS: header, fingerprint or checksum mismatch
  uint64_t read_errors = 0;   // the device or service failed the read
  uint64_t bytes_read = 0;
  uint64_t evictions = 0;
  uint64_t queue_depth = 0;  // gauge: requests in flight now
  // gauge: 1 while the tier's storage answers, 0 while it cannot be reached (the cluster tier:
  // no node answered the last time its slot map was asked for); a local tier: always 1.
  uint64_t reachable = 1;
};

class RecordStore {
 public:
  using WriteDone = std::function<void(absl::Status)>;
  using ReadDone = std::function<void(absl::StatusOr<uint64_t>)>;

  virtual ~RecordStore() = default;

  // "disk", "cluster": the tier's label in metrics and stats.
  virtual absl::string_view tier_name() const = 0;

  // The largest record (a row) the tier holds; larger rows are not tiered.
  virtual uint64_t max_record_bytes() const = 0;

  // Writes `bytes` at `payload` as the record of (namespace_id, key).
  virtual absl::Status Write(uint64_t namespace_id, absl::string_view key, const void* payload,
                             uint64_t bytes, WriteDone done) = 0;

  // Reads the record of (namespace_id, key) into `dst` (capacity `capacity` bytes); `done` gets
  // the payload length. NOT_FOUND at once for a key the tier knows it lacks.
  virtual absl::Status Read(uint64_t namespace_id, absl::string_view key, void* dst,
                            uint64_t capacity, ReadDone done) = 0;

  // For each key, whether the tier holds a record of it now (a later Read may still miss). A
  // local tier answers from memory; a remote one asks in one batch, bounded by its timeout (keys
  // it could not ask about are false).
  virtual std::vector<bool> ContainsAll(uint64_t namespace_id,
                                        const std::vector<std::string>& keys) = 0;

  // Forgets every record of the namespace (kvoffloadctl drop); none is read again.
  virtual absl::Status DropNamespace(uint64_t namespace_id) = 0;

  virtual RecordStoreStats record_stats() const = 0;
};

}  // namespace kvoffload::tier

#endif  // KVOFFLOAD_DAEMON_TIER_RECORD_STORE_H_
