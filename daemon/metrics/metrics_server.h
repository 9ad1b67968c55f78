// MetricsServer: serves a prometheus::Collectable as Prometheus text (format 0.0.4, content type
// kMetricsContentType) on http://<address>/metrics, through civetweb. The only place in the
// daemon that sees the exceptions civetweb throws: they become a Status here.
//
//   ASSIGN_OR_RETURN(auto server, MetricsServer::Start("127.0.0.1:9470", collector));
//   server->port();   // the bound port (useful with "127.0.0.1:0")
#ifndef KVOFFLOAD_DAEMON_METRICS_METRICS_SERVER_H_
#define KVOFFLOAD_DAEMON_METRICS_METRICS_SERVER_H_

#include <sys/socket.h>

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "prometheus/collectable.h"

class CivetServer;

namespace kvoffload::daemon {

// What Prometheus expects for its text exposition format.
inline constexpr char kMetricsContentType[] = "text/plain; version=0.0.4; charset=utf-8";

// OK when `address` is "host:port" with a non-empty host (IPv4, [IPv6] or a name) and a
// decimal port in 0..65535 (0: any free port); INVALID_ARGUMENT naming what is wrong otherwise.
absl::Status ValidateMetricsAddress(absl::string_view address);

// Thread-safe. Owns the HTTP server; holds the collector weakly (prometheus-cpp's contract), so
// the caller keeps it alive. The destructor stops serving and waits for running scrapes; it
// returns promptly (see WakeListener in the .cc).
class MetricsServer {
 public:
  // INVALID_ARGUMENT for a malformed address; UNAVAILABLE when it cannot be bound (in use, not a
  // local address, no permission). Serves on 2 threads.
  static absl::StatusOr<std::unique_ptr<MetricsServer>> Start(
      const std::string& address, std::shared_ptr<prometheus::Collectable> collector);
  ~MetricsServer();
  MetricsServer(const MetricsServer&) = delete;
  MetricsServer& operator=(const MetricsServer&) = delete;

  const std::string& address() const { return address_; }
  int port() const { return port_; }

 private:
  class Handler;
  MetricsServer(std::string address, std::unique_ptr<CivetServer> server,
                std::unique_ptr<Handler> handler, int port);

  const std::string address_;
  std::unique_ptr<Handler> handler_;     // outlives server_, which calls it
  std::unique_ptr<CivetServer> server_;
  const int port_;
  // Where a connection reaches the listener (loopback for a wildcard host); unset if unknown.
  sockaddr_storage wake_address_{};
  socklen_t wake_address_len_ = 0;
};

}  // namespace kvoffload::daemon

#endif  // KVOFFLOAD_DAEMON_METRICS_METRICS_SERVER_H_
