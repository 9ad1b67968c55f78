// Caller: who made a call, as the kernel reported it for the caller's connection (SO_PEERCRED and
// SO_PEERGROUPS, read by the daemon when it accepted the connection), never as a message claims.
// Engines are owned by a uid and every call is checked against its Caller (daemon/access/access.h).
#ifndef KVOFFLOAD_DAEMON_ACCESS_CALLER_H_
#define KVOFFLOAD_DAEMON_ACCESS_CALLER_H_

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"

namespace kvoffload::daemon {

// Plain data; copyable.
struct Caller {
  int32_t pid = 0;  // the process that connected (SO_PEERCRED: at connect() time)
  uint32_t uid = 0;
  uint32_t gid = 0;
  std::vector<uint32_t> groups;  // supplementary groups at connect() time (SO_PEERGROUPS)

  bool InGroup(uint32_t g) const {
    return gid == g || std::find(groups.begin(), groups.end(), g) != groups.end();
  }
  bool IsRoot() const { return uid == 0; }
  // "uid 1000 (pid 4242)": what PERMISSION_DENIED messages name.
  std::string Describe() const { return absl::StrCat("uid ", uid, " (pid ", pid, ")"); }
};

}  // namespace kvoffload::daemon

#endif  // KVOFFLOAD_DAEMON_ACCESS_CALLER_H_
