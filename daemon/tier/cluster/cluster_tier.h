// ClusterTier: the cluster tier, a RecordStore (record_store.h) on a shared key-value service —
// Redis Cluster through RedisCluster (redis_cluster.h), or any KvBackend (kv_backend.h). Every
// node of a data centre writes its rows there and any node reads them back (docs/cluster_tier.md).
//
//   ASSIGN_OR_RETURN(options.seeds, ParseClusterUrl("redis://10.0.0.5:7000,10.0.0.6:7000"));
//   options.password_file = "/etc/kvoffload/cluster.secret";
//   ASSIGN_OR_RETURN(std::unique_ptr<ClusterTier> tier, ClusterTier::Create(options));
//   RETURN_IF_ERROR(tier->Write(ns, key, row, row_bytes, [](absl::Status s) { ... }));
//
// Keys: "<key_prefix>/<namespace id, 16 hex digits>/<key, hex>/<part>" — content-addressed (the
// key is the block hash), namespaced by the fingerprint of pool/owner + model + layout, and
// without a hash tag, so a namespace's values spread over every slot and master.
//
// Values: a record of n bytes is split into parts of at most `max_value_bytes - 4096` bytes;
// part i is the value "<...>/i": the disk tier's 4 KiB record header (record_format.h) then the
// part's bytes. The header's fields, as this tier fills them:
//   namespace id  the record's namespace        key         the record's key (raw bytes)
//   generation    the part's index i            file epoch  the whole record's length n
//   payload bytes this part's length            payload checksum  XXH3-64 of this part
// A part is served only if its header decodes and its checksum holds, and namespace, key, part
// index, record length and part length are the expected ones, and the part's XXH3 matches; any
// other value is DATA_LOSS (a miss), and the record's values are deleted.
//
// A cluster that cannot be reached — down when the tier was created, or gone later (every node
// killed) — makes the tier one that holds nothing: Writes and Reads are answered UNAVAILABLE
// (counted as write_errors / read_errors), ContainsAll says false, each within its bound and at
// once when there is no node to ask. Nothing waits for the cluster to come back: the client
// asks its seeds again in the background (RedisCluster, max_refresh_backoff), and spills and
// promotions work again once it answers; values lost with a restarted cluster read as NOT_FOUND.
//
// Threads: Write and Read queue the work for the tier's own threads and return at once
// (RESOURCE_EXHAUSTED when `max_queued` are queued or running); `done` runs exactly once, on a
// tier thread, within `command_timeout` of the moment the work started. ContainsAll runs on the
// caller's thread and returns within `lookup_timeout`.
//
// Thread-safe. The destructor answers queued work CANCELLED, waits for running work and its
// callbacks; no call may race with it.
#ifndef KVOFFLOAD_DAEMON_TIER_CLUSTER_CLUSTER_TIER_H_
#define KVOFFLOAD_DAEMON_TIER_CLUSTER_CLUSTER_TIER_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "daemon/tier/cluster/cluster_options.h"
#include "daemon/tier/cluster/kv_backend.h"
#include "daemon/tier/record_store.h"

namespace kvoffload::tier::cluster {

class ClusterTier : public RecordStore {
 public:
  // Validates the options, reads the password file, connects to the cluster (RedisCluster).
  // INVALID_ARGUMENT for bad options; the file system's error for the password file;
  // UNAUTHENTICATED when AUTH is refused (PERMISSION_DENIED: the ACL user may not ask for the
  // slot map). When no seed answers (the cluster down or not yet created): OK — a tier that
  // holds nothing and refuses writes (below) until a seed answers; it connects by itself then
  // (backend_stats().connected says whether it is now).
  static absl::StatusOr<std::unique_ptr<ClusterTier>> Create(const ClusterTierOptions& options);
  // The same on any back end (the seam; tests use an in-memory one).
  static absl::StatusOr<std::unique_ptr<ClusterTier>> CreateWithBackend(
      const ClusterTierOptions& options, std::unique_ptr<KvBackend> backend);
  ~ClusterTier() override;
  ClusterTier(const ClusterTier&) = delete;
  ClusterTier& operator=(const ClusterTier&) = delete;

