#include "daemon/restart/state_file.h"

#include <errno.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/errno_status.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "kvoffload/v1/kvoffload.pb.h"
#include "proto/spec_convert.h"

namespace kvoffload::daemon {
namespace {

spdlog::logger* StateLog() {
  static spdlog::logger* const log = common::Logger("restart");
  return log;
}

constexpr char kMagic[8] = {'K', 'V', 'O', 'S', 'T', 'A', 'T', 'E'};
constexpr uint64_t kFixedBytes = 128;
constexpr uint64_t kLiveOffset = 128;  // tickets reserved: not in the header checksum
// Creation time (wall clock, ns; 0 in files of daemons before it): which of two states of one
// engine is newer. Not in the header checksum either, so files of older daemons still verify.
constexpr uint64_t kCreatedOffset = 136;
constexpr uint64_t kSpecOffset = 256;
constexpr uint64_t kPage = 4096;
constexpr uint32_t kRecordFixedBytes = 24;
constexpr uint32_t kMaxTicket = (uint32_t{1} << 31) - 1;  // SlotIndex::kMaxTicket
constexpr uint64_t kMaxSpecBytes = 1 << 20;

// The fixed header, at offset 0.
struct Header {
  char magic[8];
  uint32_t version;
  uint32_t header_bytes;
  uint32_t record_bytes;
  uint32_t key_capacity;
  uint64_t num_rows;
  uint64_t row_bytes;
  uint64_t region_bytes;
  uint64_t region_epoch;
  uint32_t owner_uid;
  uint32_t spec_bytes;
  uint32_t fingerprint_bytes;
  uint32_t reserved;
  uint64_t checksum;
};
static_assert(sizeof(Header) <= kFixedBytes, "the fixed header fits its 128 bytes");

uint64_t Fnv1a(const void* data, size_t size, uint64_t h = 1469598103934665603ull) {
  const uint8_t* p = static_cast<const uint8_t*>(data);
  for (size_t i = 0; i < size; ++i) h = (h ^ p[i]) * 1099511628211ull;
  return h;
}

uint64_t HeaderChecksum(const uint8_t* data, const Header& header) {
  Header copy = header;
  copy.checksum = 0;
  uint64_t h = Fnv1a(&copy, sizeof(copy));
  return Fnv1a(data + kSpecOffset, uint64_t{header.spec_bytes} + header.fingerprint_bytes, h);
}

uint64_t RoundUp(uint64_t v, uint64_t to) { return (v + to - 1) / to * to; }

std::string SerializedSpec(const common::EngineSpec& spec) {
  v1::EngineSpec proto;
  SpecToProto(spec, &proto);
  return proto.SerializeAsString();
}

absl::Status CheckKeyCapacity(uint32_t key_capacity) {
  if (key_capacity >= StateFile::kMinKeyCapacity && key_capacity <= StateFile::kMaxKeyCapacity) {
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(absl::StrCat("state key capacity ", key_capacity,
                                                 " is outside [", StateFile::kMinKeyCapacity, ", ",
                                                 StateFile::kMaxKeyCapacity, "] bytes"));
}

// Header size for a spec and fingerprint of these sizes: their pages, then the layout page.
uint64_t HeaderBytes(uint64_t spec_bytes, uint64_t fingerprint_bytes) {
  return RoundUp(kSpecOffset + spec_bytes + fingerprint_bytes, kPage) + kPage;
}

// The layout page (the last page of the header): the first worker's per-tensor page sizes, run-
// length encoded, written once before any row can be READY. The state word is written last.
constexpr uint32_t kLayoutRecorded = 0x5954554c;  // "LUTY"
constexpr uint32_t kLayoutTooLong = 0x474e4f4c;   // "LONG": more runs than the page holds
struct LayoutHeader {
  uint32_t state;
  uint32_t runs;
  uint64_t checksum;  // over runs and the (page, count) pairs
};
constexpr uint64_t kMaxLayoutRuns = (kPage - sizeof(LayoutHeader)) / 16;

uint64_t LayoutChecksum(uint32_t runs, const uint64_t* pairs) {
  return Fnv1a(pairs, uint64_t{runs} * 16, Fnv1a(&runs, sizeof(runs)));
}

// num_rows × record_bytes + header, or nothing when it overflows.
bool TotalBytes(uint64_t header_bytes, uint64_t num_rows, uint64_t record_bytes, uint64_t* out) {
  if (num_rows != 0 && record_bytes > (UINT64_MAX - header_bytes) / num_rows) return false;
  *out = header_bytes + num_rows * record_bytes;
  return true;
}

uint32_t RecordChecksum(uint64_t epoch, uint32_t row, uint32_t ticket, absl::string_view key) {
  uint64_t h = Fnv1a(&epoch, sizeof(epoch));
  h = Fnv1a(&row, sizeof(row), h);
  h = Fnv1a(&ticket, sizeof(ticket), h);
  const uint16_t size = static_cast<uint16_t>(key.size());
  h = Fnv1a(&size, sizeof(size), h);
  h = Fnv1a(key.data(), key.size(), h);
  return static_cast<uint32_t>(h ^ (h >> 32));
}

uint64_t PackTickets(uint32_t end) { return uint64_t{end} | (uint64_t{~end} << 32); }

}  // namespace

struct StateFile::Record {
  uint32_t state;
  uint32_t ticket;
  uint64_t seq;
  uint32_t checksum;
  uint16_t key_size;
  uint16_t reserved;
  // key_capacity bytes of key follow the 24 fixed bytes (KeyBytes).
};
static_assert(sizeof(StateFile::Record) == kRecordFixedBytes, "the record's fixed part");

namespace {
char* KeyBytes(StateFile::Record* r) { return reinterpret_cast<char*>(r) + kRecordFixedBytes; }
}  // namespace

uint64_t StateFile::RecordBytes(uint32_t key_capacity) {
  return RoundUp(kRecordFixedBytes + key_capacity, 8);
}

absl::StatusOr<uint64_t> StateFile::BytesFor(const StateIdentity& identity,
                                             const common::Geometry& geometry,
                                             uint32_t key_capacity) {
  RETURN_IF_ERROR(CheckKeyCapacity(key_capacity));
  const uint64_t header =
      HeaderBytes(SerializedSpec(identity.spec).size(), geometry.Fingerprint().size());
  uint64_t total = 0;
  if (!TotalBytes(header, geometry.num_rows, RecordBytes(key_capacity), &total)) {
    return absl::ResourceExhaustedError("the state of this engine does not fit 64 bits");
  }
  return total;
}

absl::StatusOr<std::unique_ptr<StateFile>> StateFile::Create(const StateIdentity& identity,
                                                             const common::Geometry& geometry,
                                                             uint32_t key_capacity) {
  RETURN_IF_ERROR(CheckKeyCapacity(key_capacity));
  const std::string spec = SerializedSpec(identity.spec);
  const std::string fingerprint = geometry.Fingerprint();
  const uint64_t header_bytes = HeaderBytes(spec.size(), fingerprint.size());
  const uint32_t record_bytes = static_cast<uint32_t>(RecordBytes(key_capacity));
  uint64_t bytes = 0;
  if (spec.size() > kMaxSpecBytes || header_bytes > UINT32_MAX ||
      !TotalBytes(header_bytes, geometry.num_rows, record_bytes, &bytes) ||
      bytes > static_cast<uint64_t>(std::numeric_limits<off_t>::max())) {
    return absl::ResourceExhaustedError(absl::StrCat("engine ", identity.spec.Key(),
                                                     ": its state does not fit a file"));
  }
  const std::string what = absl::StrCat("state of engine ", identity.spec.Key());
  std::string name = absl::StrCat("kvoffload-state:", identity.spec.Key());
  if (name.size() > 249) name.resize(249);
  UniqueFd fd(memfd_create(name.c_str(), MFD_CLOEXEC));
  if (!fd.valid()) return common::ErrnoStatus(errno, absl::StrCat(what, ": memfd_create"));
  if (ftruncate(fd.get(), static_cast<off_t>(bytes)) != 0) {
    return common::ErrnoStatus(errno, absl::StrCat(what, ": ftruncate"));
  }
  void* data = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd.get(), 0);
  if (data == MAP_FAILED) return common::ErrnoStatus(errno, absl::StrCat(what, ": mmap"));
  uint8_t* base = static_cast<uint8_t*>(data);
  // A fresh memfd reads as zeros: every record is FREE already. Only the header is written.
  Header header{};
  std::memcpy(header.magic, kMagic, sizeof(kMagic));
  header.version = kVersion;
  header.header_bytes = static_cast<uint32_t>(header_bytes);
  header.record_bytes = record_bytes;
  header.key_capacity = key_capacity;
  header.num_rows = geometry.num_rows;
  header.row_bytes = geometry.row_bytes;
  header.region_bytes = geometry.capacity_bytes;
  header.region_epoch = identity.region_epoch;
  header.owner_uid = identity.owner_uid;
  header.spec_bytes = static_cast<uint32_t>(spec.size());
  header.fingerprint_bytes = static_cast<uint32_t>(fingerprint.size());
  std::memcpy(base + kSpecOffset, spec.data(), spec.size());
  std::memcpy(base + kSpecOffset + spec.size(), fingerprint.data(), fingerprint.size());
  header.checksum = HeaderChecksum(base, header);
  std::memcpy(base, &header, sizeof(header));
  __atomic_store_n(reinterpret_cast<uint64_t*>(base + kLiveOffset), PackTickets(1),
                   __ATOMIC_RELEASE);
  __atomic_store_n(reinterpret_cast<uint64_t*>(base + kCreatedOffset),
                   static_cast<uint64_t>(absl::GetCurrentTimeNanos()), __ATOMIC_RELEASE);
  return std::unique_ptr<StateFile>(new StateFile(std::move(fd), base, bytes, header_bytes,
                                                  record_bytes, key_capacity, geometry.num_rows,
                                                  identity.region_epoch));
}

absl::StatusOr<StateFile::Adopted> StateFile::Adopt(UniqueFd fd) {
  struct stat st;
  if (fstat(fd.get(), &st) != 0) return common::ErrnoStatus(errno, "state descriptor: fstat");
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  if (!S_ISREG(st.st_mode) || size < kPage) {
    return absl::DataLossError(
        absl::StrCat("state descriptor: ", size, " bytes, less than its header (truncated)"));
  }
  void* data = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd.get(), 0);
  if (data == MAP_FAILED) return common::ErrnoStatus(errno, "state descriptor: mmap");
  uint8_t* base = static_cast<uint8_t*>(data);
  auto unmap = [&](absl::Status s) {
    munmap(data, size);
    return s;
  };
  Header h;
  std::memcpy(&h, base, sizeof(h));
  if (std::memcmp(h.magic, kMagic, sizeof(kMagic)) != 0) {
    return unmap(absl::DataLossError("state descriptor: no KVOSTATE magic (not a state file)"));
  }
  if (h.version != kVersion) {
    return unmap(absl::FailedPreconditionError(absl::StrCat(
        "state descriptor: version ", h.version, ", this daemon reads version ", kVersion)));
  }
  const uint64_t content = kSpecOffset + uint64_t{h.spec_bytes} + h.fingerprint_bytes;
  uint64_t expected = 0;
  if (h.spec_bytes > kMaxSpecBytes || h.fingerprint_bytes > kMaxSpecBytes ||
      h.header_bytes % kPage != 0 || h.header_bytes < content || h.header_bytes > size) {
    return unmap(absl::DataLossError(absl::StrCat("state descriptor: header of ", h.header_bytes,
                                                  " bytes does not hold its spec (corrupted)")));
  }
  if (h.checksum != HeaderChecksum(base, h)) {
    return unmap(absl::DataLossError("state descriptor: header checksum mismatch (corrupted)"));
  }
  if (CheckKeyCapacity(h.key_capacity).ok() == false ||
      h.record_bytes != RecordBytes(h.key_capacity) || h.num_rows == 0 ||
      !TotalBytes(h.header_bytes, h.num_rows, h.record_bytes, &expected) || expected != size) {
    return unmap(absl::DataLossError(absl::StrCat(
        "state descriptor: ", size, " bytes, its header describes ", expected,
        " (", h.num_rows, " records of ", h.record_bytes, " bytes): truncated or corrupted")));
  }
  v1::EngineSpec proto;
  if (!proto.ParseFromArray(base + kSpecOffset, static_cast<int>(h.spec_bytes))) {
    return unmap(absl::DataLossError("state descriptor: the engine spec does not parse"));
  }
  absl::StatusOr<common::EngineSpec> spec = SpecFromProto(proto);
  if (!spec.ok()) return unmap(absl::DataLossError(absl::StrCat(
                                   "state descriptor: engine spec: ", spec.status().message())));
  absl::StatusOr<common::Geometry> geometry = common::ComputeGeometry(*spec);
  const std::string fingerprint(
      reinterpret_cast<const char*>(base + kSpecOffset + h.spec_bytes), h.fingerprint_bytes);
  if (!geometry.ok() || geometry->num_rows != h.num_rows || geometry->row_bytes != h.row_bytes ||
      geometry->capacity_bytes != h.region_bytes || geometry->Fingerprint() != fingerprint) {
    return unmap(absl::FailedPreconditionError(absl::StrCat(
        "state descriptor of engine ", spec->Key(), ": this daemon computes the geometry ",
        geometry.ok() ? geometry->DebugString() : std::string(geometry.status().message()),
        " from its spec, the state was written for ", h.num_rows, " rows of ", h.row_bytes,
        " bytes (", fingerprint, ")")));
  }
  const uint64_t tickets =
      __atomic_load_n(reinterpret_cast<const uint64_t*>(base + kLiveOffset), __ATOMIC_ACQUIRE);
  const uint32_t tickets_end = static_cast<uint32_t>(tickets);
  if (static_cast<uint32_t>(tickets >> 32) != ~tickets_end || tickets_end == 0 ||
      tickets_end > kMaxTicket) {
    return unmap(absl::DataLossError("state descriptor: the ticket reservation is corrupted"));
  }

