#include "daemon/tier/disk_tier.h"

#include <sys/stat.h>

#include <cerrno>
#include <chrono>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/errno_status.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "daemon/tier/aligned_buffer.h"
#include "daemon/tier/record_format.h"

namespace kvoffload::tier {
namespace {

spdlog::logger* Log() {
  static auto* log = common::Logger("tier");
  return log;
}

bool Aligned(const void* p) { return reinterpret_cast<uintptr_t>(p) % kIoAlignment == 0; }

absl::Status CheckKey(absl::string_view key) {
  if (key.empty() || key.size() > kMaxKeyBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("disk tier key of ", key.size(), " bytes; 1..", kMaxKeyBytes, " allowed"));
  }
  return absl::OkStatus();
}

// Header reads per batch while scanning (each 4 KiB); bounds the scan's memory to 4 MiB.
constexpr uint64_t kScanBatch = 1024;

}  // namespace

absl::StatusOr<std::unique_ptr<DiskTier>> DiskTier::Open(DiskTierOptions options,
                                                         std::unique_ptr<BlockIo> io) {
  if (options.paths.empty()) return absl::InvalidArgumentError("disk tier: no path");
  if (options.max_payload_bytes == 0 || options.max_payload_bytes % kIoAlignment != 0) {
    return absl::InvalidArgumentError(absl::StrCat("disk tier: max payload ",
                                                   options.max_payload_bytes,
                                                   " bytes is not a positive multiple of 4096"));
  }
  if (options.queue_depth < 1 || options.write_depth < 1 ||
      options.write_depth > options.queue_depth) {
    return absl::InvalidArgumentError(absl::StrCat("disk tier: queue depth ", options.queue_depth,
                                                   ", write depth ", options.write_depth,
                                                   " (need 1 <= write depth <= queue depth)"));
  }
  const uint64_t slot_bytes = kRecordHeaderBytes + options.max_payload_bytes;
  const uint64_t per_path = options.capacity_bytes / options.paths.size();
  const uint64_t slots_per_file = per_path > kSuperblockBytes
                                      ? (per_path - kSuperblockBytes) / slot_bytes
                                      : 0;
  if (slots_per_file == 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "disk tier: ", options.capacity_bytes, " bytes over ", options.paths.size(),
        " paths holds no slot of ", slot_bytes, " bytes per path"));
  }
  const auto files = static_cast<uint32_t>(options.paths.size());
  std::unique_ptr<DiskTier> tier(
      new DiskTier(std::move(options), std::move(io), files, slots_per_file));
  RETURN_IF_ERROR(tier->OpenFiles());
  RETURN_IF_ERROR(tier->ScanHeaders());
  tier->scheduler_ = std::make_unique<IoScheduler>(*tier->io_, tier->options_.queue_depth,
                                                   tier->options_.write_depth);
  const DiskTierStats s = tier->stats();
  Log()->info(
      "disk tier open ({}): {} files, {} slots of {} bytes, {} records restored in {:.3f} s "
      "({} torn headers, {} skipped, {} files formatted)",
      std::string(tier->io_->name()), files, s.capacity_slots, s.slot_bytes, s.records,
      s.scan_seconds, s.scan_torn_headers, s.scan_skipped, s.files_formatted);
  return tier;
}

DiskTier::DiskTier(DiskTierOptions options, std::unique_ptr<BlockIo> io, uint32_t files,
                   uint64_t slots_per_file)
    : options_(std::move(options)),
      slot_bytes_(kRecordHeaderBytes + options_.max_payload_bytes),
      drops_path_(options_.paths[0] + "/kvtier.drops"),
      io_(std::move(io)),
      map_(files, slots_per_file) {
  files_.resize(files);
  for (uint32_t i = 0; i < files; ++i) {
    files_[i].geometry = TierFileGeometry{slot_bytes_, slots_per_file, i, files};
  }
}

DiskTier::~DiskTier() {
  scheduler_.reset();  // waits for in-flight I/O and its callbacks
  for (File& f : files_) {
    if (f.file.fd >= 0) io_->CloseFile(f.file.fd);
  }
}

