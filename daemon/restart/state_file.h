// StateFile: the durable record of one engine's index (durable regions), in a memfd that the service
// manager keeps across daemon restarts next to the engine's region memfd (fd_store.h). It is the
// RowJournal of the engine's SlotIndex: the index writes it under its own lock at the row
// transitions of row_journal.h; a daemon started after a clean restart, an upgrade or a SIGKILL
// maps it again (Adopt) and rebuilds the index from the rows it finds READY.
//
// Layout (little-endian, version 1):
//   [0, 128)       fixed header: magic "KVOSTATE", version, header_bytes, record_bytes,
//                  key_capacity, num_rows, row_bytes, region_bytes, region_epoch, owner_uid,
//                  spec_bytes, fingerprint_bytes, header checksum (FNV-1a 64 over the fixed header
//                  with this field zero, the spec and the fingerprint)
//   [128, 136)     tickets reserved (row_journal.h): end | ~end << 32, one 8-byte store
//   [136, 144)     creation time, ns since the Unix epoch (0 from daemons before it): of two
//                  states of one engine, the newer is restored
//   [256, ...)     the EngineSpec as a serialized kvoffload.v1.EngineSpec (owner's members
//                  included), then the geometry fingerprint; padded to 4 KiB pages
//   last header page  the layout identity: the first worker's per-tensor page sizes, run-length
//                  encoded with a checksum, state word last (RecordLayout); no valid layout, no
//                  restored rows
//   [header_bytes, +num_rows × record_bytes)   one record per row:
//       u32 state (0 FREE, kReadyState READY), u32 ticket, u64 seq (recency), u32 checksum over
//       (region epoch, row, ticket, key), u16 key_size, u16 0, key bytes (key_capacity)
//
// Crash consistency — what a SIGKILL at any instruction leaves: the memfd's pages are shared
// with the fd store's copy, so every store the process executed is what the next process reads
// (no msync, no flush; the kernel discards nothing of a killed process's shared pages). A record
// is READY only after its row's bytes were written and committed (the index calls OnReady then),
// and its state word is written last, with release order, after key, ticket and checksum. A row
// is unpublished (state FREE, release store) before the index can hand it to another key, so
// before any copy may write its bytes again. So a restored row is always one whose bytes were
// complete and committed. A record that is READY with a checksum or a
// field that does not hold can only come from corruption: Adopt refuses the whole file then
// (DATA_LOSS; the engine starts empty with a new region epoch). The recency seq is written alone
// (an aligned 8-byte store) and is not covered by the checksum: a stale seq only moves a row in
// LRU.
//
// Record size: record_bytes = round_up(24 + key_capacity, 8); the default key capacity of 40
// bytes (a 32-byte block hash, like vLLM's, fits with room) makes a record one 64-byte cache
// line: 64 / row_bytes of the region — 1.6 % at 4 KiB rows, 0.39 % at 16 KiB, 0.1 % at 64 KiB,
// 0.003 % at 2 MiB (vLLM's cross-layer blocks). Keys longer than the capacity are served as
// usual but not recorded (their rows come back FREE: a miss after a restart, never a wrong row);
// rows_not_durable() counts them. The capacity is fixed per state file (written in its header)
// from the daemon's --state_key_bytes, so a later daemon with another flag still reads it.
//
// Thread-safety: the RowJournal methods are called under the owning index's lock (which
// serialises them); the accessors are safe from any thread. Ownership: a StateFile owns its memfd
// and mapping (move-only through unique_ptr); the fd store holds its own copy of the descriptor.
#ifndef KVOFFLOAD_DAEMON_RESTART_STATE_FILE_H_
#define KVOFFLOAD_DAEMON_RESTART_STATE_FILE_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/engine_spec.h"
#include "common/geometry.h"
#include "daemon/index/row_journal.h"
#include "daemon/restart/unique_fd.h"

namespace kvoffload::daemon {

// Who an engine is, besides its rows.
struct StateIdentity {
  common::EngineSpec spec;  // with the creator's member_uids / member_gids
  uint32_t owner_uid = 0;
  uint64_t region_epoch = 0;
};

class StateFile final : public RowJournal {
 public:
  static constexpr uint32_t kDefaultKeyCapacity = 40;
  static constexpr uint32_t kMinKeyCapacity = 8;
  static constexpr uint32_t kMaxKeyCapacity = 256;
  static constexpr uint32_t kReadyState = 0x59445252;  // "RRDY": random garbage rarely matches
  static constexpr uint32_t kVersion = 1;

