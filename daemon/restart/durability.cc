#include "daemon/restart/durability.h"

#include <sys/stat.h>

#include <algorithm>
#include <map>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/logging.h"

namespace kvoffload::daemon {
namespace {

spdlog::logger* Log() {
  static spdlog::logger* const log = common::Logger("restart");
  return log;
}

}  // namespace

absl::StatusOr<uint64_t> Durability::StateBytes(const StateIdentity& identity,
                                                const common::Geometry& geometry) const {
  if (!enabled()) return 0;
  return StateFile::BytesFor(identity, geometry, key_capacity_);
}

absl::StatusOr<std::unique_ptr<StateFile>> Durability::NewState(
    const StateIdentity& identity, const common::Geometry& geometry) const {
  if (!enabled()) return std::unique_ptr<StateFile>();
  return StateFile::Create(identity, geometry, key_capacity_);
}

absl::Status Durability::Publish(uint64_t region_epoch, const std::string& key, int region_fd,
                                 int state_fd) {
  if (!enabled()) return absl::OkStatus();
  absl::Status s = store_->Store(StoredFdName(StoredKind::kRegion, region_epoch, key), region_fd);
  if (s.ok()) s = store_->Store(StoredFdName(StoredKind::kState, region_epoch, key), state_fd);
  return s;
}

void Durability::Forget(uint64_t region_epoch, const std::string& key) {
  if (!enabled()) return;
  for (StoredKind kind : {StoredKind::kState, StoredKind::kRegion}) {
    const std::string name = StoredFdName(kind, region_epoch, key);
    if (absl::Status s = store_->Remove(name); !s.ok()) {
      Log()->error("engine {}: cannot remove {} from the fd store ({}); its memory stays with the "
                   "service manager until the unit stops",
                   key, name, s.ToString());
    }
  }
}

Durability::Collected Durability::Collect(std::vector<InheritedFd> inherited) {
  Collected out;
  std::map<uint64_t, InheritedFd> regions;
  std::map<uint64_t, InheritedFd> states;
  auto drop = [&](const InheritedFd& fd, const std::string& why) {
    Log()->error("fd store: {} refused: {}; removed from the store", fd.name, why);
    if (enabled()) (void)store_->Remove(fd.name);
  };
  for (InheritedFd& fd : inherited) {
    std::optional<ParsedFdName> parsed = ParseStoredFdName(fd.name);
    if (!parsed.has_value()) {
      drop(fd, "not a kvoffloadd descriptor");
      continue;
    }
    auto& into = parsed->kind == StoredKind::kRegion ? regions : states;
    if (into.count(parsed->region_epoch) != 0) {
      drop(fd, "a second descriptor of the same kind and region epoch");
      continue;
    }
    into.emplace(parsed->region_epoch, std::move(fd));
  }
  // Valid states by engine key; of two states of one engine the newest (creation time, then
  // region epoch) is restored and the others refused (review S7: not the lower epoch).
  struct Candidate {
    Restorable restorable;
    std::string state_name;
    std::string region_name;
    uint64_t created_ns = 0;
    uint64_t epoch = 0;
  };
  std::map<std::string, std::vector<Candidate>> candidates;
  for (auto& [epoch, state_fd] : states) {
    const std::string state_name = state_fd.name;
    auto region_it = regions.find(epoch);
    auto refuse = [&](const std::string& why) {
      ++out.refused;
      drop(InheritedFd{state_name, UniqueFd()}, why);
      if (region_it != regions.end()) {
        drop(region_it->second, "its engine's state was refused");
        regions.erase(region_it);
      }
    };
    absl::StatusOr<StateFile::Adopted> adopted = StateFile::Adopt(std::move(state_fd.fd));
    if (!adopted.ok()) {
      refuse(absl::StrCat(adopted.status().ToString(), "; the engine starts empty"));
      continue;
    }
    if (adopted->identity.region_epoch != epoch) {
      refuse("its name and its header name different region epochs");
      continue;
    }
    const std::string key = adopted->identity.spec.Key();
    if (region_it == regions.end()) {
      refuse(absl::StrCat("engine ", key, ": its region descriptor is missing"));
      continue;
    }
    struct stat st;
    if (fstat(region_it->second.fd.get(), &st) != 0 ||
        static_cast<uint64_t>(st.st_size) != adopted->geometry.capacity_bytes) {
      refuse(absl::StrCat("engine ", key, ": its region descriptor has ", st.st_size,
                          " bytes, the state describes ", adopted->geometry.capacity_bytes));
      continue;
    }
    Candidate c;
    c.state_name = state_name;
    c.region_name = region_it->second.name;
    c.created_ns = adopted->created_ns;
    c.epoch = epoch;
    c.restorable.state = *std::move(adopted);
    c.restorable.region = std::move(region_it->second.fd);
    regions.erase(region_it);
    candidates[key].push_back(std::move(c));
  }
  for (auto& [key, list] : candidates) {
    std::sort(list.begin(), list.end(), [](const Candidate& a, const Candidate& b) {
      return a.created_ns != b.created_ns ? a.created_ns > b.created_ns : a.epoch > b.epoch;
    });
    for (size_t i = 1; i < list.size(); ++i) {
      ++out.refused;
      const std::string why = absl::StrCat("engine ", key, ": an older state of the same engine ",
                                           "(region epoch ", absl::Hex(list[0].epoch),
                                           " is newer)");
      drop(InheritedFd{list[i].state_name, UniqueFd()}, why);
      drop(InheritedFd{list[i].region_name, UniqueFd()}, "its engine's state was refused");
    }
    out.engines.push_back(std::move(list[0].restorable));
  }
  for (auto& [epoch, region_fd] : regions) drop(region_fd, "no state descriptor names it");
  return out;
}

}  // namespace kvoffload::daemon
