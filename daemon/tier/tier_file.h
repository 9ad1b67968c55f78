// One tier file: a 4 KiB superblock, then `slots` fixed-size slots of `slot_bytes` (a record
// header block + room for the largest payload), preallocated with fallocate so that writes never
// allocate (no ENOSPC after start, no extent changes on the write path).
//
//   superblock: magic "KVOTFIL1", version, slot_bytes, slots, file index, file count, epoch,
//               XXH3-64 of the preceding bytes.
//
// OpenTierFile keeps a file whose superblock matches the asked geometry (a restart, an upgrade
// that keeps the format) and re-extends a truncated one; any other file (new, another geometry
// or format, a corrupt superblock) is formatted afresh under a new random epoch, which makes
// every record written before it unreadable (records carry their file's epoch).
//
// Thread safety: functions on their arguments only.
#ifndef KVOFFLOAD_DAEMON_TIER_TIER_FILE_H_
#define KVOFFLOAD_DAEMON_TIER_TIER_FILE_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "daemon/tier/block_io.h"
#include "daemon/tier/record_format.h"

namespace kvoffload::tier {

inline constexpr uint64_t kSuperblockBytes = 4096;

struct TierFileGeometry {
  uint64_t slot_bytes = 0;  // kRecordHeaderBytes + the largest payload, a multiple of 4096
  uint64_t slots = 0;
  uint32_t file_index = 0;
  uint32_t file_count = 0;

  uint64_t file_bytes() const { return kSuperblockBytes + slots * slot_bytes; }
  uint64_t slot_offset(uint64_t slot_in_file) const {
    return kSuperblockBytes + slot_in_file * slot_bytes;
  }
};

struct TierFile {
  int fd = -1;
  uint64_t epoch = 0;
  bool formatted = false;  // true: a fresh file; no record of it is readable
  bool extended = false;   // true: it was shorter than its geometry (truncated) and re-extended
};

// Opens (creating) `path` through `io` and makes it a tier file of `geometry`. Errors: the file
// system's refusal (RESOURCE_EXHAUSTED for ENOSPC from fallocate, INVALID_ARGUMENT for no
// O_DIRECT); the fd is closed on error.
// `force_format`: format even a matching file (its records cannot be trusted, e.g. the drop
// list was lost).
absl::StatusOr<TierFile> OpenTierFile(BlockIo& io, const std::string& path,
                                      const TierFileGeometry& geometry, bool force_format = false);

}  // namespace kvoffload::tier

#endif  // KVOFFLOAD_DAEMON_TIER_TIER_FILE_H_