  Adopted adopted;
  adopted.identity.spec = *std::move(spec);
  adopted.identity.owner_uid = h.owner_uid;
  adopted.identity.region_epoch = h.region_epoch;
  adopted.geometry = *geometry;
  adopted.next_ticket = tickets_end;
  adopted.created_ns =
      __atomic_load_n(reinterpret_cast<const uint64_t*>(base + kCreatedOffset), __ATOMIC_ACQUIRE);
  adopted.file = std::unique_ptr<StateFile>(new StateFile(std::move(fd), base, size,
                                                          h.header_bytes, h.record_bytes,
                                                          h.key_capacity, h.num_rows,
                                                          h.region_epoch));
  StateFile& file = *adopted.file;
  // The layout the rows were stored with. Without a valid one no row may be served (a worker
  // could split the same bytes differently), so READY records refuse the file below.
  bool layout_ok = false;
  bool layout_too_long = false;
  {
    LayoutHeader* lh = reinterpret_cast<LayoutHeader*>(base + h.header_bytes - kPage);
    const uint64_t* pairs = reinterpret_cast<const uint64_t*>(lh + 1);
    const uint32_t state = __atomic_load_n(&lh->state, __ATOMIC_ACQUIRE);
    layout_too_long = state == kLayoutTooLong;
    if (state == kLayoutRecorded && lh->runs >= 1 && lh->runs <= kMaxLayoutRuns &&
        lh->checksum == LayoutChecksum(lh->runs, pairs)) {
      layout_ok = true;
      uint64_t total = 0;
      for (uint32_t i = 0; i < lh->runs && layout_ok; ++i) {
        total += pairs[2 * i + 1];
        if (pairs[2 * i + 1] == 0 || total > (1u << 16)) layout_ok = false;  // tensors per worker
        for (uint64_t n = 0; layout_ok && n < pairs[2 * i + 1]; ++n) {
          adopted.layout.push_back(pairs[2 * i]);
        }
      }
      if (!layout_ok) adopted.layout.clear();
    }
    adopted.layout_recorded = layout_ok;
  }
  uint64_t max_seq = 0;
  uint64_t refused = 0;
  uint64_t in_use = 0;  // records not FREE
  for (uint64_t row = 0; row < h.num_rows; ++row) {
    Record* r = file.RecordOf(static_cast<uint32_t>(row));
    const uint32_t state = __atomic_load_n(&r->state, __ATOMIC_ACQUIRE);
    if (state == 0) continue;
    ++in_use;
    const absl::string_view key(KeyBytes(r), std::min<uint32_t>(r->key_size, h.key_capacity));
    const bool valid = state == kReadyState && r->key_size >= 1 &&
                       r->key_size <= h.key_capacity && r->ticket >= 1 &&
                       r->ticket <= kMaxTicket &&
                       r->checksum == RecordChecksum(h.region_epoch, static_cast<uint32_t>(row),
                                                     r->ticket, key);
    if (!valid || !layout_ok) {
      ++refused;
      continue;
    }
    const uint64_t seq = __atomic_load_n(&r->seq, __ATOMIC_RELAXED);
    max_seq = std::max(max_seq, seq);
    adopted.rows.push_back(RestoredRow{static_cast<uint32_t>(row), std::string(key), r->ticket,
                                       seq});
  }
  if (refused > 0 && layout_too_long) {
    // Not corruption: the layout did not fit its page, so these rows were never durable.
    return absl::FailedPreconditionError(absl::StrCat(
        "state descriptor: the workers' page layout has more than ", kMaxLayoutRuns,
        " runs and was not recorded, so none of its ", in_use, " rows can be served after a "
        "restart: the region is re-created under a new region epoch"));
  }
  if (refused > 0) {
    // Nothing of a corrupted file is trusted (StateFile::Adopt): the engine starts empty under
    // a new region epoch rather than with rows missing under its old one.
    return absl::DataLossError(absl::StrCat(
        "state descriptor: ", refused, " of ", in_use, " row records are corrupted",
        layout_ok ? " (a checksum or field does not hold)" : " (the layout page does not verify)",
        ": no row of it is restored and the region is re-created under a new region epoch"));
  }
  file.next_seq_ = max_seq + 1;
  return adopted;
}

