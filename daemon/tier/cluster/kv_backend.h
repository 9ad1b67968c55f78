// KvBackend: the seam between the cluster tier (cluster_tier.h: records, parts, headers,
// checksums, threads) and a key-value service that stores its values. RedisCluster
// (redis_cluster.h) implements it for Redis Cluster and Valkey (same protocol); a Mooncake or
// other back end implements these five batch calls and reuses everything above them.
//
// Every call takes a batch (the back end pipelines it, grouped per server) and a deadline: it
// returns by then (plus scheduling noise), reporting UNAVAILABLE for any key it could not
// serve in time or because its server is down. It never blocks past the deadline and never
// throws. Results are positional (one per key, in order).
//
// Thread safety: implementations are thread-safe; calls may run concurrently.
#ifndef KVOFFLOAD_DAEMON_TIER_CLUSTER_KV_BACKEND_H_
#define KVOFFLOAD_DAEMON_TIER_CLUSTER_KV_BACKEND_H_

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace kvoffload::tier::cluster {

// One value to store: the concatenation of `head` and `body` (a record header and a slice of
// the caller's row), sent without copying them into one buffer first.
struct KvPut {
  std::string key;
  absl::string_view head;
  absl::string_view body;
};

// One fetched value. status: OK (bytes valid while `owner` lives), NOT_FOUND (no such key), or
// the error that kept it (UNAVAILABLE: down, timed out, cluster failing over).
struct KvValue {
  absl::Status status;
  absl::string_view bytes;
  std::shared_ptr<const void> owner;
};

// One value to fetch into the caller's memory: its first `head_bytes` bytes to `head`, the rest
// to `body` (at most `body_bytes`).
struct KvGetInto {
  std::string key;
  char* head = nullptr;
  size_t head_bytes = 0;
  char* body = nullptr;
  size_t body_bytes = 0;
};

// Counters of the transport (cumulative).
struct KvBackendStats {
  uint64_t connects = 0;          // connections opened
  uint64_t connect_failures = 0;  // refused, timed out, AUTH failed
  uint64_t broken = 0;            // connections dropped after an I/O error or timeout
  uint64_t redirects = 0;         // MOVED + ASK replies followed
  uint64_t refreshes = 0;         // slot maps loaded (CLUSTER SLOTS)
  uint64_t refresh_failures = 0;  // slot-map loads no node answered (tried again, backing off)
  // Whether the service answered the last time it was asked for its layout (RedisCluster: the
  // last slot-map load succeeded). A back end without that notion says true.
  bool connected = true;
};

class KvBackend {
 public:
  virtual ~KvBackend() = default;

  virtual std::vector<absl::Status> Put(const std::vector<KvPut>& puts, absl::Time deadline) = 0;
  virtual std::vector<KvValue> Get(const std::vector<std::string>& keys, absl::Time deadline) = 0;
  // Get, straight into the caller's memory where the back end can (RedisCluster reads large
  // values from the socket into `body` without a copy). Each result: the value's length; NOT_FOUND
  // for no such key; OUT_OF_RANGE when the value is longer than head_bytes + body_bytes (then
  // what the memory holds is undefined); else the error. The default is Get and a copy.
  virtual std::vector<absl::StatusOr<uint64_t>> GetInto(const std::vector<KvGetInto>& gets,
                                                        absl::Time deadline) {
    std::vector<std::string> keys;
    for (const KvGetInto& g : gets) keys.push_back(g.key);
    std::vector<KvValue> values = Get(keys, deadline);
    std::vector<absl::StatusOr<uint64_t>> out;
    for (size_t i = 0; i < gets.size(); ++i) {
      const KvValue& v = values[i];
      const KvGetInto& g = gets[i];
      if (!v.status.ok()) {
        out.push_back(v.status);
      } else if (v.bytes.size() > g.head_bytes + g.body_bytes) {
        out.push_back(absl::OutOfRangeError("value longer than its destination"));
      } else {
        const size_t head = std::min(v.bytes.size(), g.head_bytes);
        std::memcpy(g.head, v.bytes.data(), head);
        std::memcpy(g.body, v.bytes.data() + head, v.bytes.size() - head);
        out.push_back(v.bytes.size());
      }
    }
    return out;
  }
  virtual std::vector<absl::StatusOr<bool>> Exists(const std::vector<std::string>& keys,
                                                   absl::Time deadline) = 0;
  // Deletes each key (absent keys are OK).
  virtual std::vector<absl::Status> Delete(const std::vector<std::string>& keys,
                                           absl::Time deadline) = 0;
  // Deletes every key that starts with `prefix` (no glob characters in it), on every server.
  // Best effort: keys written concurrently may survive; UNAVAILABLE when a server could not be
  // swept completely by the deadline. Returns the number of keys deleted.
  virtual absl::StatusOr<uint64_t> DeletePrefix(absl::string_view prefix,
                                                absl::Time deadline) = 0;

  virtual KvBackendStats backend_stats() const = 0;
};

}  // namespace kvoffload::tier::cluster

#endif  // KVOFFLOAD_DAEMON_TIER_CLUSTER_KV_BACKEND_H_
