#include "daemon/engine/engine_table.h"

#include <utility>

#include "absl/strings/str_cat.h"

namespace kvoffload::daemon {

std::string EngineTable::KeyOf(const std::string& engine_id, uint32_t dp_rank) {
  return absl::StrCat(engine_id, "/", dp_rank);
}

std::shared_ptr<Engine> EngineTable::Find(const std::string& key) const {
  auto it = engines_.find(key);
  return it == engines_.end() ? nullptr : it->second;
}

std::vector<std::shared_ptr<Engine>> EngineTable::List() const {
  std::vector<std::shared_ptr<Engine>> out;
  out.reserve(engines_.size());
  for (const auto& [key, engine] : engines_) out.push_back(engine);
  return out;
}

std::string EngineTable::HolderOfEpoch(uint64_t epoch) const {
  for (const auto& [key, engine] : engines_) {
    if (engine->region_epoch() == epoch) return key;
  }
  return "";
}

void EngineTable::Insert(const std::string& key, std::shared_ptr<Engine> engine) {
  engines_.emplace(key, std::move(engine));
}

std::shared_ptr<Engine> EngineTable::Take(const std::string& key) {
  auto it = engines_.find(key);
  if (it == engines_.end()) return nullptr;
  std::shared_ptr<Engine> engine = std::move(it->second);
  engines_.erase(it);
  return engine;
}

std::vector<std::shared_ptr<Engine>> EngineTable::TakeIf(
    const std::function<bool(const Engine&)>& take) {
  std::vector<std::shared_ptr<Engine>> taken;
  for (auto it = engines_.begin(); it != engines_.end();) {
    if (take(*it->second)) {
      taken.push_back(std::move(it->second));
      it = engines_.erase(it);
    } else {
      ++it;
    }
  }
  return taken;
}

std::vector<std::shared_ptr<Engine>> EngineTable::TakeAll() {
  std::vector<std::shared_ptr<Engine>> taken = List();
  engines_.clear();
  return taken;
}

}  // namespace kvoffload::daemon
