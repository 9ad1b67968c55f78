#include "daemon/metrics/metrics_server.h"

#include <netdb.h>
#include <netinet/in.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <exception>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "CivetServer.h"
#include "prometheus/text_serializer.h"

namespace kvoffload::daemon {
namespace {

spdlog::logger* Log() {
  static spdlog::logger* log = common::Logger("metrics");
  return log;
}

absl::Status BadAddress(absl::string_view address, absl::string_view why) {
  return absl::InvalidArgumentError(
      absl::StrCat("metrics address \"", address, "\" is not host:port (", why, ")"));
}

std::string HostOf(const std::string& address) {
  std::string host = address.substr(0, address.rfind(':'));
  if (host.size() >= 2 && host.front() == '[') host = host.substr(1, host.size() - 2);
  return host;
}

// Why civetweb could not bind `address` (it only says "possible problem binding to port"):
// binds a probe socket the same way and returns strerror, or "" when the probe binds.
std::string WhyNotBindable(const std::string& address) {
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* found = nullptr;
  const std::string port = address.substr(address.rfind(':') + 1);
  if (const int err = getaddrinfo(HostOf(address).c_str(), port.c_str(), &hints, &found);
      err != 0) {
    return gai_strerror(err);
  }
  std::string why;
  const int fd = socket(found->ai_family, found->ai_socktype | SOCK_CLOEXEC, found->ai_protocol);
  const int on = 1;
  if (fd < 0) {
    why = std::strerror(errno);
  } else if (setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &on, sizeof(on)) != 0 ||
             bind(fd, found->ai_addr, found->ai_addrlen) != 0) {
    why = std::strerror(errno);
  }
  if (fd >= 0) close(fd);
  freeaddrinfo(found);
  return why;
}

}  // namespace

absl::Status ValidateMetricsAddress(absl::string_view address) {
  const size_t colon = address.rfind(':');
  if (colon == absl::string_view::npos) return BadAddress(address, "no port");
  const absl::string_view host = address.substr(0, colon);
  const absl::string_view port = address.substr(colon + 1);
  if (host.empty()) return BadAddress(address, "no host: use 127.0.0.1 or 0.0.0.0");
  // civetweb reads ',' as a list of ports and a port suffix (s, r) as TLS or redirect.
  for (char c : host) {
    if (!absl::ascii_isalnum(c) && c != '.' && c != '-' && c != ':' && c != '[' && c != ']') {
      return BadAddress(address, absl::StrCat("unexpected '", std::string(1, c), "' in host"));
    }
  }
  if (host.find(':') != absl::string_view::npos && (host.front() != '[' || host.back() != ']')) {
    return BadAddress(address, "an IPv6 host goes in brackets: [::1]:9470");
  }
  uint32_t port_number = 0;
  const bool digits = !port.empty() && port.size() <= 5 &&
                      std::all_of(port.begin(), port.end(), absl::ascii_isdigit);
  if (!digits || !absl::SimpleAtoi(port, &port_number) || port_number > 65535) {
    return BadAddress(address, "the port must be a number in 0..65535");
  }
  return absl::OkStatus();
}

// Serves GET /metrics as the Prometheus text format 0.0.4, with the content type that names it
// (prometheus-cpp's own handler sends a bare text/plain).
class MetricsServer::Handler final : public CivetHandler {
 public:
  explicit Handler(std::weak_ptr<prometheus::Collectable> collector)
      : collector_(std::move(collector)) {}

  bool handleGet(CivetServer*, mg_connection* conn) override {
    std::string body;
    if (std::shared_ptr<prometheus::Collectable> collector = collector_.lock()) {
      body = prometheus::TextSerializer().Serialize(collector->Collect());
    }
    mg_printf(conn,
              "HTTP/1.1 200 OK\r\nContent-Type: %s\r\nContent-Length: %zu\r\n"
              "Connection: close\r\n\r\n",
              kMetricsContentType, body.size());
    mg_write(conn, body.data(), body.size());
    return true;
  }

 private:
  const std::weak_ptr<prometheus::Collectable> collector_;
};

absl::StatusOr<std::unique_ptr<MetricsServer>> MetricsServer::Start(
    const std::string& address, std::shared_ptr<prometheus::Collectable> collector) {
  RETURN_IF_ERROR(ValidateMetricsAddress(address));
  std::unique_ptr<CivetServer> server;
  // civetweb reports a bind failure by throwing (CivetException); this is its only edge.
  try {
    server = std::make_unique<CivetServer>(
        std::vector<std::string>{"listening_ports", address, "num_threads", "2"});
  } catch (const std::exception& e) {
    std::string why = WhyNotBindable(address);
    if (why.empty()) {
      why = absl::StrCat(e.what(), address.front() == '[' ? " (this civetweb may lack IPv6)" : "");
    }
    return absl::UnavailableError(absl::StrCat("cannot serve metrics on ", address, ": ", why,
                                               " (--metrics_address= disables the endpoint)"));
  }
  auto handler = std::make_unique<Handler>(collector);
  server->addHandler("/metrics", handler.get());
  const std::vector<int> ports = server->getListeningPorts();
  const int port = ports.empty() ? 0 : ports.front();
  Log()->info("Prometheus metrics on http://{}:{}/metrics", address.substr(0, address.rfind(':')),
              port);
  return std::unique_ptr<MetricsServer>(
      new MetricsServer(address, std::move(server), std::move(handler), port));
}

MetricsServer::MetricsServer(std::string address, std::unique_ptr<CivetServer> server,
                             std::unique_ptr<Handler> handler, int port)
    : address_(std::move(address)),
      handler_(std::move(handler)),
      server_(std::move(server)),
      port_(port) {
  const std::string host = HostOf(address_);
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV;
  addrinfo* found = nullptr;
  if (getaddrinfo(host.c_str(), std::to_string(port_).c_str(), &hints, &found) != 0) return;
  if (found != nullptr && found->ai_addrlen <= sizeof(wake_address_)) {
    std::memcpy(&wake_address_, found->ai_addr, found->ai_addrlen);
    wake_address_len_ = found->ai_addrlen;
    if (wake_address_.ss_family == AF_INET) {
      auto* in = reinterpret_cast<sockaddr_in*>(&wake_address_);
      if (in->sin_addr.s_addr == htonl(INADDR_ANY)) in->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    } else if (wake_address_.ss_family == AF_INET6) {
      auto* in6 = reinterpret_cast<sockaddr_in6*>(&wake_address_);
      if (IN6_IS_ADDR_UNSPECIFIED(&in6->sin6_addr)) in6->sin6_addr = in6addr_loopback;
    }
  }
  freeaddrinfo(found);
}

MetricsServer::~MetricsServer() {
  // civetweb (1.15) notices a stop only when its listener's poll() returns, up to 2 s later, so
  // a bare stop delays every daemon shutdown. Connecting to the listener while it stops wakes
  // that poll; the connection is dropped unanswered.
  std::atomic<bool> stopped{false};
  std::thread waker([this, &stopped] {
    if (wake_address_len_ == 0) return;
    while (!stopped.load()) {
      const int fd = socket(wake_address_.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
      if (fd < 0) return;
      connect(fd, reinterpret_cast<const sockaddr*>(&wake_address_), wake_address_len_);
      close(fd);
      usleep(20'000);
    }
  });
  server_.reset();  // before handler_: it may be serving a scrape
  stopped.store(true);
  waker.join();
}

}  // namespace kvoffload::daemon