absl::Status DiskTier::OpenFiles() {
  absl::MutexLock lock(&mu_);
  bool force_format = false;
  absl::StatusOr<DropTable> drops = LoadDrops(drops_path_);
  if (!drops.ok()) {
    // Which namespaces were dropped is unknown: no record can be trusted to be alive.
    Log()->error("disk tier: {}; formatting every tier file", drops.status().ToString());
    force_format = true;
    drops = DropTable{};
  }
  drops_ = *std::move(drops);
  for (File& f : files_) {
    const std::string& dir = options_.paths[f.geometry.file_index];
    if (mkdir(dir.c_str(), 0750) != 0 && errno != EEXIST) {
      return common::ErrnoStatus(errno, "mkdir " + dir);
    }
    const std::string path = absl::StrCat(dir, "/kvtier.", f.geometry.file_index, ".dat");
    ASSIGN_OR_RETURN(f.file, OpenTierFile(*io_, path, f.geometry, force_format));
    if (f.file.formatted) ++stats_.files_formatted;
    if (f.file.extended) Log()->warn("disk tier: {} was truncated; re-extended", path);
  }
  if (force_format) RETURN_IF_ERROR(SaveDrops(drops_path_, drops_));
  return absl::OkStatus();
}

absl::Status DiskTier::ScanHeaders() {
  const auto start = std::chrono::steady_clock::now();
  std::vector<std::pair<uint64_t, SlotMap::Record>> found;
  uint64_t max_generation = 0;
  absl::MutexLock lock(&mu_);
  for (const auto& [ns, gen] : drops_) max_generation = std::max(max_generation, gen);
  DropTable still_needed;
  const uint64_t total = map_.total_slots();
  AlignedBuffer buffer(kScanBatch * kRecordHeaderBytes);
  for (uint64_t first = 0; first < total; first += kScanBatch) {
    const uint64_t n = std::min(kScanBatch, total - first);
    // Counted under a mutex rather than absl::BlockingCounter: the TSan build sees absl::Mutex's
    // edges (third_party/tsan) but not the counter's atomics, and every header read must be
    // ordered before the scan reads its buffer.
    absl::Mutex done_mu;
    uint64_t left = n;
    std::vector<absl::Status> results(n);
    for (uint64_t i = 0; i < n; ++i) {
      const uint64_t slot = first + i;
      iovec v{buffer.data() + i * kRecordHeaderBytes, kRecordHeaderBytes};
      io_->Submit(IoRequest::Read(slot_fd(slot), slot_offset(slot), {v}),
                  [&results, &done_mu, &left, i](absl::StatusOr<uint64_t> bytes) {
                    absl::MutexLock done(&done_mu);
                    if (!bytes.ok()) {
                      results[i] = bytes.status();
                    } else if (*bytes != kRecordHeaderBytes) {
                      results[i] = absl::DataLossError("short header read");
                    }
                    --left;
                  });
    }
    done_mu.LockWhen(absl::Condition(+[](uint64_t* l) { return *l == 0; }, &left));
    done_mu.Unlock();
    for (uint64_t i = 0; i < n; ++i) {
      RETURN_IF_ERROR(results[i]);  // a device error at open: the tier does not start
      const uint64_t slot = first + i;
      absl::StatusOr<RecordHeader> h = DecodeRecordHeader(buffer.data() + i * kRecordHeaderBytes);
      if (absl::IsNotFound(h.status())) continue;
      if (!h.ok()) {
        ++stats_.scan_torn_headers;
        continue;
      }
      if (h->file_epoch != files_[map_.file_of(slot)].file.epoch) {
        ++stats_.scan_skipped;
        continue;
      }
      max_generation = std::max(max_generation, h->generation);
      if (IsDropped(drops_, h->namespace_id, h->generation)) {
        still_needed[h->namespace_id] = drops_[h->namespace_id];
        ++stats_.scan_skipped;
        continue;
      }
      if (h->payload_bytes == 0 || h->payload_bytes > options_.max_payload_bytes ||
          h->payload_bytes % kIoAlignment != 0) {
        ++stats_.scan_skipped;
        continue;
      }
      found.emplace_back(slot, SlotMap::Record{h->namespace_id, std::move(h->key), h->generation,
                                               h->payload_bytes});
    }
  }
  stats_.scan_records = map_.Restore(std::move(found));
  next_generation_ = max_generation + 1;
  if (still_needed.size() != drops_.size()) {
    // Drops whose records are all gone (overwritten or reformatted) need not be remembered.
    drops_ = std::move(still_needed);
    RETURN_IF_ERROR(SaveDrops(drops_path_, drops_));
  }
  stats_.scan_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return absl::OkStatus();
}

