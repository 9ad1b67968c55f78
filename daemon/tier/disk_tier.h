// DiskTier: a node-local store of fixed-size records on NVMe (the disk tier), keyed by
// (namespace id, key), bounded by bytes with LRU eviction. Records move by direct I/O straight
// between the caller's page-aligned memory (the pinned region's rows) and the device: no bounce
// copy, no page cache. Every record carries a header (record_format.h) and a payload checksum; a
// read that fails either check is a miss (DATA_LOSS, counted, logged), never served. The index
// is rebuilt at Open by scanning the record headers, so the tier survives a restart
// (docs/disk_tier.md: what a crash loses).
//
//   DiskTierOptions opt;
//   opt.paths = {"/nvme0/kvtier", "/nvme1/kvtier"};   // striped
//   opt.capacity_bytes = 64ull << 30;
//   opt.max_payload_bytes = geometry.row_bytes;
//   ASSIGN_OR_RETURN(std::unique_ptr<BlockIo> io, MakeBlockIo(opt.queue_depth));
//   ASSIGN_OR_RETURN(std::unique_ptr<DiskTier> tier, DiskTier::Open(opt, std::move(io)));
//   // spill a row (the row must stay untouched until `done` runs):
//   RETURN_IF_ERROR(tier->Write(ns, key, row_ptr, row_bytes, [](absl::Status s) { ... }));
//   // promote (a miss is NOT_FOUND at once; `done` is not called then):
//   RETURN_IF_ERROR(tier->Read(ns, key, row_ptr, row_bytes, [](absl::StatusOr<uint64_t> n) {}));
//
// Write and Read either refuse at once (a non-OK return; `done` is never called) or return OK
// and call `done` exactly once, later, on an I/O thread. Callbacks must not block and must not
// destroy the tier. Payload and destination pointers must be 4096-aligned and lengths multiples
// of 4096 (rows are: common/geometry.h kRowAlignment).
//
// Keys are assumed to name immutable content within a namespace (block hashes): a restart can
// bring back an older record of a key whose newer one was evicted, and that is still correct.
//
// Thread-safe: every method may be called from any thread. The destructor waits for in-flight
// I/O and its callbacks; no call may race with it.
#ifndef KVOFFLOAD_DAEMON_TIER_DISK_TIER_H_
#define KVOFFLOAD_DAEMON_TIER_DISK_TIER_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "daemon/tier/block_io.h"
#include "daemon/tier/io_scheduler.h"
#include "daemon/tier/namespace_drops.h"
#include "daemon/tier/record_store.h"
#include "daemon/tier/slot_map.h"
#include "daemon/tier/tier_file.h"

namespace kvoffload::tier {

struct DiskTierOptions {
  // Directories, one file each (kvtier.<i>.dat); slots are striped round-robin over them.
  std::vector<std::string> paths;
  // Bound on the files' total size; each path gets an equal share of whole slots.
  uint64_t capacity_bytes = 0;
  // The largest payload (a row); a multiple of 4096. A slot is this plus the 4 KiB header.
  // 2 MiB: a 16-token block of a Llama-3-8B-class model (128 KiB per token).
  uint64_t max_payload_bytes = uint64_t{2} << 20;
  // Requests in flight to the device, and how many of them may be writes (IoScheduler).
  int queue_depth = 32;
  int write_depth = 16;
  // true: each record write is RWF_DSYNC (durable through power loss when `done` reports OK);
  // false (default): durable through a daemon crash, not necessarily a power loss.
  bool write_through = false;
};

struct DiskTierStats {
  uint64_t capacity_slots = 0;
  uint64_t slot_bytes = 0;
  uint64_t records = 0;
  uint64_t writes_ok = 0;
  uint64_t write_errors = 0;
  uint64_t writes_superseded = 0;  // a newer write of the key, or a drop, came first
  uint64_t reads_ok = 0;
  uint64_t read_misses = 0;        // NOT_FOUND: not in the tier
  uint64_t read_corrupt = 0;       // DATA_LOSS: header or checksum mismatch; record forgotten
  uint64_t read_errors = 0;        // the device failed the read
  uint64_t bytes_written = 0;      // payload bytes of writes_ok
  uint64_t bytes_read = 0;         // payload bytes of reads_ok
  uint64_t evictions = 0;
  // Open: what the header scan found.
  uint64_t scan_records = 0;
  uint64_t scan_torn_headers = 0;  // a header that fails its own checks
  uint64_t scan_skipped = 0;       // stale epoch, dropped namespace, impossible length
  uint64_t files_formatted = 0;
  double scan_seconds = 0;
};

class DiskTier : public RecordStore {
 public:
  // Opens or creates the tier files and rebuilds the index from their headers. Errors:
  // INVALID_ARGUMENT for bad options, the file system's for files (RESOURCE_EXHAUSTED: ENOSPC).
  static absl::StatusOr<std::unique_ptr<DiskTier>> Open(DiskTierOptions options,
                                                        std::unique_ptr<BlockIo> io);
  ~DiskTier() override;
  DiskTier(const DiskTier&) = delete;
  DiskTier& operator=(const DiskTier&) = delete;

