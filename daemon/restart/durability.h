// Durability: how this daemon's engines outlive it (durable regions). Each engine's region memfd and
// state memfd (state_file.h) go to the service manager's fd store (fd_store.h) when the engine is
// created, leave it when the engine is dropped (so its memory is really freed), and stay there
// when the daemon stops, is upgraded or dies; the next daemon collects them at start.
//
//   Durability durability(fd_store.get(), StateFile::kDefaultKeyCapacity);
//   for (Durability::Restorable& r : durability.Collect(std::move(inherited))) ... restore ...
//   ASSIGN_OR_RETURN(auto state, durability.NewState(identity, geometry));  // a new engine
//   durability.Publish(epoch, key, region->fd(), state->fd());
//   durability.Forget(epoch, key);                                        // engine dropped
//
// What is refused at Collect (each with one log line, its descriptors removed from the store and
// closed, so nothing is served from it and its memory goes): a state descriptor that is
// truncated, corrupted or of another version (StateFile::Adopt), one whose region descriptor is
// missing or of another size, a second state of an engine key already collected, and
// descriptors that are not ours.
//
// Thread-safety: safe for concurrent use (the store is). Ownership: does not own the FdStore,
// which must outlive it; Collect's results own their descriptors.
#ifndef KVOFFLOAD_DAEMON_RESTART_DURABILITY_H_
#define KVOFFLOAD_DAEMON_RESTART_DURABILITY_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/geometry.h"
#include "daemon/restart/fd_store.h"
#include "daemon/restart/state_file.h"
#include "daemon/restart/unique_fd.h"

namespace kvoffload::daemon {

class Durability {
 public:
  Durability(FdStore* store, uint32_t key_capacity) : store_(store), key_capacity_(key_capacity) {}
  Durability(const Durability&) = delete;
  Durability& operator=(const Durability&) = delete;

  // False without a service manager: engines get no state file and nothing is stored.
  bool enabled() const { return store_->enabled(); }
  uint32_t key_capacity() const { return key_capacity_; }

  // Bytes of a new engine's state file (0 when disabled), to charge to the node cap.
  absl::StatusOr<uint64_t> StateBytes(const StateIdentity& identity,
                                      const common::Geometry& geometry) const;
  // A new engine's state file (null when disabled).
  absl::StatusOr<std::unique_ptr<StateFile>> NewState(const StateIdentity& identity,
                                                      const common::Geometry& geometry) const;
  // Hands the engine's descriptors to the store: region first, then state (a state without its
  // region is refused at the next start anyway).
  absl::Status Publish(uint64_t region_epoch, const std::string& key, int region_fd,
                       int state_fd);
  // Removes both descriptors of a dropped engine from the store (logged when that fails).
  void Forget(uint64_t region_epoch, const std::string& key);

  struct Restorable {
    StateFile::Adopted state;
    UniqueFd region;  // checked: exactly state.geometry.capacity_bytes bytes
  };
  struct Collected {
    std::vector<Restorable> engines;
    uint64_t refused = 0;  // engines refused (each logged)
  };
  // Pairs the descriptors the manager passed at start by region epoch and validates them.
  Collected Collect(std::vector<InheritedFd> inherited);

 private:
  FdStore* const store_;
  const uint32_t key_capacity_;
};

}  // namespace kvoffload::daemon

#endif  // KVOFFLOAD_DAEMON_RESTART_DURABILITY_H_