uint64_t DiskTier::slot_offset(uint64_t slot) const {
  return files_[slot % files_.size()].geometry.slot_offset(slot / files_.size());
}

int DiskTier::slot_fd(uint64_t slot) const { return files_[slot % files_.size()].file.fd; }

absl::Status DiskTier::Write(uint64_t namespace_id, absl::string_view key, const void* payload,
                             uint64_t bytes, WriteDone done) {
  RETURN_IF_ERROR(CheckKey(key));
  if (!Aligned(payload) || bytes == 0 || bytes % kIoAlignment != 0 ||
      bytes > options_.max_payload_bytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "disk tier write of ", bytes, " bytes at ", absl::Hex(payload),
        ": needs a 4096-aligned pointer and a length that is a multiple of 4096, at most ",
        options_.max_payload_bytes));
  }
  uint64_t slot = 0;
  RecordHeader header;
  {
    absl::MutexLock lock(&mu_);
    ASSIGN_OR_RETURN(slot, map_.Allocate());
    header.generation = next_generation_++;
  }
  header.file_epoch = files_[slot % files_.size()].file.epoch;
  header.namespace_id = namespace_id;
  header.payload_bytes = bytes;
  header.payload_hash = PayloadHash(payload, bytes);
  header.key = std::string(key);
  auto block = std::make_shared<AlignedBuffer>(kRecordHeaderBytes);
  EncodeRecordHeader(header, block->data());
  std::vector<iovec> iov = {block->iov(), {const_cast<void*>(payload), bytes}};
  scheduler_->Submit(
      IoRequest::Write(slot_fd(slot), slot_offset(slot), std::move(iov), options_.write_through),
      [this, slot, block, header = std::move(header),
       done = std::move(done)](absl::StatusOr<uint64_t> written) mutable {
        absl::Status status;
        if (written.ok() && *written != kRecordHeaderBytes + header.payload_bytes) {
          status = absl::DataLossError(absl::StrCat("disk tier: short write, ", *written, " of ",
                                                    kRecordHeaderBytes + header.payload_bytes));
        } else if (!written.ok()) {
          status = written.status();
        }
        {
          absl::MutexLock lock(&mu_);
          if (!status.ok()) {
            map_.Abort(slot);
            ++stats_.write_errors;
          } else if (IsDropped(drops_, header.namespace_id, header.generation)) {
            map_.Abort(slot);
            ++stats_.writes_superseded;
            status = absl::AbortedError("disk tier: namespace dropped during the write");
          } else {
            const uint64_t generation = header.generation;
            if (!map_.Commit(slot, SlotMap::Record{header.namespace_id, std::move(header.key),
                                                   generation, header.payload_bytes})) {
              ++stats_.writes_superseded;
            }
            ++stats_.writes_ok;
            stats_.bytes_written += header.payload_bytes;
          }
        }
        done(std::move(status));
      });
  return absl::OkStatus();
}