  // Refusals: INVALID_ARGUMENT (key not 1..256 bytes, no payload), RESOURCE_EXHAUSTED (queue
  // full). `done`: OK when every part is stored; ABORTED when the namespace was dropped after
  // the call; else the first part's error (UNAVAILABLE: node down, timed out, failing over;
  // RESOURCE_EXHAUSTED: the cluster refused for memory, OOM under a noeviction policy).
  absl::Status Write(uint64_t namespace_id, absl::string_view key, const void* payload,
                     uint64_t bytes, WriteDone done) override;

  // Refusals: INVALID_ARGUMENT (key, capacity 0), RESOURCE_EXHAUSTED (queue full). `done`: the
  // record's length; NOT_FOUND when a part is absent (never written, evicted, dropped);
  // DATA_LOSS when a part fails a check (the record's values are deleted; `dst` holds garbage);
  // INVALID_ARGUMENT when the record is longer than `capacity`; UNAVAILABLE when the cluster
  // could not answer in time.
  absl::Status Read(uint64_t namespace_id, absl::string_view key, void* dst, uint64_t capacity,
                    ReadDone done) override;

  // One pipelined EXISTS of each key's part 0, bounded by `lookup_timeout`; a key the cluster
  // could not answer for is false.
  std::vector<bool> ContainsAll(uint64_t namespace_id,
                                const std::vector<std::string>& keys) override;

  // Deletes the namespace's values (SCAN MATCH "<prefix>/<ns>/*" + UNLINK on every master),
  // bounded by max(10 s, command_timeout); best effort: writes of the namespace already started
  // may land after the sweep (later Writes queued before the drop are ABORTED). UNAVAILABLE when
  // a master could not be swept completely.
  absl::Status DropNamespace(uint64_t namespace_id) override;

  absl::string_view tier_name() const override { return "cluster"; }
  // Rows are split into values of max_value_bytes, so any row a region holds fits; 1 GiB bounds
  // one record's parts (a pipeline of at most 1 GiB / part size GETs).
  uint64_t max_record_bytes() const override { return uint64_t{1} << 30; }
  RecordStoreStats record_stats() const override;
  KvBackendStats backend_stats() const { return backend_->backend_stats(); }

  // "<key_prefix>/<ns>/<hex key>/<part>" (tests and tools).
  std::string ValueKey(uint64_t namespace_id, absl::string_view key, uint64_t part) const;
  // Payload bytes per part: max_value_bytes - 4096.
  uint64_t part_bytes() const { return part_bytes_; }

 private:
  struct Task {
    std::function<void()> run;
    std::function<void()> cancel;  // the tier is being destroyed before `run` started
  };

  ClusterTier(const ClusterTierOptions& options, std::unique_ptr<KvBackend> backend);
  absl::Status Enqueue(Task task);
  void WorkerLoop();
  absl::Status DoWrite(uint64_t namespace_id, const std::string& key, const char* payload,
                       uint64_t bytes, uint64_t drops_at_call);
  absl::StatusOr<uint64_t> DoRead(uint64_t namespace_id, const std::string& key, char* dst,
                                  uint64_t capacity);
  // A record written with another part size than this node's: fetched through Get (a copy).
  absl::StatusOr<uint64_t> DoReadCopying(uint64_t namespace_id, const std::string& key,
                                         char* dst, uint64_t capacity, absl::Time deadline);
  // Logs and deletes a corrupt record's first `parts` values; returns `why`.
  absl::Status Forget(uint64_t namespace_id, const std::string& key, uint64_t parts,
                      absl::Status why, absl::Time deadline);
  std::string NamespacePrefix(uint64_t namespace_id) const;
  uint64_t Drops(uint64_t namespace_id) const;

  const ClusterTierOptions options_;
  const uint64_t part_bytes_;
  std::unique_ptr<KvBackend> backend_;

  mutable absl::Mutex mu_;
  std::deque<Task> queue_ ABSL_GUARDED_BY(mu_);
  int in_flight_ ABSL_GUARDED_BY(mu_) = 0;  // queued + running
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  absl::flat_hash_map<uint64_t, uint64_t> drops_ ABSL_GUARDED_BY(mu_);  // namespace -> count
  RecordStoreStats stats_ ABSL_GUARDED_BY(mu_);
  std::vector<std::thread> workers_;
};

}  // namespace kvoffload::tier::cluster

#endif  // KVOFFLOAD_DAEMON_TIER_CLUSTER_CLUSTER_TIER_H_
