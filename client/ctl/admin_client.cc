#include "client/ctl/admin_client.h"

#include <grp.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"

namespace kvoffload::client::ctl {
namespace {

std::string NotRunning(const std::string& path) {
  return absl::StrCat("kvoffloadd is not running (no socket at ", path, ")");
}

// Names the group to join: the socket's own (kvoffload-admin when installed by
// deploy/install.sh), when it can be seen; the data socket's group does not open the admin socket.
std::string PermissionDenied(const std::string& path, const struct stat* st = nullptr) {
  std::string group = "the admin socket's group, kvoffload-admin by default";
  if (st != nullptr) {
    const struct group* g = getgrgid(st->st_gid);
    group = g != nullptr ? absl::StrCat("group ", g->gr_name) : absl::StrCat("group ", st->st_gid);
  }
  return absl::StrCat("permission denied on ", path, " (join ", group, ")");
}

std::string CannotReach(const std::string& path, absl::string_view why) {
  return absl::StrCat("cannot reach kvoffloadd at ", path, ": ", why);
}

// Messages are printed as one line whatever they hold.
std::string OneLine(absl::string_view message) {
  return absl::StrReplaceAll(message, {{"\r\n", " "}, {"\n", " "}, {"\r", " "}});
}

std::chrono::system_clock::time_point DeadlineAfter(absl::Duration d) {
  return absl::ToChronoTime(absl::Now() + d);
}

// Waits for the channel to connect: true once READY, false on a failed attempt
// (TRANSIENT_FAILURE) or when `deadline` passes first.
bool WaitConnected(grpc::Channel* channel, std::chrono::system_clock::time_point deadline,
                   bool* timed_out) {
  *timed_out = false;
  grpc_connectivity_state state = channel->GetState(/*try_to_connect=*/true);
  while (state != GRPC_CHANNEL_READY) {
    if (state == GRPC_CHANNEL_TRANSIENT_FAILURE || state == GRPC_CHANNEL_SHUTDOWN) return false;
    if (!channel->WaitForStateChange(state, deadline)) {
      *timed_out = true;
      return false;
    }
    state = channel->GetState(/*try_to_connect=*/true);
  }
  return true;
}

}  // namespace

std::string CheckAdminSocket(const std::string& path) {
  struct stat st;
  if (stat(path.c_str(), &st) != 0) {
    const int err = errno;
    if (err == ENOENT || err == ENOTDIR) return NotRunning(path);
    if (err == EACCES) return PermissionDenied(path);  // a directory on the way is closed
    return CannotReach(path, std::strerror(err));
  }
  if (access(path.c_str(), W_OK) != 0) {
    const int err = errno;
    if (err == EACCES || err == EPERM) return PermissionDenied(path, &st);
    return CannotReach(path, std::strerror(err));
  }
  if (!S_ISSOCK(st.st_mode)) return CannotReach(path, "not a socket");
  if (path.size() >= sizeof(sockaddr_un::sun_path)) {
    return CannotReach(path, absl::StrCat("the path is longer than ",
                                          sizeof(sockaddr_un::sun_path) - 1,
                                          " bytes, the limit of a Unix socket address"));
  }
  return "";
}

std::string DaemonErrorLine(const grpc::Status& status) {
  std::string code = absl::StatusCodeToString(static_cast<absl::StatusCode>(status.error_code()));
  if (code.empty()) code = absl::StrCat("CODE_", static_cast<int>(status.error_code()));
  return absl::StrCat("kvoffloadctl: ", code, ": ", OneLine(status.error_message()));
}

int CallDaemon(const AdminTarget& target, std::ostream& err, const AdminRpc& rpc) {
  const std::string problem = CheckAdminSocket(target.socket_path);
  if (!problem.empty()) {
    err << "kvoffloadctl: " << problem << "\n";
    return kExitUnreachable;
  }
  std::shared_ptr<grpc::Channel> channel = grpc::CreateChannel(
      absl::StrCat("unix:", target.socket_path), grpc::InsecureChannelCredentials());
  const absl::Duration connect_timeout = std::min(target.timeout, kConnectTimeout);
  bool timed_out = false;
  if (!WaitConnected(channel.get(), DeadlineAfter(connect_timeout), &timed_out)) {
    if (timed_out) {
      err << "kvoffloadctl: "
          << CannotReach(target.socket_path,
                         absl::StrCat("no connection within ", absl::FormatDuration(connect_timeout)))
          << "\n";
      return kExitUnreachable;
    }
    // The attempt failed: a fail-fast call reports gRPC's reason (e.g. "Connection refused").
    grpc::ClientContext context;
    context.set_wait_for_ready(false);
    context.set_deadline(DeadlineAfter(connect_timeout));
    const grpc::Status status = rpc(channel, &context);
    if (status.ok()) return kExitOk;  // the daemon came up in between
    if (status.error_code() != grpc::StatusCode::UNAVAILABLE &&
        status.error_code() != grpc::StatusCode::DEADLINE_EXCEEDED) {
      err << DaemonErrorLine(status) << "\n";  // ... and answered
      return kExitDaemonError;
    }
    err << "kvoffloadctl: " << CannotReach(target.socket_path, OneLine(status.error_message())) << "\n";
    return kExitUnreachable;
  }
  grpc::ClientContext context;
  const absl::Time deadline = absl::Now() + target.timeout;
  context.set_deadline(absl::ToChronoTime(deadline));
  const grpc::Status status = rpc(channel, &context);
  if (status.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED && absl::Now() >= deadline) {
    // Our own deadline, not the daemon's answer: it accepted the connection but is stuck.
    err << "kvoffloadctl: "
        << CannotReach(target.socket_path,
                       absl::StrCat("no answer within ", absl::FormatDuration(target.timeout),
                                    " (--timeout_s)"))
        << "\n";
    return kExitUnreachable;
  }
  if (!status.ok()) {
    err << DaemonErrorLine(status) << "\n";
    return kExitDaemonError;
  }
  return kExitOk;
}

}  // namespace kvoffload::client::ctl
