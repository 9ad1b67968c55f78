// MemoryBackend: a KvBackend (kv_backend.h) in a map, for ClusterTier's tests without Redis.
// `Hold()` makes every call wait until `Release()` (a hung service); `Fail(status)` makes every
// key's answer that status (a service down).
#ifndef KVOFFLOAD_DAEMON_TIER_CLUSTER_TESTING_MEMORY_BACKEND_H_
#define KVOFFLOAD_DAEMON_TIER_CLUSTER_TESTING_MEMORY_BACKEND_H_

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/synchronization/mutex.h"
#include "daemon/tier/cluster/kv_backend.h"

namespace kvoffload::tier::cluster::testing {

class MemoryBackend : public KvBackend {
 public:
  // Shared state, so a test keeps a handle after the tier took the backend.
  struct State {
    absl::Mutex mu;
    std::map<std::string, std::string> values ABSL_GUARDED_BY(mu);
    bool held ABSL_GUARDED_BY(mu) = false;
    int waiting ABSL_GUARDED_BY(mu) = 0;  // calls held now
    absl::Status failure ABSL_GUARDED_BY(mu);

    void Hold() {
      absl::MutexLock lock(&mu);
      held = true;
    }
    void Release() {
      absl::MutexLock lock(&mu);
      held = false;
    }
    void Fail(absl::Status s) {
      absl::MutexLock lock(&mu);
      failure = std::move(s);
    }
    void AwaitWaiting(int n) {
      absl::MutexLock lock(&mu);
      auto enough = [this, n]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) { return waiting >= n; };
      mu.Await(absl::Condition(&enough));
    }
  };

  explicit MemoryBackend(std::shared_ptr<State> state) : state_(std::move(state)) {}

  std::vector<absl::Status> Put(const std::vector<KvPut>& puts, absl::Time) override {
    absl::MutexLock lock(&state_->mu);
    Gate();
    std::vector<absl::Status> out;
    for (const KvPut& p : puts) {
      if (state_->failure.ok()) state_->values[p.key] = std::string(p.head) + std::string(p.body);
      out.push_back(state_->failure);
    }
    return out;
  }
  std::vector<KvValue> Get(const std::vector<std::string>& keys, absl::Time) override {
    absl::MutexLock lock(&state_->mu);
    Gate();
    std::vector<KvValue> out;
    for (const std::string& k : keys) {
      KvValue v;
      auto it = state_->values.find(k);
      if (!state_->failure.ok()) {
        v.status = state_->failure;
      } else if (it == state_->values.end()) {
        v.status = absl::NotFoundError("no such key");
      } else {
        auto copy = std::make_shared<std::string>(it->second);
        v.bytes = *copy;
        v.owner = copy;
      }
      out.push_back(std::move(v));
    }
    return out;
  }
  std::vector<absl::StatusOr<bool>> Exists(const std::vector<std::string>& keys,
                                           absl::Time) override {
    absl::MutexLock lock(&state_->mu);
    Gate();
    std::vector<absl::StatusOr<bool>> out;
    for (const std::string& k : keys) {
      if (!state_->failure.ok()) {
        out.push_back(state_->failure);
      } else {
        out.push_back(state_->values.count(k) > 0);
      }
    }
    return out;
  }
  std::vector<absl::Status> Delete(const std::vector<std::string>& keys, absl::Time) override {
    absl::MutexLock lock(&state_->mu);
    for (const std::string& k : keys) state_->values.erase(k);
    return std::vector<absl::Status>(keys.size());
  }
  absl::StatusOr<uint64_t> DeletePrefix(absl::string_view prefix, absl::Time) override {
    absl::MutexLock lock(&state_->mu);
    uint64_t n = 0;
    for (auto it = state_->values.begin(); it != state_->values.end();) {
      if (absl::StartsWith(it->first, prefix)) {
        it = state_->values.erase(it);
        ++n;
      } else {
        ++it;
      }
    }
    return n;
  }
  KvBackendStats backend_stats() const override { return {}; }

 private:
  // Waits while held (called with the lock).
  void Gate() ABSL_EXCLUSIVE_LOCKS_REQUIRED(state_->mu) {
    ++state_->waiting;
    auto released = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(state_->mu) { return !state_->held; };
    state_->mu.Await(absl::Condition(&released));
    --state_->waiting;
  }

  std::shared_ptr<State> state_;
};

}  // namespace kvoffload::tier::cluster::testing

#endif  // KVOFFLOAD_DAEMON_TIER_CLUSTER_TESTING_MEMORY_BACKEND_H_