StateFile::StateFile(UniqueFd fd, uint8_t* data, uint64_t bytes, uint64_t header_bytes,
                     uint32_t record_bytes, uint32_t key_capacity, uint64_t num_rows,
                     uint64_t region_epoch)
    : fd_(std::move(fd)),
      data_(data),
      bytes_(bytes),
      header_bytes_(header_bytes),
      record_bytes_(record_bytes),
      key_capacity_(key_capacity),
      num_rows_(num_rows),
      region_epoch_(region_epoch) {}

StateFile::~StateFile() { munmap(data_, bytes_); }

StateFile::Record* StateFile::RecordOf(uint32_t row) const {
  return reinterpret_cast<Record*>(data_ + header_bytes_ + uint64_t{row} * record_bytes_);
}

void StateFile::RecordLayout(const std::vector<uint64_t>& pages) {
  LayoutHeader* lh = reinterpret_cast<LayoutHeader*>(data_ + header_bytes_ - kPage);
  uint64_t* pairs = reinterpret_cast<uint64_t*>(lh + 1);
  __atomic_store_n(&lh->state, 0u, __ATOMIC_RELEASE);
  uint32_t runs = 0;
  for (size_t i = 0; i < pages.size();) {
    size_t j = i;
    while (j < pages.size() && pages[j] == pages[i]) ++j;
    if (runs == kMaxLayoutRuns) {
      // Not recordable: the rows of this engine will not be served after a restart.
      __atomic_store_n(&lh->state, kLayoutTooLong, __ATOMIC_RELEASE);
      return;
    }
    pairs[2 * runs] = pages[i];
    pairs[2 * runs + 1] = j - i;
    ++runs;
    i = j;
  }
  lh->runs = runs;
  lh->checksum = LayoutChecksum(runs, pairs);
  __atomic_store_n(&lh->state, runs == 0 ? 0u : kLayoutRecorded, __ATOMIC_RELEASE);
}