  // Writes `bytes` at `payload` as the record of (namespace_id, key). The payload's checksum is
  // computed on the calling thread before the I/O starts (~0.1 ms per 2 MiB). Refusals:
  // INVALID_ARGUMENT (alignment, length, key), RESOURCE_EXHAUSTED (every slot busy). `done`: OK
  // once the record is on the device and visible to Read; ABORTED when its namespace was
  // dropped meanwhile; else the device's error (RESOURCE_EXHAUSTED for ENOSPC, INTERNAL for EIO,
  // DATA_LOSS for a short write). A failed write loses no other record, and the key's previous
  // record, if any, stays readable.
  absl::Status Write(uint64_t namespace_id, absl::string_view key, const void* payload,
                     uint64_t bytes, WriteDone done) override;

  // Reads the record of (namespace_id, key) into `dst` (capacity `capacity` bytes). Refusals:
  // NOT_FOUND (a miss), INVALID_ARGUMENT (alignment, or capacity below the record's length).
  // `done`: the payload length; DATA_LOSS when the record fails its header or checksum check
  // (the record is forgotten, `dst` holds garbage); the device's error otherwise.
  absl::Status Read(uint64_t namespace_id, absl::string_view key, void* dst, uint64_t capacity,
                    ReadDone done) override;

  bool Contains(uint64_t namespace_id, absl::string_view key) const;
  // Answered from memory, under one lock.
  std::vector<bool> ContainsAll(uint64_t namespace_id,
                                const std::vector<std::string>& keys) override;

  // Forgets every record of the namespace, durably (namespace_drops.h): none is read again,
  // before or after a restart; writes of it in flight are discarded when they finish.
  absl::Status DropNamespace(uint64_t namespace_id) override;

  DiskTierStats stats() const;
  absl::string_view tier_name() const override { return "disk"; }
  uint64_t max_record_bytes() const override { return options_.max_payload_bytes; }
  RecordStoreStats record_stats() const override;
  absl::string_view io_name() const { return io_->name(); }

 private:
  struct File {
    TierFileGeometry geometry;
    TierFile file;
  };

  DiskTier(DiskTierOptions options, std::unique_ptr<BlockIo> io, uint32_t files,
           uint64_t slots_per_file);
  absl::Status OpenFiles();
  absl::Status ScanHeaders();
  uint64_t slot_offset(uint64_t slot) const;
  int slot_fd(uint64_t slot) const;

  const DiskTierOptions options_;
  const uint64_t slot_bytes_;
  const std::string drops_path_;
  std::unique_ptr<BlockIo> io_;
  std::vector<File> files_;  // fixed after Open
  std::unique_ptr<IoScheduler> scheduler_;

  mutable absl::Mutex mu_;
  SlotMap map_ ABSL_GUARDED_BY(mu_);
  DropTable drops_ ABSL_GUARDED_BY(mu_);
  uint64_t next_generation_ ABSL_GUARDED_BY(mu_) = 1;
  DiskTierStats stats_ ABSL_GUARDED_BY(mu_);
};

}  // namespace kvoffload::tier

#endif  // KVOFFLOAD_DAEMON_TIER_DISK_TIER_H_
