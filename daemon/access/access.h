// Who may do what to an engine (README "Security model"). An engine belongs to the uid whose call
// created it. Three kinds of access:
//   - use (index calls, worker registration, OpenEngine joining it): the owner, root, and the
//     uids/groups the creator's spec names (EngineSpec.member_uids / member_gids), for engines
//     whose scheduler and workers run as different users;
//   - administer (DropEngine, Cleanup reset, seeing it in Stats/ListEngines): the owner, root and
//     the daemon's --admin_group;
//   - everything else (another uid on the same socket) is PERMISSION_DENIED and changes nothing.
// Messages name the refused caller and the engine, never the owner or another engine's data.
#ifndef KVOFFLOAD_DAEMON_ACCESS_ACCESS_H_
#define KVOFFLOAD_DAEMON_ACCESS_ACCESS_H_

#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "common/engine_spec.h"
#include "daemon/access/caller.h"

namespace kvoffload::daemon {

// Node-wide access settings; plain data.
struct AccessPolicy {
  // Members of this group (primary or supplementary) administer every engine (not use it).
  std::optional<uint32_t> admin_gid;
};

// OK when `caller` may use an engine owned by `owner_uid` whose creator's spec is `spec`;
// otherwise PERMISSION_DENIED naming the caller, `action` and the engine.
absl::Status CheckEngineUse(const Caller& caller, uint32_t owner_uid,
                            const common::EngineSpec& spec, absl::string_view action);

// OK when `caller` may administer an engine (owner, root, admin group).
absl::Status CheckEngineAdmin(const Caller& caller, uint32_t owner_uid, const std::string& key,
                              const AccessPolicy& policy, absl::string_view action);

// Root or a member of the admin group: administers every engine.
bool IsNodeAdmin(const Caller& caller, const AccessPolicy& policy);

}  // namespace kvoffload::daemon

#endif  // KVOFFLOAD_DAEMON_ACCESS_ACCESS_H_
