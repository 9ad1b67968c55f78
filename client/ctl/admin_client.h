// How kvoffloadctl reaches kvoffloadd's admin socket, and the exit codes every subcommand
// shares. The socket is checked before dialing so that the one error line says exactly what is
// wrong:
//
//   kvoffloadctl: kvoffloadd is not running (no socket at /run/kvoffload/admin.sock)
//   kvoffloadctl: permission denied on /run/kvoffload/admin.sock (join the kvoffload group)
//   kvoffloadctl: cannot reach kvoffloadd at /run/kvoffload/admin.sock: <gRPC message>
//   kvoffloadctl: cannot reach kvoffloadd at /run/kvoffload/admin.sock: no answer within 10s ...
//
// and a call the daemon refuses prints "kvoffloadctl: <CODE>: <message>" (CODE as
// NOT_FOUND). Use:
//
//   AdminTarget target{"/run/kvoffload/admin.sock", absl::Seconds(10)};
//   v1::StatsResponse response;
//   int rc = CallDaemon(target, err, [&](const std::shared_ptr<grpc::Channel>& channel,
//                                        grpc::ClientContext* context) {
//     return v1::Admin::NewStub(channel)->Stats(context, v1::StatsRequest(), &response);
//   });
//   if (rc != kExitOk) return rc;
//
// Thread-safe: no global state.
#ifndef KVOFFLOAD_CLIENT_CTL_ADMIN_CLIENT_H_
#define KVOFFLOAD_CLIENT_CTL_ADMIN_CLIENT_H_

#include <functional>
#include <memory>
#include <ostream>
#include <string>

#include "absl/time/time.h"
#include "client/ctl/exit_codes.h"
#include "grpcpp/grpcpp.h"

namespace kvoffload::client::ctl {

// Connecting is given at most this long (or the call timeout when shorter).
inline constexpr absl::Duration kConnectTimeout = absl::Seconds(3);

// Where the daemon's admin socket is and how long one call may take.
struct AdminTarget {
  std::string socket_path;
  absl::Duration timeout = absl::Seconds(10);
};

// Why `socket_path` cannot be dialed, as the text after "kvoffloadctl: " ("kvoffloadd is not
// running (no socket at PATH)", "permission denied on PATH (join the kvoffload group)",
// "cannot reach kvoffloadd at PATH: ..."), or "" when it may be. Checks, in order: the file
// exists (stat), the caller may write it (access W_OK, real uid), it is a socket, its path
// fits a sockaddr_un.
std::string CheckAdminSocket(const std::string& socket_path);

// The line for a call the daemon answered with an error: "kvoffloadctl: NOT_FOUND: message".
std::string DaemonErrorLine(const grpc::Status& status);

// One unary call on the admin socket: checks the socket, connects within kConnectTimeout, then
// runs `rpc` with a context whose deadline is `target.timeout` away. Returns kExitOk, or writes
// one line on `err` and returns kExitUnreachable (the checks or the connection failed, or the
// deadline passed without an answer) or kExitDaemonError (the daemon answered with an error).
using AdminRpc = std::function<grpc::Status(const std::shared_ptr<grpc::Channel>& channel,
                                            grpc::ClientContext* context)>;
int CallDaemon(const AdminTarget& target, std::ostream& err, const AdminRpc& rpc);

}  // namespace kvoffload::client::ctl

#endif  // KVOFFLOAD_CLIENT_CTL_ADMIN_CLIENT_H_
