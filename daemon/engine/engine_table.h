// EngineTable: the engines (DP replicas) of this node by key, "engine_id/dp_rank", as
// EngineRegistry (registry.h) holds them under its lock, and whether the node is shutting down
// (then no engine enters). It answers which engine holds a key or a region epoch and hands
// engines out of the table; closing them is the registry's business.
//
//   EngineTable table;
//   table.Insert(spec.Key(), engine);
//   std::shared_ptr<Engine> found = table.Find(EngineTable::KeyOf("llama", 0));  // null: absent
//   std::shared_ptr<Engine> dropped = table.Take(found->key());                // out of the table
//
// Thread-safety: none of its own; a plain value. EngineRegistry holds it ABSL_GUARDED_BY its
// mutex, so clang's -Wthread-safety proves every use holds that lock. Ownership: the table shares
// the ownership of its engines; what it hands out is the caller's.
#ifndef KVOFFLOAD_DAEMON_ENGINE_ENGINE_TABLE_H_
#define KVOFFLOAD_DAEMON_ENGINE_ENGINE_TABLE_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "daemon/engine/engine.h"

namespace kvoffload::daemon {

class EngineTable {
 public:
  // An engine's key: "engine_id/dp_rank" (EngineSpec::Key()).
  static std::string KeyOf(const std::string& engine_id, uint32_t dp_rank);

  // The engine of `key`; null when absent.
  std::shared_ptr<Engine> Find(const std::string& key) const;
  // Every engine, in key order.
  std::vector<std::shared_ptr<Engine>> List() const;
  size_t size() const { return engines_.size(); }
  // The key of the engine whose region has `epoch`; empty when none has.
  std::string HolderOfEpoch(uint64_t epoch) const;

  // Adds `engine` under `key`; a key taken already keeps its engine (the registry creates and
  // restores under one lock after finding the key free, so it never is).
  void Insert(const std::string& key, std::shared_ptr<Engine> engine);
  // Removes the engine of `key` and returns it; null when absent.
  std::shared_ptr<Engine> Take(const std::string& key);
  // Removes and returns every engine `take` approves, in key order.
  std::vector<std::shared_ptr<Engine>> TakeIf(const std::function<bool(const Engine&)>& take);
  // Removes and returns every engine.
  std::vector<std::shared_ptr<Engine>> TakeAll();

  // From now on the node is shutting down (for good): the registry admits no engine.
  void StartShutdown() { shutting_down_ = true; }
  bool shutting_down() const { return shutting_down_; }

 private:
  std::map<std::string, std::shared_ptr<Engine>> engines_;
  bool shutting_down_ = false;
};

}  // namespace kvoffload::daemon

#endif  // KVOFFLOAD_DAEMON_ENGINE_ENGINE_TABLE_H_