absl::Status DiskTier::Read(uint64_t namespace_id, absl::string_view key, void* dst,
                            uint64_t capacity, ReadDone done) {
  RETURN_IF_ERROR(CheckKey(key));
  if (!Aligned(dst)) {
    return absl::InvalidArgumentError("disk tier read: destination is not 4096-aligned");
  }
  SlotMap::Location loc;
  {
    absl::MutexLock lock(&mu_);
    std::optional<SlotMap::Location> pinned = map_.Pin(namespace_id, key);
    if (!pinned) {
      ++stats_.read_misses;
      return absl::NotFoundError("disk tier: no record of the key");
    }
    loc = *pinned;
    if (loc.payload_bytes > capacity) {
      map_.Unpin(loc.slot);
      return absl::InvalidArgumentError(absl::StrCat("disk tier read: record of ",
                                                     loc.payload_bytes, " bytes, destination of ",
                                                     capacity));
    }
  }
  auto block = std::make_shared<AlignedBuffer>(kRecordHeaderBytes);
  std::vector<iovec> iov = {block->iov(), {dst, loc.payload_bytes}};
  const uint64_t epoch = files_[loc.slot % files_.size()].file.epoch;
  scheduler_->Submit(
      IoRequest::Read(slot_fd(loc.slot), slot_offset(loc.slot), std::move(iov)),
      [this, loc, block, epoch, namespace_id, key = std::string(key), dst,
       done = std::move(done)](absl::StatusOr<uint64_t> read) {
        absl::Status status;
        if (!read.ok()) {
          status = read.status();
        } else if (*read != kRecordHeaderBytes + loc.payload_bytes) {
          status = absl::DataLossError(absl::StrCat("short read, ", *read, " bytes"));
        } else {
          absl::StatusOr<RecordHeader> h = DecodeRecordHeader(block->data());
          if (!h.ok()) {
            status = absl::DataLossError(h.status().message());
          } else if (h->file_epoch != epoch || h->namespace_id != namespace_id || h->key != key ||
                     h->generation != loc.generation || h->payload_bytes != loc.payload_bytes) {
            status = absl::DataLossError("record header names another record");
          } else if (PayloadHash(dst, loc.payload_bytes) != h->payload_hash) {
            status = absl::DataLossError("payload checksum mismatch");
          }
        }
        const bool corrupt = absl::IsDataLoss(status);
        {
          absl::MutexLock lock(&mu_);
          if (corrupt) {
            map_.Forget(loc.slot, loc.generation);
            ++stats_.read_corrupt;
          } else if (!status.ok()) {
            ++stats_.read_errors;
          } else {
            ++stats_.reads_ok;
            stats_.bytes_read += loc.payload_bytes;
          }
          map_.Unpin(loc.slot);
        }
        if (corrupt) {
          Log()->warn("disk tier: slot {} (generation {}) not served: {}", loc.slot,
                      loc.generation, std::string(status.message()));
          status = absl::DataLossError(absl::StrCat("disk tier: ", status.message()));
        }
        if (status.ok()) {
          done(loc.payload_bytes);
        } else {
          done(std::move(status));
        }
      });
  return absl::OkStatus();
}

bool DiskTier::Contains(uint64_t namespace_id, absl::string_view key) const {
  absl::MutexLock lock(&mu_);
  return map_.Find(namespace_id, key).has_value();
}

std::vector<bool> DiskTier::ContainsAll(uint64_t namespace_id,
                                        const std::vector<std::string>& keys) {
  std::vector<bool> found(keys.size());
  absl::MutexLock lock(&mu_);
  for (size_t i = 0; i < keys.size(); ++i) found[i] = map_.Find(namespace_id, keys[i]).has_value();
  return found;
}

absl::Status DiskTier::DropNamespace(uint64_t namespace_id) {
  absl::MutexLock lock(&mu_);
  const uint64_t generation = next_generation_++;
  drops_[namespace_id] = generation;
  const uint64_t dropped = map_.DropNamespace(namespace_id);
  Log()->info("disk tier: namespace {:016x} dropped ({} records)", namespace_id, dropped);
  return SaveDrops(drops_path_, drops_);
}

DiskTierStats DiskTier::stats() const {
  absl::MutexLock lock(&mu_);
  DiskTierStats s = stats_;
  s.capacity_slots = map_.total_slots();
  s.slot_bytes = slot_bytes_;
  s.records = map_.records();
  s.evictions = map_.evictions();
  return s;
}

RecordStoreStats DiskTier::record_stats() const {
  const DiskTierStats d = stats();
  RecordStoreStats s;
  s.capacity_bytes = d.capacity_slots * d.slot_bytes;
  s.used_bytes = d.records * d.slot_bytes;
  s.records = d.records;
  s.writes_ok = d.writes_ok;
  s.write_errors = d.write_errors;
  s.bytes_written = d.bytes_written;
  s.reads_ok = d.reads_ok;
  s.read_misses = d.read_misses;
  s.read_corrupt = d.read_corrupt;
  s.read_errors = d.read_errors;
  s.bytes_read = d.bytes_read;
  s.evictions = d.evictions;
  const IoScheduler::Counts io = scheduler_->counts();
  s.queue_depth = io.reads_in_flight + io.writes_in_flight + io.reads_waiting + io.writes_waiting;
  return s;
}

}  // namespace kvoffload::tier
