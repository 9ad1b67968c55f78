// Tests of the Prometheus endpoint: a Daemon in-process on the host backend, a scheduler client
// changing an engine's rows, and /metrics scraped over a raw TCP socket.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "client/host/store_rows.h"
#include "client/kvoffload_client.h"
#include "common/engine_spec.h"
#include "daemon/copy/host/host_copy_backend.h"
#include "daemon/daemon.h"
#include "daemon/metrics/metrics_collector.h"
#include "daemon/metrics/metrics_server.h"
#include "gtest/gtest.h"

namespace kvoffload::daemon {
namespace {

constexpr uint64_t kNodeCap = 64ull << 20;

// A fresh runtime directory under /tmp (Unix socket paths must stay short), removed at the end.
class TempDir {
 public:
  TempDir() {
    char pattern[] = "/tmp/kvo-metrics.XXXXXX";
    path_ = mkdtemp(pattern);
  }
  ~TempDir() { std::filesystem::remove_all(path_); }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

DaemonOptions Options(const std::string& runtime_dir, const std::string& metrics_address) {
  DaemonOptions options;
  options.runtime_dir = runtime_dir;
  options.max_region_bytes = kNodeCap;
  options.metrics_address = metrics_address;
  return options;
}

absl::StatusOr<std::unique_ptr<Daemon>> StartDaemon(const std::string& runtime_dir,
                                                    const std::string& metrics_address) {
  return Daemon::Start(Options(runtime_dir, metrics_address), CreateHostCopyBackend(2));
}

// 16 rows of 4 KiB.
common::EngineSpec SmallEngine() {
  common::EngineSpec spec;
  spec.engine_id = "llama";
  spec.dp_rank = 1;
  spec.num_layers = 1;
  spec.page_bytes = 4096;
  spec.budget_bytes = 16 * 4096;
  return spec;
}

// GET /metrics over HTTP/1.0; returns the body of a 200 response (and its headers in *headers).
absl::StatusOr<std::string> Scrape(int port, std::string* headers = nullptr) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return absl::InternalError("socket");
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    close(fd);
    return absl::UnavailableError(absl::StrCat("cannot connect to 127.0.0.1:", port));
  }
  const std::string request = "GET /metrics HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n";
  if (write(fd, request.data(), request.size()) != static_cast<ssize_t>(request.size())) {
    close(fd);
    return absl::InternalError("short write");
  }
  std::string response;
  char buffer[8192];
  for (ssize_t n; (n = read(fd, buffer, sizeof(buffer))) > 0;) response.append(buffer, n);
  close(fd);
  const size_t body = response.find("\r\n\r\n");
  if (!absl::StartsWith(response, "HTTP/1.") || body == std::string::npos) {
    return absl::InternalError(absl::StrCat("not an HTTP response: ", response));
  }
  const std::string status_line = response.substr(0, response.find("\r\n"));
  if (!absl::StrContains(status_line, " 200 ")) {
    return absl::InternalError(absl::StrCat("scrape failed: ", status_line));
  }
  if (headers != nullptr) *headers = response.substr(0, body);
  return response.substr(body + 4);
}

// "name{labels}" → value, for every sample line of a text exposition.
std::map<std::string, double> Samples(const std::string& text) {
  std::map<std::string, double> samples;
  for (absl::string_view line : absl::StrSplit(text, '\n', absl::SkipEmpty())) {
    if (absl::StartsWith(line, "#")) continue;
    const size_t space = line.rfind(' ');
    double value = 0;
    EXPECT_TRUE(space != absl::string_view::npos &&
                absl::SimpleAtod(line.substr(space + 1), &value))
        << line;
    samples[std::string(line.substr(0, space))] = value;
  }
  return samples;
}

absl::StatusOr<std::map<std::string, double>> ScrapeSamples(int port) {
  absl::StatusOr<std::string> text = Scrape(port);
  if (!text.ok()) return text.status();
  return Samples(*text);
}

std::string Rows(const std::string& state) {
  return absl::StrCat("kvoffload_rows{engine=\"llama\",dp_rank=\"1\",state=\"", state, "\"}");
}

std::string Engine(const std::string& name) {
  return absl::StrCat(name, "{engine=\"llama\",dp_rank=\"1\"}");
}

TEST(MetricsTest, ScrapeFollowsTheEngines) {
  TempDir dir;
  auto daemon = StartDaemon(dir.path(), "127.0.0.1:0");
  ASSERT_TRUE(daemon.ok()) << daemon.status();
  const int port = (*daemon)->metrics_port();
  ASSERT_GT(port, 0);

  auto before = ScrapeSamples(port);
  ASSERT_TRUE(before.ok()) << before.status();
  EXPECT_EQ(before->at("kvoffload_up"), 1);
  EXPECT_EQ(before->at(absl::StrCat("kvoffload_build_info{version=\"", kKvoffloadVersion, "\"}")),
            1);
  EXPECT_EQ(before->at("kvoffload_engines"), 0);
  EXPECT_EQ(before->at("kvoffload_node_region_bytes"), 0);
  EXPECT_EQ(before->at("kvoffload_node_max_region_bytes"), kNodeCap);
  EXPECT_EQ(before->count(Rows("ready")), 0u);

  auto scheduler = client::SchedulerClient::Open((*daemon)->data_socket(), SmallEngine());
  ASSERT_TRUE(scheduler.ok()) << scheduler.status();
  auto opened = ScrapeSamples(port);
  ASSERT_TRUE(opened.ok()) << opened.status();
  EXPECT_EQ(opened->at("kvoffload_engines"), 1);
  EXPECT_EQ(opened->at(Engine("kvoffload_region_bytes")), 16 * 4096);
  // The region plus its index metadata (a few hundred bytes for 16 rows).
  EXPECT_GT(opened->at("kvoffload_node_region_bytes"), 16 * 4096);
  EXPECT_LT(opened->at("kvoffload_node_region_bytes"), 16 * 4096 + 4096);
  EXPECT_EQ(opened->at(Rows("free")), 16);
  EXPECT_EQ(opened->at(Rows("writing")), 0);
  EXPECT_EQ(opened->at(Rows("ready")), 0);
  EXPECT_EQ(opened->at(Rows("reading")), 0);
  EXPECT_EQ(opened->at(Rows("quarantined")), 0);
  EXPECT_EQ(opened->at(Engine("kvoffload_workers")), 0);
  EXPECT_EQ(opened->at(Engine("kvoffload_jobs_in_flight")), 0);
  EXPECT_EQ(opened->at(Engine("kvoffload_store_bytes_total")), 0);
  EXPECT_EQ(opened->at(Engine("kvoffload_job_latency_seconds_count")), 0);
  EXPECT_EQ(opened->at(absl::StrCat("kvoffload_job_latency_seconds_bucket{engine=\"llama\","
                                    "dp_rank=\"1\",le=\"+Inf\"}")),
            0);
  EXPECT_EQ(opened->at(absl::StrCat("kvoffload_job_latency_seconds_bucket{engine=\"llama\","
                                    "dp_rank=\"1\",le=\"1e-05\"}")),
            0);

  const std::vector<std::string> keys = {"a", "b", "c"};
  auto store = (*scheduler)->PrepareStore(keys);
  ASSERT_TRUE(store.ok()) << store.status();
  auto writing = ScrapeSamples(port);
  ASSERT_TRUE(writing.ok()) << writing.status();
  EXPECT_EQ(writing->at(Rows("writing")), 3);
  EXPECT_EQ(writing->at(Rows("free")), 13);
  EXPECT_EQ(writing->at(Rows("ready")), 0);

  ASSERT_TRUE(client::StoreRows((*daemon)->data_socket(), SmallEngine(), store->rows).ok());
  ASSERT_TRUE((*scheduler)->CompleteStore(keys, /*success=*/true).ok());
  ASSERT_TRUE((*scheduler)->Lookup({"a", "b", "zzz"}).ok());
  auto ready = ScrapeSamples(port);
  ASSERT_TRUE(ready.ok()) << ready.status();
  EXPECT_EQ(ready->at(Rows("writing")), 0);
  EXPECT_EQ(ready->at(Rows("ready")), 3);
  EXPECT_EQ(ready->at(Rows("free")), 13);
  EXPECT_EQ(ready->at(Engine("kvoffload_lookup_hits_total")), 2);
  EXPECT_EQ(ready->at(Engine("kvoffload_lookup_misses_total")), 1);
  EXPECT_EQ(ready->at(Engine("kvoffload_evictions_total")), 0);

  // Fill the region, then one more key evicts the least recently used one.
  std::vector<std::string> fill;
  for (int i = 0; i < 13; ++i) fill.push_back(absl::StrCat("fill", i));
  auto filled = (*scheduler)->PrepareStore(fill);
  ASSERT_TRUE(filled.ok());
  ASSERT_TRUE(client::StoreRows((*daemon)->data_socket(), SmallEngine(), filled->rows, 2).ok());
  ASSERT_TRUE((*scheduler)->CompleteStore(fill, true).ok());
  auto evicting = (*scheduler)->PrepareStore({"one-more"});
  ASSERT_TRUE(evicting.ok()) << evicting.status();
  EXPECT_EQ(evicting->evicted_keys.size(), 1u);
  auto full = ScrapeSamples(port);
  ASSERT_TRUE(full.ok()) << full.status();
  EXPECT_EQ(full->at(Engine("kvoffload_evictions_total")), 1);
  EXPECT_EQ(full->at(Rows("free")), 0);
  EXPECT_EQ(full->at(Rows("ready")), 15);
  EXPECT_EQ(full->at(Rows("writing")), 1);

  (*daemon)->Shutdown(absl::ZeroDuration());
  EXPECT_EQ(Scrape(port).status().code(), absl::StatusCode::kUnavailable);
}

TEST(MetricsTest, TextHasHelpAndTypeForEveryFamily) {
  TempDir dir;
  auto daemon = StartDaemon(dir.path(), "127.0.0.1:0");
  ASSERT_TRUE(daemon.ok()) << daemon.status();
  ASSERT_TRUE(client::SchedulerClient::Open((*daemon)->data_socket(), SmallEngine()).ok());
  auto text = Scrape((*daemon)->metrics_port());
  ASSERT_TRUE(text.ok()) << text.status();
  for (const char* name :
       {"kvoffload_up", "kvoffload_build_info", "kvoffload_node_region_bytes",
        "kvoffload_node_max_region_bytes", "kvoffload_engines", "kvoffload_region_bytes",
        "kvoffload_rows", "kvoffload_store_bytes_total", "kvoffload_load_bytes_total",
        "kvoffload_store_jobs_total", "kvoffload_load_jobs_total", "kvoffload_jobs_failed_total",
        "kvoffload_jobs_in_flight", "kvoffload_lookup_hits_total",
        "kvoffload_lookup_pending_hits_total", "kvoffload_lookup_misses_total",
        "kvoffload_evictions_total", "kvoffload_workers", "kvoffload_job_latency_seconds"}) {
    EXPECT_TRUE(absl::StrContains(*text, absl::StrCat("# HELP ", name, " "))) << name;
    EXPECT_TRUE(absl::StrContains(*text, absl::StrCat("# TYPE ", name, " "))) << name;
  }
  EXPECT_TRUE(absl::StrContains(*text, "# TYPE kvoffload_store_bytes_total counter"));
  EXPECT_TRUE(absl::StrContains(*text, "# TYPE kvoffload_rows gauge"));
  EXPECT_TRUE(absl::StrContains(*text, "# TYPE kvoffload_job_latency_seconds histogram"));
  // Exactly one +Inf bucket per engine (prometheus-cpp must not add a second one).
  const auto samples = Samples(*text);
  int buckets = 0;
  for (const auto& [series, value] : samples) {
    if (absl::StartsWith(series, "kvoffload_job_latency_seconds_bucket{")) ++buckets;
  }
  EXPECT_EQ(buckets, 22);
}

TEST(MetricsTest, ContentTypeNamesTheTextFormatVersion) {
  TempDir dir;
  auto daemon = StartDaemon(dir.path(), "127.0.0.1:0");
  ASSERT_TRUE(daemon.ok()) << daemon.status();
  std::string headers;
  auto text = Scrape((*daemon)->metrics_port(), &headers);
  ASSERT_TRUE(text.ok()) << text.status();
  EXPECT_TRUE(absl::StrContains(
      headers, "\r\nContent-Type: text/plain; version=0.0.4; charset=utf-8\r\n"))
      << headers;
  EXPECT_TRUE(absl::StrContains(*text, "kvoffload_node_max_region_bytes"));
}

TEST(MetricsTest, EmptyAddressDisablesTheEndpoint) {
  TempDir dir;
  auto daemon = StartDaemon(dir.path(), "");
  ASSERT_TRUE(daemon.ok()) << daemon.status();
  EXPECT_EQ((*daemon)->metrics_port(), 0);
}

TEST(MetricsTest, MalformedAddressIsInvalidArgument) {
  for (const char* address : {"9470", "127.0.0.1", ":9470", "127.0.0.1:http", "127.0.0.1:65536",
                              "127.0.0.1:9470s", "127.0.0.1:1,127.0.0.1:2", "::1:9470"}) {
    TempDir dir;
    auto daemon = StartDaemon(dir.path(), address);
    ASSERT_FALSE(daemon.ok()) << address;
    EXPECT_EQ(daemon.status().code(), absl::StatusCode::kInvalidArgument) << address;
    EXPECT_TRUE(absl::StrContains(daemon.status().message(), "is not host:port"))
        << daemon.status();
    EXPECT_TRUE(absl::StrContains(daemon.status().message(), address)) << daemon.status();
    // Nothing was left serving: the runtime dir has no socket.
    EXPECT_FALSE(std::filesystem::exists(dir.path() + "/" + kDataSocketName));
  }
}

TEST(MetricsTest, AddressInUseIsUnavailableAndLeavesNothingBehind) {
  // Hold a listening socket on a free loopback port.
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  ASSERT_GE(fd, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  ASSERT_EQ(listen(fd, 1), 0);
  socklen_t len = sizeof(addr);
  ASSERT_EQ(getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len), 0);
  const std::string address = absl::StrCat("127.0.0.1:", ntohs(addr.sin_port));

  TempDir dir;
  auto daemon = StartDaemon(dir.path(), address);
  ASSERT_FALSE(daemon.ok());
  EXPECT_EQ(daemon.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_TRUE(absl::StrContains(
      daemon.status().message(),
      absl::StrCat("cannot serve metrics on ", address, ": Address already in use")))
      << daemon.status();
  EXPECT_FALSE(std::filesystem::exists(dir.path() + "/" + kDataSocketName));
  close(fd);

  // The failed Start released the runtime dir's lock: the port is free now and Start succeeds.
  auto retry = StartDaemon(dir.path(), address);
  ASSERT_TRUE(retry.ok()) << retry.status();
  EXPECT_EQ((*retry)->metrics_port(), ntohs(addr.sin_port));
}

TEST(MetricsTest, AddressNotOnThisHostIsUnavailable) {
  TempDir dir;
  auto daemon = StartDaemon(dir.path(), "192.0.2.1:9470");  // TEST-NET-1, never local
  ASSERT_FALSE(daemon.ok());
  EXPECT_EQ(daemon.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_TRUE(absl::StrContains(daemon.status().message(),
                                "cannot serve metrics on 192.0.2.1:9470: Cannot assign requested"))
      << daemon.status();
}

TEST(MetricsAddressTest, AcceptsHostAndPort) {
  for (const char* address : {"127.0.0.1:9470", "0.0.0.0:0", "localhost:9470", "[::1]:9470"}) {
    EXPECT_TRUE(ValidateMetricsAddress(address).ok()) << address;
  }
}

}  // namespace
}  // namespace kvoffload::daemon
