#include "daemon/access/access.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace kvoffload::daemon {

absl::Status CheckEngineUse(const Caller& caller, uint32_t owner_uid,
                            const common::EngineSpec& spec, absl::string_view action) {
  if (caller.IsRoot() || caller.uid == owner_uid) return absl::OkStatus();
  if (std::find(spec.member_uids.begin(), spec.member_uids.end(), caller.uid) !=
      spec.member_uids.end()) {
    return absl::OkStatus();
  }
  for (uint32_t g : spec.member_gids) {
    if (caller.InGroup(g)) return absl::OkStatus();
  }
  return absl::PermissionDeniedError(
      absl::StrCat(caller.Describe(), " may not ", action, " engine ", spec.Key(),
                   ": it belongs to another uid, which did not name this uid or one of its groups "
                   "in member_uids/member_gids"));
}

bool IsNodeAdmin(const Caller& caller, const AccessPolicy& policy) {
  return caller.IsRoot() || (policy.admin_gid.has_value() && caller.InGroup(*policy.admin_gid));
}

absl::Status CheckEngineAdmin(const Caller& caller, uint32_t owner_uid, const std::string& key,
                              const AccessPolicy& policy, absl::string_view action) {
  if (caller.uid == owner_uid || IsNodeAdmin(caller, policy)) return absl::OkStatus();
  return absl::PermissionDeniedError(
      absl::StrCat(caller.Describe(), " may not ", action, " engine ", key,
                   ": it belongs to another uid (only its owner, root and the --admin_group may)"));
}

}  // namespace kvoffload::daemon
