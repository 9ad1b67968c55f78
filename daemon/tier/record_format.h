// The disk tier's on-disk record: one 4 KiB header block, then the payload (a row's bytes), in
// one slot of a tier file (docs/disk_tier.md "Format"). The header says whose bytes these are
// and how to check them:
//
//   offset size  field
//   0      8     magic "KVOTREC1"
//   8      4     format version (kRecordFormatVersion)
//   12     4     key length (1..kMaxKeyBytes)
//   16     8     file epoch: the tier file's, from its superblock (a reformatted file's old
//                records do not match and are never read as records)
//   24     8     namespace id: fingerprint of engine or pool + model identity + layout
//   32     8     generation: the tier's write counter; the highest wins when a key is twice on
//                disk; drops of a namespace are ordered against it
//   40     8     payload length in bytes
//   48     8     payload checksum: XXH3-64 of the payload
//   56     256   key bytes (the rest zero)
//   312    8     header checksum: XXH3-64 of bytes 0..311
//   320..4095    zero
//
// Integers are little-endian (the tier is node-local; x86-64 and arm64 both are).
//
// Why XXH3-64 and not CRC32C: it runs at memory speed on one core (a 2 MiB row in ~0.1 ms,
// several times a table-free CRC32C and with no SSE4.2/ARMv8-CRC dispatch to write), it is in
// Debian (libxxhash-dev), and a 64-bit value leaves a random corruption undetected with
// probability 2^-64. The tier only needs detection of torn or stale bytes, not
// error-correction or cryptographic strength.
//
// Thread safety: pure functions.
#ifndef KVOFFLOAD_DAEMON_TIER_RECORD_FORMAT_H_
#define KVOFFLOAD_DAEMON_TIER_RECORD_FORMAT_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace kvoffload::tier {

inline constexpr uint64_t kRecordHeaderBytes = 4096;
inline constexpr uint32_t kRecordFormatVersion = 1;
inline constexpr uint32_t kMaxKeyBytes = 256;

struct RecordHeader {
  uint64_t file_epoch = 0;
  uint64_t namespace_id = 0;
  uint64_t generation = 0;
  uint64_t payload_bytes = 0;
  uint64_t payload_hash = 0;
  std::string key;
};

// XXH3-64 of `bytes` bytes at `data`.
uint64_t PayloadHash(const void* data, uint64_t bytes);

// A namespace id from an identity string (engine or pool id + model + layout); XXH3-64.
uint64_t NamespaceFingerprint(absl::string_view identity);

// Writes the header into `block` (kRecordHeaderBytes bytes, every one of them written).
void EncodeRecordHeader(const RecordHeader& header, void* block);

// Parses a header block. NOT_FOUND when the block holds no record (zero, or another magic:
// never written); DATA_LOSS when it looks like a record but fails a check (version, key length,
// header checksum: a torn or corrupted header).
absl::StatusOr<RecordHeader> DecodeRecordHeader(const void* block);

}  // namespace kvoffload::tier

#endif  // KVOFFLOAD_DAEMON_TIER_RECORD_FORMAT_H_
