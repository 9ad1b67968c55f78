#include "daemon/tier/cluster/cluster_tier.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "daemon/tier/cluster/redis_cluster.h"
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

// Checks one fetched part's header against what the record must be. `total` 0: part 0, whose
// header sets the record's length.
absl::StatusOr<RecordHeader> CheckHeader(const KvValue& v, uint64_t ns, absl::string_view key,
                                         uint64_t part) {
  if (v.bytes.size() < kRecordHeaderBytes) {
    return absl::DataLossError(
        absl::StrCat("part ", part, ": value of ", v.bytes.size(), " bytes, shorter than a header"));
  }
  absl::StatusOr<RecordHeader> h = DecodeRecordHeader(v.bytes.data());
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
  const size_t masters = (*backend)->slot_table()->masters().size();
  absl::StatusOr<std::unique_ptr<ClusterTier>> tier =
      CreateWithBackend(options, *std::move(backend));
  if (tier.ok()) {
    Log()->info(
        "cluster tier: {} masters (seeds {}), key prefix '{}', user '{}', values of at most {} "
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

absl::StatusOr<uint64_t> ClusterTier::DoRead(uint64_t namespace_id, const std::string& key,
                                             char* dst, uint64_t capacity) {
  const absl::Time deadline = absl::Now() + options_.command_timeout;
  const uint64_t first_round = std::min(CeilDiv(capacity, part_bytes_), kMaxFirstRoundParts);
  std::vector<std::string> keys;
  for (uint64_t i = 0; i < first_round; ++i) keys.push_back(ValueKey(namespace_id, key, i));
  std::vector<KvValue> values = backend_->Get(keys, deadline);

  auto forget = [&](absl::Status why) {
    Log()->warn("cluster tier: record {} of namespace {:016x} is corrupt, deleted: {}",
                absl::BytesToHexString(key.substr(0, 32)), namespace_id, std::string(why.message()));
    backend_->Delete(keys, deadline);
    return why;
  };
  if (!values[0].status.ok()) return values[0].status;
  absl::StatusOr<RecordHeader> h0 = CheckHeader(values[0], namespace_id, key, 0);
  if (!h0.ok()) return forget(h0.status());
  const uint64_t total = h0->file_epoch;
  const uint64_t part = h0->payload_bytes;
  if (total == 0 || part == 0 || part > total) {
    return forget(absl::DataLossError(
        absl::StrCat("part 0: record of ", total, " bytes in parts of ", part)));
  }
  if (total > capacity) {
    return absl::InvalidArgumentError(absl::StrCat("cluster tier: record of ", total,
                                                   " bytes, read into ", capacity, " bytes"));
  }
  const uint64_t parts = CeilDiv(total, part);
  if (parts > values.size()) {
    // Written by a node whose max_value_bytes is smaller than this one's: more, smaller parts.
    std::vector<std::string> more;
    for (uint64_t i = values.size(); i < parts; ++i) more.push_back(ValueKey(namespace_id, key, i));
    std::vector<KvValue> rest = backend_->Get(more, deadline);
    keys.insert(keys.end(), more.begin(), more.end());
    for (KvValue& v : rest) values.push_back(std::move(v));
  }
  for (uint64_t i = 0; i < parts; ++i) {
    const KvValue& v = values[i];
    if (!v.status.ok()) {
      if (absl::IsNotFound(v.status)) {
        return absl::NotFoundError(absl::StrCat("part ", i, " of ", parts, " is absent"));
      }
      return v.status;
    }
    absl::StatusOr<RecordHeader> h =
        i == 0 ? *h0 : CheckHeader(v, namespace_id, key, i);
    if (!h.ok()) return forget(h.status());
    const uint64_t offset = i * part;
    const uint64_t length = std::min(part, total - offset);
    if (h->file_epoch != total || h->payload_bytes != length ||
        v.bytes.size() != kRecordHeaderBytes + length) {
      return forget(absl::DataLossError(absl::StrCat(
          "part ", i, ": header says ", h->payload_bytes, " of ", h->file_epoch,
          " bytes, value holds ", v.bytes.size() - kRecordHeaderBytes, "; expected ", length,
          " of ", total)));
    }
    std::memcpy(dst + offset, v.bytes.data() + kRecordHeaderBytes, length);
    if (PayloadHash(dst + offset, length) != h->payload_hash) {
      return forget(absl::DataLossError(absl::StrCat("part ", i, ": payload checksum mismatch")));
    }
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
  absl::MutexLock lock(&mu_);
  RecordStoreStats s = stats_;
  s.queue_depth = static_cast<uint64_t>(in_flight_);
  return s;
}

}  // namespace kvoffload::tier::cluster