void StateFile::OnFree(uint32_t row) {
  if (row >= num_rows_) return;
  __atomic_store_n(&RecordOf(row)->state, 0u, __ATOMIC_RELEASE);
}

void StateFile::OnReady(uint32_t row, absl::string_view key, uint32_t ticket) {
  if (row >= num_rows_) return;
  Record* r = RecordOf(row);
  // FREE already (the row came from the free list or through OnFree); written again so that the
  // fields below are never read under a READY state word, whatever came before.
  __atomic_store_n(&r->state, 0u, __ATOMIC_RELEASE);
  if (key.empty() || key.size() > key_capacity_) {
    if (not_durable_.fetch_add(1, std::memory_order_relaxed) == 0) {
      // Once per engine: the first such row (the count is in stats and metrics).
      StateLog()->warn("region epoch {:x}: a key of {} bytes is longer than the state's {}-byte "
                       "key capacity (--state_key_bytes): such rows are served but do not "
                       "outlive the daemon (rows_not_durable)",
                       region_epoch_, key.size(), key_capacity_);
    }
    return;
  }
  r->ticket = ticket;
  r->key_size = static_cast<uint16_t>(key.size());
  r->reserved = 0;
  std::memcpy(KeyBytes(r), key.data(), key.size());
  __atomic_store_n(&r->seq, next_seq_++, __ATOMIC_RELAXED);
  r->checksum = RecordChecksum(region_epoch_, row, ticket, key);
  __atomic_store_n(&r->state, kReadyState, __ATOMIC_RELEASE);  // last: publishes the record
}

void StateFile::OnTouch(uint32_t row) {
  if (row >= num_rows_) return;
  __atomic_store_n(&RecordOf(row)->seq, next_seq_++, __ATOMIC_RELAXED);
}

void StateFile::OnTicketsReserved(uint32_t end) {
  __atomic_store_n(reinterpret_cast<uint64_t*>(data_ + kLiveOffset), PackTickets(end),
                   __ATOMIC_RELEASE);
}

}  // namespace kvoffload::daemon
