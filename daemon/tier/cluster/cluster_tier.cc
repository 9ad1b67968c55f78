#include "daemon/tier/cluster/cluster_tier.h"

#include <algorithm>
#include <cstring>
#include <string>
#include <utility>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "daemon/tier/cluster/redis_cluster.h"
#include "daemon/tier/cluster/slot_table.h"
#include "daemon/tier/record_format.h"

namespace kvoffload::tier::cluster {
namespace {

spdlog::logger* Log() {
  static auto* log = common::Logger("tier");
  return log;
}

absl::Status CheckKey(absl::string_view key) {
  if (key.empty() || key.size() > kMaxKeyBytes) {
    return absl::InvalidArgumentError(absl::StrCat("cluster tier key of ", key.size(),
                                                   " bytes; 1..", kMaxKeyBytes, " allowed"));
  }
  return absl::OkStatus();
}

uint64_t CeilDiv(uint64_t a, uint64_t b) { return (a + b - 1) / b; }

// The most parts Read asks for in its first pipeline, whatever the capacity (a record with more
// parts costs a second round trip).
constexpr uint64_t kMaxFirstRoundParts = 64;

// Decodes part `part`'s header (the value's first 4 KiB at `block`; the value is `value_bytes`
// long) and checks that it belongs to this record and part. DATA_LOSS otherwise.
absl::StatusOr<RecordHeader> CheckHeader(const char* block, uint64_t value_bytes, uint64_t ns,
                                         absl::string_view key, uint64_t part) {
  if (value_bytes < kRecordHeaderBytes) {
    return absl::DataLossError(
        absl::StrCat("part ", part, ": value of ", value_bytes, " bytes, shorter than a header"));
  }
  absl::StatusOr<RecordHeader> h = DecodeRecordHeader(block);
  if (absl::IsNotFound(h.status())) {
    return absl::DataLossError(absl::StrCat("part ", part, ": not a record (no header magic)"));
  }
  if (!h.ok()) return absl::DataLossError(absl::StrCat("part ", part, ": ", h.status().message()));
  if (h->namespace_id != ns) {
    return absl::DataLossError(absl::StrCat("part ", part, ": namespace ",
                                            absl::Hex(h->namespace_id, absl::kZeroPad16),
                                            " in the header (a foreign value)"));
  }
  if (h->key != key) return absl::DataLossError(absl::StrCat("part ", part, ": another key's value"));
  if (h->generation != part) {
    return absl::DataLossError(absl::StrCat("part ", part, ": header says part ", h->generation));
  }
  return h;
}

// The record's shape from part 0's header: its length and its part size.
absl::Status CheckShape(const RecordHeader& h0, uint64_t capacity) {
  if (h0.file_epoch == 0 || h0.payload_bytes == 0 || h0.payload_bytes > h0.file_epoch) {
    return absl::DataLossError(absl::StrCat("part 0: record of ", h0.file_epoch,
                                            " bytes in parts of ", h0.payload_bytes));
  }
  if (h0.file_epoch > capacity) {
    return absl::InvalidArgumentError(absl::StrCat(
        "cluster tier: record of ", h0.file_epoch, " bytes, read into ", capacity, " bytes"));
  }
  return absl::OkStatus();
}

// Checks part i's header fields against the record's shape, and its payload (already at
// `payload`, `value_bytes - 4096` bytes) against the header's checksum.
absl::Status CheckPart(const RecordHeader& h, uint64_t i, uint64_t total, uint64_t part,
                       uint64_t value_bytes, const char* payload) {
  const uint64_t length = std::min(part, total - i * part);
  if (h.file_epoch != total || h.payload_bytes != length ||
      value_bytes != kRecordHeaderBytes + length) {
    return absl::DataLossError(absl::StrCat(
        "part ", i, ": header says ", h.payload_bytes, " of ", h.file_epoch, " bytes, value holds ",
        value_bytes - kRecordHeaderBytes, "; expected ", length, " of ", total));
  }
  if (PayloadHash(payload, length) != h.payload_hash) {
    return absl::DataLossError(absl::StrCat("part ", i, ": payload checksum mismatch"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<ClusterTier>> ClusterTier::Create(
    const ClusterTierOptions& options) {
  absl::Status valid = Validate(options);
  if (!valid.ok()) return valid;
  Credentials credentials;
  credentials.user = options.user;
  if (!options.password_file.empty()) {
    absl::StatusOr<std::string> secret = ReadSecretFile(options.password_file);
    if (!secret.ok()) return secret.status();
    credentials.password = *std::move(secret);
  }
  absl::StatusOr<std::unique_ptr<RedisCluster>> backend =
      RedisCluster::Connect(options, std::move(credentials));
  if (!backend.ok()) return backend.status();
  const std::shared_ptr<const SlotTable> table = (*backend)->slot_table();
  const std::string masters =
      table != nullptr ? absl::StrCat(table->masters().size(), " masters")
                       : "no seed answers yet (empty and refusing writes until one does)";
  absl::StatusOr<std::unique_ptr<ClusterTier>> tier =
      CreateWithBackend(options, *std::move(backend));
  if (tier.ok()) {
    Log()->info(
        "cluster tier: {} (seeds {}), key prefix '{}', user '{}', values of at most {} "
        "bytes, {} threads, {} connections per node",
        masters, options.seeds[0].ToString(), options.key_prefix,
        options.user.empty() ? "default" : options.user, options.max_value_bytes, options.threads,
        options.connections_per_node);
  }
  return tier;
}

absl::StatusOr<std::unique_ptr<ClusterTier>> ClusterTier::CreateWithBackend(
    const ClusterTierOptions& options, std::unique_ptr<KvBackend> backend) {
  absl::Status valid = Validate(options);
  if (!valid.ok()) return valid;
  return std::unique_ptr<ClusterTier>(new ClusterTier(options, std::move(backend)));
}

ClusterTier::ClusterTier(const ClusterTierOptions& options, std::unique_ptr<KvBackend> backend)
    : options_(options),
      part_bytes_(options.max_value_bytes - kRecordHeaderBytes),
      backend_(std::move(backend)) {
  for (int i = 0; i < options_.threads; ++i) workers_.emplace_back([this] { WorkerLoop(); });
}

ClusterTier::~ClusterTier() {
  std::deque<Task> cancelled;
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
    cancelled.swap(queue_);
  }
  for (Task& t : cancelled) {
    t.cancel();
    absl::MutexLock lock(&mu_);
    --in_flight_;
  }
  for (std::thread& w : workers_) w.join();
}

absl::Status ClusterTier::Enqueue(Task task) {
  absl::MutexLock lock(&mu_);
  if (stopping_) return absl::FailedPreconditionError("cluster tier is shutting down");
  if (in_flight_ >= options_.max_queued) {
    return absl::ResourceExhaustedError(
        absl::StrCat("cluster tier: ", in_flight_, " requests in flight (max_queued)"));
  }
  ++in_flight_;
  queue_.push_back(std::move(task));
  return absl::OkStatus();
}

void ClusterTier::WorkerLoop() {
  while (true) {
    Task task;
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(
          +[](ClusterTier* t) ABSL_EXCLUSIVE_LOCKS_REQUIRED(t->mu_) {
            return t->stopping_ || !t->queue_.empty();
          },
          this));
      if (queue_.empty()) return;  // stopping
      task = std::move(queue_.front());
      queue_.pop_front();
    }
    task.run();
    absl::MutexLock lock(&mu_);
    --in_flight_;
  }
}

std::string ClusterTier::NamespacePrefix(uint64_t namespace_id) const {
  return absl::StrCat(options_.key_prefix, "/", absl::Hex(namespace_id, absl::kZeroPad16), "/");
}

std::string ClusterTier::ValueKey(uint64_t namespace_id, absl::string_view key,
                                  uint64_t part) const {
  return absl::StrCat(NamespacePrefix(namespace_id), absl::BytesToHexString(key), "/", part);
}

uint64_t ClusterTier::Drops(uint64_t namespace_id) const {
  absl::MutexLock lock(&mu_);
  auto it = drops_.find(namespace_id);
  return it == drops_.end() ? 0 : it->second;
}

absl::Status ClusterTier::Write(uint64_t namespace_id, absl::string_view key, const void* payload,
                                uint64_t bytes, WriteDone done) {
  absl::Status s = CheckKey(key);
  if (!s.ok()) return s;
  if (payload == nullptr || bytes == 0) {
    return absl::InvalidArgumentError("cluster tier write of no bytes");
  }
  const uint64_t drops_at_call = Drops(namespace_id);
  auto shared_done = std::make_shared<WriteDone>(std::move(done));
  Task task;
  task.run = [this, namespace_id, key = std::string(key),
              payload = static_cast<const char*>(payload), bytes, drops_at_call, shared_done] {
    absl::Status status = DoWrite(namespace_id, key, payload, bytes, drops_at_call);
    {
      absl::MutexLock lock(&mu_);
      if (status.ok()) {
        ++stats_.writes_ok;
        stats_.bytes_written += bytes;
      } else {
        ++stats_.write_errors;
      }
    }
    (*shared_done)(std::move(status));
  };
  task.cancel = [shared_done] {
    (*shared_done)(absl::CancelledError("cluster tier shut down before the write started"));
  };
  return Enqueue(std::move(task));
}

absl::Status ClusterTier::DoWrite(uint64_t namespace_id, const std::string& key,
                                  const char* payload, uint64_t bytes, uint64_t drops_at_call) {
  if (Drops(namespace_id) != drops_at_call) {
    return absl::AbortedError("cluster tier: namespace dropped after the write was queued");
  }
  const absl::Time deadline = absl::Now() + options_.command_timeout;
  const uint64_t parts = CeilDiv(bytes, part_bytes_);
  std::string headers(parts * kRecordHeaderBytes, '\0');
  std::vector<KvPut> puts(parts);
  for (uint64_t i = 0; i < parts; ++i) {
    const uint64_t offset = i * part_bytes_;
    const uint64_t length = std::min(part_bytes_, bytes - offset);
    RecordHeader h;
    h.file_epoch = bytes;
    h.namespace_id = namespace_id;
    h.generation = i;
    h.payload_bytes = length;
    h.payload_hash = PayloadHash(payload + offset, length);
    h.key = key;
    char* block = headers.data() + i * kRecordHeaderBytes;
    EncodeRecordHeader(h, block);
    puts[i].key = ValueKey(namespace_id, key, i);
    puts[i].head = absl::string_view(block, kRecordHeaderBytes);
    puts[i].body = absl::string_view(payload + offset, length);
  }
  // Part 0 last: ContainsAll asks for part 0, so it is true only once every part is stored.
  std::vector<std::vector<KvPut>> rounds;
  if (parts > 1) rounds.emplace_back(puts.begin() + 1, puts.end());
  rounds.push_back({puts[0]});
  for (const std::vector<KvPut>& round : rounds) {
    for (const absl::Status& s : backend_->Put(round, deadline)) {
      if (!s.ok()) return s;
    }
  }
  return absl::OkStatus();
}

absl::Status ClusterTier::Read(uint64_t namespace_id, absl::string_view key, void* dst,
                               uint64_t capacity, ReadDone done) {
  absl::Status s = CheckKey(key);
  if (!s.ok()) return s;
  if (dst == nullptr || capacity == 0) {
    return absl::InvalidArgumentError("cluster tier read into no memory");
  }
  auto shared_done = std::make_shared<ReadDone>(std::move(done));
  Task task;
  task.run = [this, namespace_id, key = std::string(key), dst = static_cast<char*>(dst), capacity,
              shared_done] {
    absl::StatusOr<uint64_t> got = DoRead(namespace_id, key, dst, capacity);
    {
      absl::MutexLock lock(&mu_);
      if (got.ok()) {
        ++stats_.reads_ok;
        stats_.bytes_read += *got;
      } else if (absl::IsNotFound(got.status())) {
        ++stats_.read_misses;
      } else if (absl::IsDataLoss(got.status())) {
        ++stats_.read_corrupt;
      } else {
        ++stats_.read_errors;
      }
    }
    (*shared_done)(std::move(got));
  };
  task.cancel = [shared_done] {
    (*shared_done)(absl::CancelledError("cluster tier shut down before the read started"));
  };
  return Enqueue(std::move(task));
}

absl::Status ClusterTier::Forget(uint64_t namespace_id, const std::string& key, uint64_t parts,
                                 absl::Status why, absl::Time deadline) {
  Log()->warn("cluster tier: record {} of namespace {:016x} is corrupt, deleted: {}",
              absl::BytesToHexString(key.substr(0, 32)), namespace_id, std::string(why.message()));
  std::vector<std::string> keys;
  for (uint64_t i = 0; i < parts; ++i) keys.push_back(ValueKey(namespace_id, key, i));
  backend_->Delete(keys, deadline);
  return why;
}

absl::StatusOr<uint64_t> ClusterTier::DoRead(uint64_t namespace_id, const std::string& key,
                                             char* dst, uint64_t capacity) {
  // Each part's header into `headers`, its payload straight to its place in `dst` (this node's
  // part size). A record written with another part size takes DoReadCopying.
  const absl::Time deadline = absl::Now() + options_.command_timeout;
  const uint64_t placed = CeilDiv(capacity, part_bytes_);
  const uint64_t first_round = std::min(placed, kMaxFirstRoundParts);
  std::string headers(placed * kRecordHeaderBytes, '\0');
  auto gets_for = [&](uint64_t from, uint64_t to) {
    std::vector<KvGetInto> gets(to - from);
    for (uint64_t i = from; i < to; ++i) {
      KvGetInto& g = gets[i - from];
      g.key = ValueKey(namespace_id, key, i);
      g.head = headers.data() + i * kRecordHeaderBytes;
      g.head_bytes = kRecordHeaderBytes;
      g.body = dst + i * part_bytes_;
      g.body_bytes = std::min(part_bytes_, capacity - i * part_bytes_);
    }
    return gets;
  };
  std::vector<absl::StatusOr<uint64_t>> got = backend_->GetInto(gets_for(0, first_round), deadline);
  if (absl::IsOutOfRange(got[0].status())) {
    return DoReadCopying(namespace_id, key, dst, capacity, deadline);  // larger parts
  }
  if (!got[0].ok()) return got[0].status();
  absl::StatusOr<RecordHeader> h0 = CheckHeader(headers.data(), *got[0], namespace_id, key, 0);
  if (!h0.ok()) return Forget(namespace_id, key, first_round, h0.status(), deadline);
  const uint64_t total = h0->file_epoch;
  const uint64_t part = h0->payload_bytes;
  absl::Status shape = CheckShape(*h0, capacity);
  if (absl::IsDataLoss(shape)) return Forget(namespace_id, key, first_round, shape, deadline);
  if (!shape.ok()) return shape;
  if (part != part_bytes_ && part != total) {
    return DoReadCopying(namespace_id, key, dst, capacity, deadline);  // smaller parts
  }
  const uint64_t parts = CeilDiv(total, part);
  if (parts > got.size()) {
    std::vector<absl::StatusOr<uint64_t>> rest =
        backend_->GetInto(gets_for(got.size(), parts), deadline);
    for (auto& r : rest) got.push_back(std::move(r));
  }
  for (uint64_t i = 0; i < parts; ++i) {
    if (absl::IsNotFound(got[i].status())) {
      return absl::NotFoundError(absl::StrCat("part ", i, " of ", parts, " is absent"));
    }
    if (absl::IsOutOfRange(got[i].status())) {
      return Forget(namespace_id, key, parts,
                    absl::DataLossError(absl::StrCat("part ", i, ": value too long")), deadline);
    }
    if (!got[i].ok()) return got[i].status();
    const char* block = headers.data() + i * kRecordHeaderBytes;
    absl::StatusOr<RecordHeader> h =
        i == 0 ? *h0 : CheckHeader(block, *got[i], namespace_id, key, i);
    absl::Status s = h.ok() ? CheckPart(*h, i, total, part, *got[i], dst + i * part) : h.status();
    if (!s.ok()) return Forget(namespace_id, key, parts, s, deadline);
  }
  return total;
}

absl::StatusOr<uint64_t> ClusterTier::DoReadCopying(uint64_t namespace_id,
                                                    const std::string& key, char* dst,
                                                    uint64_t capacity, absl::Time deadline) {
  std::vector<KvValue> values = backend_->Get({ValueKey(namespace_id, key, 0)}, deadline);
  if (!values[0].status.ok()) return values[0].status;
  absl::StatusOr<RecordHeader> h0 =
      CheckHeader(values[0].bytes.data(), values[0].bytes.size(), namespace_id, key, 0);
  if (!h0.ok()) return Forget(namespace_id, key, 1, h0.status(), deadline);
  absl::Status shape = CheckShape(*h0, capacity);
  if (absl::IsDataLoss(shape)) return Forget(namespace_id, key, 1, shape, deadline);
  if (!shape.ok()) return shape;
  const uint64_t total = h0->file_epoch;
  const uint64_t part = h0->payload_bytes;
  const uint64_t parts = CeilDiv(total, part);
  std::vector<std::string> more;
  for (uint64_t i = 1; i < parts; ++i) more.push_back(ValueKey(namespace_id, key, i));
  std::vector<KvValue> rest = backend_->Get(more, deadline);
  for (KvValue& v : rest) values.push_back(std::move(v));
  for (uint64_t i = 0; i < parts; ++i) {
    const KvValue& v = values[i];
    if (absl::IsNotFound(v.status)) {
      return absl::NotFoundError(absl::StrCat("part ", i, " of ", parts, " is absent"));
    }
    if (!v.status.ok()) return v.status;
    absl::StatusOr<RecordHeader> h =
        i == 0 ? *h0 : CheckHeader(v.bytes.data(), v.bytes.size(), namespace_id, key, i);
    const uint64_t length = std::min(part, total - i * part);
    if (h.ok() && v.bytes.size() == kRecordHeaderBytes + length) {
      std::memcpy(dst + i * part, v.bytes.data() + kRecordHeaderBytes, length);
    }
    absl::Status s =
        h.ok() ? CheckPart(*h, i, total, part, v.bytes.size(), dst + i * part) : h.status();
    if (!s.ok()) return Forget(namespace_id, key, parts, s, deadline);
  }
  return total;
}

std::vector<bool> ClusterTier::ContainsAll(uint64_t namespace_id,
                                           const std::vector<std::string>& keys) {
  std::vector<bool> out(keys.size(), false);
  std::vector<std::string> ask;
  std::vector<size_t> where;
  for (size_t i = 0; i < keys.size(); ++i) {
    if (!CheckKey(keys[i]).ok()) continue;
    ask.push_back(ValueKey(namespace_id, keys[i], 0));
    where.push_back(i);
  }
  if (ask.empty()) return out;
  std::vector<absl::StatusOr<bool>> found =
      backend_->Exists(ask, absl::Now() + options_.lookup_timeout);
  for (size_t j = 0; j < found.size(); ++j) out[where[j]] = found[j].ok() && *found[j];
  return out;
}

absl::Status ClusterTier::DropNamespace(uint64_t namespace_id) {
  {
    absl::MutexLock lock(&mu_);
    ++drops_[namespace_id];
  }
  const absl::Time deadline =
      absl::Now() + std::max(absl::Seconds(10), options_.command_timeout);
  absl::StatusOr<uint64_t> deleted = backend_->DeletePrefix(NamespacePrefix(namespace_id), deadline);
  if (!deleted.ok()) {
    Log()->warn("cluster tier: drop of namespace {:016x} incomplete: {}", namespace_id,
                deleted.status().ToString());
    return deleted.status();
  }
  Log()->info("cluster tier: dropped namespace {:016x} ({} values)", namespace_id, *deleted);
  return absl::OkStatus();
}

RecordStoreStats ClusterTier::record_stats() const {
  const bool connected = backend_->backend_stats().connected;
  absl::MutexLock lock(&mu_);
  RecordStoreStats s = stats_;
  s.queue_depth = static_cast<uint64_t>(in_flight_);
  s.reachable = connected ? 1 : 0;
  return s;
}

}  // namespace kvoffload::tier::cluster
