// Test helpers: a RecordStore's asynchronous Write/Read awaited on the calling thread (each
// callback counted, so a second call of one is a failure), and reproducible row contents.
#ifndef KVOFFLOAD_DAEMON_TIER_CLUSTER_TESTING_SYNC_CALLS_H_
#define KVOFFLOAD_DAEMON_TIER_CLUSTER_TESTING_SYNC_CALLS_H_

#include <cstdint>
#include <memory>
#include <random>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "daemon/tier/record_store.h"

namespace kvoffload::tier::cluster::testing {

// Bytes of row `seed` (any length): a different pattern per seed.
inline std::string RowBytes(uint64_t seed, size_t bytes) {
  std::string out(bytes, '\0');
  std::mt19937_64 rng(seed * 0x9E3779B97F4A7C15ull + 1);
  for (size_t i = 0; i < bytes; i += 8) {
    const uint64_t v = rng();
    for (size_t j = 0; j < 8 && i + j < bytes; ++j) out[i + j] = static_cast<char>(v >> (8 * j));
  }
  return out;
}

// One callback's outcome; `calls` counts how often it ran.
template <typename T>
struct Outcome {
  absl::Mutex mu;
  int calls ABSL_GUARDED_BY(mu) = 0;
  T value ABSL_GUARDED_BY(mu);

  void Set(T v) {
    absl::MutexLock lock(&mu);
    ++calls;
    value = std::move(v);
  }
  // Waits for the first call; returns its value.
  T Await() {
    absl::MutexLock lock(&mu);
    mu.Await(absl::Condition(
        +[](Outcome* o) ABSL_EXCLUSIVE_LOCKS_REQUIRED(o->mu) { return o->calls > 0; }, this));
    return value;
  }
  int call_count() {
    absl::MutexLock lock(&mu);
    return calls;
  }
};

// Write and wait for `done`. A refusal is returned as is.
inline absl::Status WriteSync(RecordStore& store, uint64_t ns, const std::string& key,
                              const std::string& bytes) {
  auto out = std::make_shared<Outcome<absl::Status>>();
  absl::Status s = store.Write(ns, key, bytes.data(), bytes.size(),
                               [out](absl::Status st) { out->Set(std::move(st)); });
  if (!s.ok()) return s;
  return out->Await();
}

// Read into `dst` (resized to `capacity`) and wait for `done`.
inline absl::StatusOr<uint64_t> ReadSync(RecordStore& store, uint64_t ns, const std::string& key,
                                         std::string& dst, size_t capacity) {
  dst.assign(capacity, '\0');
  auto out = std::make_shared<Outcome<absl::StatusOr<uint64_t>>>();
  absl::Status s = store.Read(ns, key, dst.data(), capacity,
                              [out](absl::StatusOr<uint64_t> n) { out->Set(std::move(n)); });
  if (!s.ok()) return s;
  absl::StatusOr<uint64_t> got = out->Await();
  if (got.ok()) dst.resize(*got);
  return got;
}

}  // namespace kvoffload::tier::cluster::testing

#endif  // KVOFFLOAD_DAEMON_TIER_CLUSTER_TESTING_SYNC_CALLS_H_