  static uint64_t RecordBytes(uint32_t key_capacity);
  // Bytes of the state file of an engine (header and records), to charge to the node cap.
  // INVALID_ARGUMENT for a key capacity outside [kMinKeyCapacity, kMaxKeyCapacity].
  static absl::StatusOr<uint64_t> BytesFor(const StateIdentity& identity,
                                           const common::Geometry& geometry,
                                           uint32_t key_capacity);

  // A new state file with every row FREE.
  static absl::StatusOr<std::unique_ptr<StateFile>> Create(const StateIdentity& identity,
                                                           const common::Geometry& geometry,
                                                           uint32_t key_capacity);

  struct Adopted {
    std::unique_ptr<StateFile> file;
    StateIdentity identity;
    common::Geometry geometry;  // recomputed from the spec; equal to what the header says
    std::vector<RestoredRow> rows;  // READY records whose checksum and fields hold
    uint32_t next_ticket = 1;
    uint64_t created_ns = 0;  // when the state was created (0: written by an older daemon)
    // The per-tensor page sizes the rows were stored with (RecordLayout); empty when none was
    // recorded, and then `rows` is empty too: without it a worker could split the same bytes
    // differently and read another layout's rows.
    std::vector<uint64_t> layout;
    bool layout_recorded = false;
  };
  // Maps a state file a previous daemon wrote, validates it and collects its READY rows. Takes
  // ownership of `fd` (closed on failure). DATA_LOSS for a truncated or corrupted file (size,
  // magic, header checksum, an unparsable spec) — and for a single record that is neither FREE
  // nor a valid READY record, or READY records without a valid layout page: the engine then
  // starts empty with a new region epoch, never with some rows missing under its old epoch,
  // which tells clients that every row survived (docs/clients.md). No crash leaves such a
  // record (see "Crash consistency"): only memory or file corruption does, and then nothing in
  // the file is trusted. FAILED_PRECONDITION for another version or a spec whose geometry this
  // daemon computes differently from the header.
  static absl::StatusOr<Adopted> Adopt(UniqueFd fd);

  ~StateFile() override;
  StateFile(const StateFile&) = delete;
  StateFile& operator=(const StateFile&) = delete;

  int fd() const { return fd_.get(); }
  uint64_t bytes() const { return bytes_; }
  uint64_t num_rows() const { return num_rows_; }
  uint32_t key_capacity() const { return key_capacity_; }
  uint64_t rows_not_durable() const { return not_durable_.load(std::memory_order_relaxed); }

  // Records the layout identity (the first worker's per-tensor page sizes), once, before any row
  // can be READY (the engine calls it under its lock). Run-length encoded in the last header
  // page (255 runs; a layout of more runs is marked unrecordable, and its rows are not restored).
  void RecordLayout(const std::vector<uint64_t>& pages);

  // RowJournal (under the index's lock).
  void OnFree(uint32_t row) override;
  void OnReady(uint32_t row, absl::string_view key, uint32_t ticket) override;
  void OnTouch(uint32_t row) override;
  void OnTicketsReserved(uint32_t end) override;

  struct Record;  // one row's record (state_file.cc)

 private:
  StateFile(UniqueFd fd, uint8_t* data, uint64_t bytes, uint64_t header_bytes,
            uint32_t record_bytes, uint32_t key_capacity, uint64_t num_rows,
            uint64_t region_epoch);
  Record* RecordOf(uint32_t row) const;

  UniqueFd fd_;
  uint8_t* const data_;
  const uint64_t bytes_;
  const uint64_t header_bytes_;
  const uint32_t record_bytes_;
  const uint32_t key_capacity_;
  const uint64_t num_rows_;
  const uint64_t region_epoch_;
  uint64_t next_seq_ = 1;  // serialised by the index's lock, like every RowJournal call
  std::atomic<uint64_t> not_durable_{0};
};

}  // namespace kvoffload::daemon

#endif  // KVOFFLOAD_DAEMON_RESTART_STATE_FILE_H_
