// Checks the daemon's data socket before a client dials it, so that a caller learns at once and
// in one line what is wrong (no daemon, a stale socket, no permission) instead of a gRPC
// deadline after a minute of retries:
//
//   absl::Status s = CheckDaemonSocket("/run/kvoffload/kvoffload.sock");
//   // UNAVAILABLE: kvoffloadd is not running (no socket at /run/kvoffload/kvoffload.sock): ...
//
// The check connect()s to the Unix socket and closes the connection again; it never waits for
// the daemon to accept beyond the kernel's answer. Thread-safe: no state.
#ifndef KVOFFLOAD_CLIENT_DAEMON_SOCKET_H_
#define KVOFFLOAD_CLIENT_DAEMON_SOCKET_H_

#include <string>

#include "absl/status/status.h"

namespace kvoffload::client {

// OK when something listens on `socket_path`. Otherwise, with the path and the fix in the
// message: UNAVAILABLE (no socket, or nothing listens on it: kvoffloadd is not running),
// PERMISSION_DENIED (the caller is not in the socket's group), INVALID_ARGUMENT (empty path, not
// a socket, or a path too long for a Unix socket address).
absl::Status CheckDaemonSocket(const std::string& socket_path);

}  // namespace kvoffload::client

#endif  // KVOFFLOAD_CLIENT_DAEMON_SOCKET_H_
