#include "daemon/tier/cluster/cluster_options.h"

#include <sys/stat.h>

#include <cstdio>
#include <fstream>
#include <string>

#include "gtest/gtest.h"

namespace kvoffload::tier::cluster {
namespace {

ClusterTierOptions Good() {
  ClusterTierOptions o;
  o.seeds = {{"127.0.0.1", 7000}};
  return o;
}

TEST(ParseClusterUrl, OneAndSeveralSeeds) {
  absl::StatusOr<std::vector<NodeAddress>> one = ParseClusterUrl("redis://10.0.0.5:7000");
  ASSERT_TRUE(one.ok()) << one.status();
  ASSERT_EQ(one->size(), 1u);
  EXPECT_EQ((*one)[0].host, "10.0.0.5");
  EXPECT_EQ((*one)[0].port, 7000);

  absl::StatusOr<std::vector<NodeAddress>> three =
      ParseClusterUrl("redis://a.example:7000,b.example:7001,[::1]:7002");
  ASSERT_TRUE(three.ok()) << three.status();
  ASSERT_EQ(three->size(), 3u);
  EXPECT_EQ((*three)[1].ToString(), "b.example:7001");
  EXPECT_EQ((*three)[2].host, "::1");
  EXPECT_EQ((*three)[2].ToString(), "[::1]:7002");
}

TEST(ParseClusterUrl, RefusesWhatItDoesNotServe) {
  for (const char* url : {"", "redis:/h:1", "rediss://h:1", "http://h:1", "redis://",
                          "redis://h", "redis://h:0", "redis://h:65536", "redis://h:x",
                          "redis://:7000", "redis://h:1,", "redis://h:1/0", "redis://h:1?x=1",
                          "redis://::1:7000", "redis://[::1]7000"}) {
    absl::StatusOr<std::vector<NodeAddress>> r = ParseClusterUrl(url);
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << url;
  }
}

TEST(ParseClusterUrl, CredentialsAreRefusedAndNotEchoed) {
  absl::StatusOr<std::vector<NodeAddress>> r = ParseClusterUrl("redis://kvo:s3cret@h:7000");
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(std::string(r.status().message()).find("s3cret"), std::string::npos);
}

TEST(Validate, DefaultsWithASeedAreValid) { EXPECT_TRUE(Validate(Good()).ok()); }

TEST(Validate, EachBadFieldIsNamed) {
  struct Case {
    const char* field;
    void (*spoil)(ClusterTierOptions&);
  };
  const Case cases[] = {
      {"seeds", [](ClusterTierOptions& o) { o.seeds.clear(); }},
      {"seeds", [](ClusterTierOptions& o) { o.seeds[0].port = 0; }},
      {"key_prefix", [](ClusterTierOptions& o) { o.key_prefix = ""; }},
      {"key_prefix", [](ClusterTierOptions& o) { o.key_prefix = std::string(65, 'a'); }},
      {"key_prefix", [](ClusterTierOptions& o) { o.key_prefix = "a{b}"; }},
      {"key_prefix", [](ClusterTierOptions& o) { o.key_prefix = "a*"; }},
      {"key_prefix", [](ClusterTierOptions& o) { o.key_prefix = "a/b"; }},
      {"user", [](ClusterTierOptions& o) { o.user = "kvo"; }},
      {"user",
       [](ClusterTierOptions& o) {
         o.user = "k v";
         o.password_file = "/x";
       }},
      {"connect_timeout", [](ClusterTierOptions& o) { o.connect_timeout = absl::ZeroDuration(); }},
      {"command_timeout", [](ClusterTierOptions& o) { o.command_timeout = -absl::Seconds(1); }},
      {"lookup_timeout", [](ClusterTierOptions& o) { o.lookup_timeout = absl::ZeroDuration(); }},
      {"max_refresh_backoff",
       [](ClusterTierOptions& o) { o.max_refresh_backoff = absl::ZeroDuration(); }},
      {"connections_per_node", [](ClusterTierOptions& o) { o.connections_per_node = 0; }},
      {"connections_per_node", [](ClusterTierOptions& o) { o.connections_per_node = 65; }},
      {"max_value_bytes", [](ClusterTierOptions& o) { o.max_value_bytes = 4096; }},
      {"max_value_bytes", [](ClusterTierOptions& o) { o.max_value_bytes = (256ull << 20) + 1; }},
      {"threads", [](ClusterTierOptions& o) { o.threads = 0; }},
      {"max_queued", [](ClusterTierOptions& o) { o.max_queued = 0; }},
  };
  for (const Case& c : cases) {
    ClusterTierOptions o = Good();
    c.spoil(o);
    absl::Status s = Validate(o);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << c.field;
    EXPECT_NE(std::string(s.message()).find(c.field), std::string::npos) << s;
  }
}

std::string TempFile(const std::string& content) {
  std::string path = std::string(getenv("TEST_TMPDIR") ? getenv("TEST_TMPDIR") : "/tmp") +
                     "/secret." + std::to_string(rand());
  std::ofstream(path) << content;
  chmod(path.c_str(), 0600);
  return path;
}

TEST(ReadSecretFile, FirstLineWithoutItsNewline) {
  absl::StatusOr<std::string> s = ReadSecretFile(TempFile("pa ss\r\nsecond line\n"));
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(*s, "pa ss");
}

TEST(ReadSecretFile, EmptyMissingAndHugeAreRefused) {
  EXPECT_EQ(ReadSecretFile(TempFile("\n")).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ReadSecretFile("/nonexistent/kvo.secret").status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(ReadSecretFile(TempFile(std::string(5000, 'x'))).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace kvoffload::tier::cluster
