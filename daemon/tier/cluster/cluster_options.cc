#include "daemon/tier/cluster/cluster_options.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/errno_status.h"
#include "common/logging.h"
#include "daemon/tier/record_format.h"

namespace kvoffload::tier::cluster {
namespace {

constexpr absl::string_view kScheme = "redis://";
constexpr size_t kMaxKeyPrefixBytes = 64;
constexpr uint64_t kMaxValueBytesLimit = 256ull << 20;  // Redis's proto-max-bulk-len is 512 MiB
constexpr int kMaxConnectionsPerNode = 64;
constexpr int kMaxThreads = 64;
constexpr size_t kMaxSecretBytes = 4096;

bool PrefixByteOk(char c) {
  return absl::ascii_isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '-';
}

absl::Status Bad(absl::string_view field, absl::string_view why) {
  return absl::InvalidArgumentError(absl::StrCat("cluster tier option ", field, ": ", why));
}

}  // namespace

std::string NodeAddress::ToString() const {
  if (host.find(':') != std::string::npos) return absl::StrCat("[", host, "]:", port);
  return absl::StrCat(host, ":", port);
}

absl::StatusOr<NodeAddress> ParseHostPort(absl::string_view text) {
  NodeAddress a;
  absl::string_view port;
  if (absl::StartsWith(text, "[")) {
    const size_t close = text.find(']');
    if (close == absl::string_view::npos || close + 1 >= text.size() || text[close + 1] != ':') {
      return absl::InvalidArgumentError(absl::StrCat("bad address '", text, "': want [v6]:port"));
    }
    a.host = std::string(text.substr(1, close - 1));
    port = text.substr(close + 2);
  } else {
    const size_t colon = text.rfind(':');
    if (colon == absl::string_view::npos || text.find(':') != colon) {
      return absl::InvalidArgumentError(absl::StrCat("bad address '", text, "': want host:port"));
    }
    a.host = std::string(text.substr(0, colon));
    port = text.substr(colon + 1);
  }
  if (a.host.empty() || !absl::SimpleAtoi(port, &a.port) || a.port < 1 || a.port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("bad address '", text, "': want host:port with a port in 1..65535"));
  }
  return a;
}

absl::StatusOr<std::vector<NodeAddress>> ParseClusterUrl(absl::string_view url) {
  if (!absl::StartsWith(url, kScheme)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "cluster URL must start with redis:// (rediss:// is not supported), got '",
        url.substr(0, 10), "...'"));
  }
  absl::string_view rest = url.substr(kScheme.size());
  if (rest.find('@') != absl::string_view::npos) {
    // Not echoed: it may hold a password.
    return absl::InvalidArgumentError(
        "cluster URL holds credentials ('@'): give the user as an option and the password in "
        "a file (password_file)");
  }
  if (rest.find_first_of("/?#") != absl::string_view::npos) {
    return absl::InvalidArgumentError(absl::StrCat(
        "cluster URL '", url, "' has a path or query; a Redis Cluster has database 0 only"));
  }
  std::vector<NodeAddress> seeds;
  for (absl::string_view part : absl::StrSplit(rest, ',')) {
    absl::StatusOr<NodeAddress> a = ParseHostPort(part);
    if (!a.ok()) return a.status();
    seeds.push_back(*std::move(a));
  }
  return seeds;
}

absl::Status Validate(const ClusterTierOptions& o) {
  if (o.seeds.empty()) return Bad("seeds", "none (want redis://host:port[,host:port...])");
  for (const NodeAddress& a : o.seeds) {
    if (a.host.empty() || a.port < 1 || a.port > 65535) {
      return Bad("seeds", absl::StrCat("bad address '", a.ToString(), "'"));
    }
  }
  if (o.key_prefix.empty() || o.key_prefix.size() > kMaxKeyPrefixBytes) {
    return Bad("key_prefix", absl::StrCat(o.key_prefix.size(), " bytes; 1..",
                                          kMaxKeyPrefixBytes, " allowed"));
  }
  for (char c : o.key_prefix) {
    if (!PrefixByteOk(c)) {
      return Bad("key_prefix",
                 absl::StrCat("'", o.key_prefix, "' holds '", std::string(1, c),
                              "'; only [A-Za-z0-9._-] (no hash tag, no glob character)"));
    }
  }
  if (!o.user.empty() && o.password_file.empty()) {
    return Bad("user", "an ACL user needs a password_file");
  }
  for (char c : o.user) {
    if (absl::ascii_isspace(static_cast<unsigned char>(c)) || !absl::ascii_isprint(c)) {
      return Bad("user", "holds a space or an unprintable byte");
    }
  }
  if (o.connect_timeout <= absl::ZeroDuration()) return Bad("connect_timeout", "must be > 0");
  if (o.command_timeout <= absl::ZeroDuration()) return Bad("command_timeout", "must be > 0");
  if (o.lookup_timeout <= absl::ZeroDuration()) return Bad("lookup_timeout", "must be > 0");
  if (o.refresh_interval < absl::ZeroDuration()) return Bad("refresh_interval", "must be >= 0");
  if (o.down_backoff < absl::ZeroDuration()) return Bad("down_backoff", "must be >= 0");
  if (o.max_refresh_backoff <= absl::ZeroDuration()) {
    return Bad("max_refresh_backoff", "must be > 0");
  }
  if (o.connections_per_node < 1 || o.connections_per_node > kMaxConnectionsPerNode) {
    return Bad("connections_per_node",
               absl::StrCat(o.connections_per_node, "; 1..", kMaxConnectionsPerNode, " allowed"));
  }
  if (o.max_value_bytes <= kRecordHeaderBytes || o.max_value_bytes > kMaxValueBytesLimit) {
    return Bad("max_value_bytes",
               absl::StrCat(o.max_value_bytes, "; more than the ", kRecordHeaderBytes,
                            "-byte header and at most ", kMaxValueBytesLimit, " allowed"));
  }
  if (o.threads < 1 || o.threads > kMaxThreads) {
    return Bad("threads", absl::StrCat(o.threads, "; 1..", kMaxThreads, " allowed"));
  }
  if (o.max_queued < 1) return Bad("max_queued", absl::StrCat(o.max_queued, "; must be >= 1"));
  return absl::OkStatus();
}

absl::StatusOr<std::string> ReadSecretFile(const std::string& path) {
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return common::ErrnoStatus(errno, "open password file " + path);
  struct stat st {};
  if (fstat(fd, &st) == 0 && (st.st_mode & 077) != 0) {
    common::Logger("tier")->warn("cluster tier: password file {} is readable by group or others",
                                 path);
  }
  std::string secret(kMaxSecretBytes + 1, '\0');
  size_t got = 0;
  while (got < secret.size()) {
    const ssize_t n = read(fd, secret.data() + got, secret.size() - got);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int err = errno;
      close(fd);
      return common::ErrnoStatus(err, "read password file " + path);
    }
    if (n == 0) break;
    got += static_cast<size_t>(n);
  }
  close(fd);
  if (got > kMaxSecretBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("password file ", path, " is longer than ", kMaxSecretBytes, " bytes"));
  }
  secret.resize(got);
  const size_t eol = secret.find_first_of("\r\n");
  if (eol != std::string::npos) secret.resize(eol);
  if (secret.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("password file ", path, " is empty"));
  }
  return secret;
}

}  // namespace kvoffload::tier::cluster
