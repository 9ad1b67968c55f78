// The cluster tier against a real Redis Cluster (3 masters + 3 replicas on loopback, started by
// the test: testing/local_cluster.h). Skips when redis-server is not installed.
#include <hiredis/hiredis.h>
#include <sys/stat.h>

#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "daemon/tier/cluster/cluster_tier.h"
#include "daemon/tier/cluster/key_slot.h"
#include "daemon/tier/cluster/redis_cluster.h"
#include "daemon/tier/cluster/testing/local_cluster.h"
#include "daemon/tier/cluster/testing/sync_calls.h"
#include "daemon/tier/record_format.h"
#include "gtest/gtest.h"

namespace kvoffload::tier::cluster {
namespace {

using testing::LocalCluster;
using testing::ReadSync;
using testing::RowBytes;
using testing::WriteSync;

constexpr char kAclUser[] = "kvo";
constexpr char kAclPassword[] = "acl-pass-7f3a";
constexpr char kAclPrefix[] = "kvo-acl";
constexpr uint64_t kNs = 0x1111222233334444ull;
constexpr uint64_t kOtherNs = 0x5555666677778888ull;

class ClusterTierRedisTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    testing::LocalClusterOptions o;
    // An ACL user confined to one key prefix (the per-deployment prefix); the default user
    // stays open for the test's own tooling.
    o.config_lines = {absl::StrCat("user ", kAclUser, " on >", kAclPassword, " ~", kAclPrefix,
                                   "/* +@all")};
    absl::StatusOr<std::unique_ptr<LocalCluster>> c = LocalCluster::Start(o);
    if (!c.ok()) {
      start_error_ = new absl::Status(c.status());
      return;
    }
    cluster_ = c->release();
  }
  static void TearDownTestSuite() {
    delete cluster_;
    cluster_ = nullptr;
    delete start_error_;
    start_error_ = nullptr;
  }
  void SetUp() override {
    if (start_error_ != nullptr && absl::IsFailedPrecondition(*start_error_)) {
      GTEST_SKIP() << "no Redis to test against: " << start_error_->message();
    }
    ASSERT_NE(cluster_, nullptr) << "local Redis Cluster did not start: " << *start_error_;
  }

  static ClusterTierOptions Options() {
    ClusterTierOptions o;
    o.seeds = cluster_->seeds();
    o.key_prefix = "kvo-test";
    o.threads = 3;
    o.connections_per_node = 2;
    return o;
  }
  static std::unique_ptr<ClusterTier> MakeTier(const ClusterTierOptions& o) {
    absl::StatusOr<std::unique_ptr<ClusterTier>> t = ClusterTier::Create(o);
    EXPECT_TRUE(t.ok()) << t.status();
    return t.ok() ? *std::move(t) : nullptr;
  }
  static std::string SecretFile(const std::string& secret) {
    const std::string path = absl::StrCat(cluster_->dir(), "/secret.", rand());
    std::ofstream(path) << secret << "\n";
    chmod(path.c_str(), 0600);
    return path;
  }
  // A raw client on the same cluster, for tampering with values as another writer would.
  static std::unique_ptr<RedisCluster> Raw() {
    absl::StatusOr<std::unique_ptr<RedisCluster>> r = RedisCluster::Connect(Options(), {});
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? *std::move(r) : nullptr;
  }
  static int NodeOfKey(const std::string& key) {
    absl::StatusOr<int> n = cluster_->MasterOf(KeySlot(key));
    EXPECT_TRUE(n.ok()) << n.status();
    return n.ok() ? *n : 0;
  }

  static LocalCluster* cluster_;
  static absl::Status* start_error_;
};

LocalCluster* ClusterTierRedisTest::cluster_ = nullptr;
absl::Status* ClusterTierRedisTest::start_error_ = nullptr;

TEST_F(ClusterTierRedisTest, KeySlotAgreesWithClusterKeyslot) {
  for (int i = 0; i < 64; ++i) {
    const std::string key = absl::StrCat("kvo/", absl::Hex(i * 7919), "/", i, i % 3 ? "" : "{t}");
    absl::StatusOr<Reply> r = cluster_->Command(0, {"CLUSTER", "KEYSLOT", key});
    ASSERT_TRUE(r.ok()) << r.status();
    ASSERT_EQ((*r)->type, REDIS_REPLY_INTEGER);
    EXPECT_EQ((*r)->integer, KeySlot(key)) << key;
  }
}

TEST_F(ClusterTierRedisTest, StoreOnOneNodeLoadOnAnotherByteExact) {
  ClusterTierOptions o = Options();
  std::unique_ptr<ClusterTier> writer = MakeTier(o);
  std::unique_ptr<ClusterTier> reader = MakeTier(o);  // a second node: its own client
  ASSERT_NE(writer, nullptr);
  ASSERT_NE(reader, nullptr);
  constexpr size_t kRow = 2u << 20;
  std::vector<std::string> keys;
  for (int i = 0; i < 12; ++i) {
    keys.push_back(absl::StrCat("block-", i));
    ASSERT_EQ(WriteSync(*writer, kNs, keys.back(), RowBytes(i, kRow)), absl::OkStatus());
  }
  std::vector<std::string> asked = keys;
  asked.push_back("never-written");
  std::vector<bool> found = reader->ContainsAll(kNs, asked);
  for (size_t i = 0; i < keys.size(); ++i) EXPECT_TRUE(found[i]) << keys[i];
  EXPECT_FALSE(found.back());
  for (int i = 0; i < 12; ++i) {
    std::string got;
    absl::StatusOr<uint64_t> n = ReadSync(*reader, kNs, keys[i], got, kRow);
    ASSERT_TRUE(n.ok()) << n.status();
    EXPECT_EQ(*n, kRow);
    EXPECT_TRUE(got == RowBytes(i, kRow)) << keys[i];
  }
  const RecordStoreStats w = writer->record_stats();
  const RecordStoreStats r = reader->record_stats();
  EXPECT_EQ(w.writes_ok, 12u);
  EXPECT_EQ(w.bytes_written, 12 * kRow);
  EXPECT_EQ(r.reads_ok, 12u);
  EXPECT_EQ(r.bytes_read, 12 * kRow);
}

TEST_F(ClusterTierRedisTest, LargeRowsAreSplitIntoPartsAndReassembled) {
  ClusterTierOptions o = Options();
  o.max_value_bytes = (256u << 10) + kRecordHeaderBytes;  // parts of 256 KiB
  std::unique_ptr<ClusterTier> writer = MakeTier(o);
  ClusterTierOptions big = Options();  // a reader with the default (8 MiB) values
  std::unique_ptr<ClusterTier> reader = MakeTier(big);
  ASSERT_NE(writer, nullptr);
  ASSERT_NE(reader, nullptr);
  const size_t row = (1u << 20) + 12345;  // 5 parts, the last short
  const std::string bytes = RowBytes(77, row);
  ASSERT_EQ(WriteSync(*writer, kNs, "split-row", bytes), absl::OkStatus());
  for (uint64_t part = 0; part < 5; ++part) {
    absl::StatusOr<Reply> r =
        cluster_->Command(NodeOfKey(writer->ValueKey(kNs, "split-row", part)),
                          {"STRLEN", writer->ValueKey(kNs, "split-row", part)});
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ((*r)->integer, static_cast<long long>(kRecordHeaderBytes +
                                                    (part < 4 ? 256u << 10 : row - 4 * (256u << 10))));
  }
  for (ClusterTier* t : {writer.get(), reader.get()}) {
    std::string got;
    absl::StatusOr<uint64_t> n = ReadSync(*t, kNs, "split-row", got, 2u << 20);
    ASSERT_TRUE(n.ok()) << n.status();
    EXPECT_EQ(*n, row);
    EXPECT_TRUE(got == bytes);
  }
  // A record longer than the reader's memory is refused, not truncated.
  std::string small;
  EXPECT_EQ(ReadSync(*reader, kNs, "split-row", small, 1u << 20).status().code(),
            absl::StatusCode::kInvalidArgument);
  // A part evicted (deleted) makes the record a miss.
  std::unique_ptr<RedisCluster> raw = Raw();
  ASSERT_NE(raw, nullptr);
  ASSERT_EQ(raw->Delete({writer->ValueKey(kNs, "split-row", 3)}, absl::Now() + absl::Seconds(2))[0],
            absl::OkStatus());
  std::string got;
  EXPECT_EQ(ReadSync(*reader, kNs, "split-row", got, 2u << 20).status().code(),
            absl::StatusCode::kNotFound);
}

// A slot migrated while the tier's slot map still names its old master: ASK while the slot is
// migrating (the key already moved), MOVED once it belongs to the new master. Both followed.
TEST_F(ClusterTierRedisTest, AskAndMovedRedirectsAreFollowed) {
  ClusterTierOptions o = Options();
  o.refresh_interval = absl::Hours(1);  // only the first refresh comes: the map stays stale
  std::unique_ptr<ClusterTier> tier = MakeTier(o);
  ASSERT_NE(tier, nullptr);
  const std::string bytes = RowBytes(42, 70000);
  ASSERT_EQ(WriteSync(*tier, kNs, "migrating", bytes), absl::OkStatus());
  const std::string value_key = tier->ValueKey(kNs, "migrating", 0);
  const int slot = KeySlot(value_key);
  const int src = NodeOfKey(value_key);
  int dst = -1;
  for (int i = 0; i < static_cast<int>(cluster_->nodes().size()) && dst < 0; ++i) {
    absl::StatusOr<Reply> role = cluster_->Command(i, {"ROLE"});
    ASSERT_TRUE(role.ok());
    if (i != src && std::string((*role)->element[0]->str) == "master") dst = i;
  }
  ASSERT_GE(dst, 0);
  auto id_of = [](int node) {
    absl::StatusOr<Reply> r = cluster_->Command(node, {"CLUSTER", "MYID"});
    return r.ok() ? std::string((*r)->str, (*r)->len) : std::string();
  };
  const std::string src_id = id_of(src);
  const std::string dst_id = id_of(dst);
  const std::string slot_text = absl::StrCat(slot);
  auto ok = [](absl::StatusOr<Reply> r) {
    return r.ok() && (*r)->type != REDIS_REPLY_ERROR ? std::string("OK")
           : r.ok() ? std::string((*r)->str, (*r)->len)
                    : r.status().ToString();
  };
  ASSERT_EQ(ok(cluster_->Command(dst, {"CLUSTER", "SETSLOT", slot_text, "IMPORTING", src_id})),
            "OK");
  ASSERT_EQ(ok(cluster_->Command(src, {"CLUSTER", "SETSLOT", slot_text, "MIGRATING", dst_id})),
            "OK");
  ASSERT_EQ(ok(cluster_->Command(src, {"MIGRATE", "127.0.0.1",
                                       absl::StrCat(cluster_->nodes()[dst].port), "", "0", "5000",
                                       "KEYS", value_key})),
            "OK");
  std::string got;
  ASSERT_TRUE(ReadSync(*tier, kNs, "migrating", got, 70000).ok());
  EXPECT_TRUE(got == bytes);
  const uint64_t after_ask = tier->backend_stats().redirects;
  EXPECT_GE(after_ask, 1u);  // ASK
  for (int i = 0; i < static_cast<int>(cluster_->nodes().size()); ++i) {
    absl::StatusOr<Reply> role = cluster_->Command(i, {"ROLE"});
    ASSERT_TRUE(role.ok());
    if (std::string((*role)->element[0]->str) != "master") continue;
    ASSERT_EQ(ok(cluster_->Command(i, {"CLUSTER", "SETSLOT", slot_text, "NODE", dst_id})), "OK");
  }
  ASSERT_TRUE(ReadSync(*tier, kNs, "migrating", got, 70000).ok());
  EXPECT_TRUE(got == bytes);
  EXPECT_GT(tier->backend_stats().redirects, after_ask);  // MOVED
  EXPECT_TRUE(tier->ContainsAll(kNs, {"migrating"})[0]);
}

TEST_F(ClusterTierRedisTest, MissIsNotFound) {
  std::unique_ptr<ClusterTier> tier = MakeTier(Options());
  ASSERT_NE(tier, nullptr);
  std::string got;
  EXPECT_EQ(ReadSync(*tier, kNs, "absent", got, 4096).status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(tier->record_stats().read_misses, 1u);
}

TEST_F(ClusterTierRedisTest, ValueOverwrittenWithRedisCliIsDataLossAndForgotten) {
  std::unique_ptr<ClusterTier> tier = MakeTier(Options());
  ASSERT_NE(tier, nullptr);
  ASSERT_EQ(WriteSync(*tier, kNs, "victim", RowBytes(5, 65536)), absl::OkStatus());
  const std::string value_key = tier->ValueKey(kNs, "victim", 0);
  absl::StatusOr<int> rc = cluster_->Cli(0, {"-c", "SET", value_key, "not a record"});
  ASSERT_TRUE(rc.ok()) << rc.status();
  ASSERT_EQ(*rc, 0);
  std::string got;
  EXPECT_EQ(ReadSync(*tier, kNs, "victim", got, 65536).status().code(),
            absl::StatusCode::kDataLoss);
  EXPECT_EQ(tier->record_stats().read_corrupt, 1u);
  // Forgotten: deleted from the cluster, so the next lookup misses.
  EXPECT_FALSE(tier->ContainsAll(kNs, {"victim"})[0]);
  EXPECT_EQ(ReadSync(*tier, kNs, "victim", got, 65536).status().code(),
            absl::StatusCode::kNotFound);
}

TEST_F(ClusterTierRedisTest, OneFlippedPayloadByteIsDataLoss) {
  std::unique_ptr<ClusterTier> tier = MakeTier(Options());
  std::unique_ptr<RedisCluster> raw = Raw();
  ASSERT_NE(tier, nullptr);
  ASSERT_NE(raw, nullptr);
  ASSERT_EQ(WriteSync(*tier, kNs, "flip", RowBytes(6, 100000)), absl::OkStatus());
  const std::string value_key = tier->ValueKey(kNs, "flip", 0);
  const absl::Time deadline = absl::Now() + absl::Seconds(2);
  std::vector<KvValue> v = raw->Get({value_key}, deadline);
  ASSERT_TRUE(v[0].status.ok()) << v[0].status;
  std::string value(v[0].bytes);
  value[kRecordHeaderBytes + 54321] ^= 0x10;
  const std::string head = value.substr(0, kRecordHeaderBytes);
  const std::string body = value.substr(kRecordHeaderBytes);
  ASSERT_EQ(raw->Put({{value_key, head, body}}, deadline)[0], absl::OkStatus());
  std::string got;
  absl::StatusOr<uint64_t> n = ReadSync(*tier, kNs, "flip", got, 100000);
  EXPECT_EQ(n.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(std::string(n.status().message()).find("checksum"), std::string::npos) << n.status();
}

TEST_F(ClusterTierRedisTest, ForeignNamespaceOrPrefixIsAMiss) {
  std::unique_ptr<ClusterTier> tier = MakeTier(Options());
  ClusterTierOptions other_deployment = Options();
  other_deployment.key_prefix = "kvo-elsewhere";
  std::unique_ptr<ClusterTier> elsewhere = MakeTier(other_deployment);
  std::unique_ptr<RedisCluster> raw = Raw();
  ASSERT_NE(tier, nullptr);
  ASSERT_NE(elsewhere, nullptr);
  ASSERT_NE(raw, nullptr);
  const std::string bytes = RowBytes(8, 30000);
  ASSERT_EQ(WriteSync(*tier, kNs, "shared-key", bytes), absl::OkStatus());
  std::string got;
  // Another namespace (model, layout or pool) and another deployment prefix: not found.
  EXPECT_EQ(ReadSync(*tier, kOtherNs, "shared-key", got, 30000).status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_FALSE(tier->ContainsAll(kOtherNs, {"shared-key"})[0]);
  EXPECT_EQ(ReadSync(*elsewhere, kNs, "shared-key", got, 30000).status().code(),
            absl::StatusCode::kNotFound);
  // A value of namespace kNs copied under kOtherNs's key (a confused or hostile writer): its
  // header names the wrong namespace, so it is never served.
  const absl::Time deadline = absl::Now() + absl::Seconds(2);
  std::vector<KvValue> v = raw->Get({tier->ValueKey(kNs, "shared-key", 0)}, deadline);
  ASSERT_TRUE(v[0].status.ok());
  const std::string value(v[0].bytes);
  ASSERT_EQ(raw->Put({{tier->ValueKey(kOtherNs, "shared-key", 0), value, ""}}, deadline)[0],
            absl::OkStatus());
  absl::StatusOr<uint64_t> n = ReadSync(*tier, kOtherNs, "shared-key", got, 30000);
  EXPECT_EQ(n.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(std::string(n.status().message()).find("foreign"), std::string::npos) << n.status();
  // The same for another key's value under this key.
  ASSERT_EQ(raw->Put({{tier->ValueKey(kNs, "other-key", 0), value, ""}}, deadline)[0],
            absl::OkStatus());
  EXPECT_EQ(ReadSync(*tier, kNs, "other-key", got, 30000).status().code(),
            absl::StatusCode::kDataLoss);
  // The original is untouched.
  ASSERT_TRUE(ReadSync(*tier, kNs, "shared-key", got, 30000).ok());
  EXPECT_TRUE(got == bytes);
}

TEST_F(ClusterTierRedisTest, DropNamespaceForgetsOnlyThatNamespace) {
  std::unique_ptr<ClusterTier> tier = MakeTier(Options());
  ASSERT_NE(tier, nullptr);
  constexpr uint64_t kDropped = 0xD0D0;
  constexpr uint64_t kKept = 0xCAFE;
  for (int i = 0; i < 20; ++i) {
    ASSERT_EQ(WriteSync(*tier, kDropped, absl::StrCat("k", i), RowBytes(i, 5000)),
              absl::OkStatus());
  }
  ASSERT_EQ(WriteSync(*tier, kKept, "k0", RowBytes(99, 5000)), absl::OkStatus());
  ASSERT_EQ(tier->DropNamespace(kDropped), absl::OkStatus());
  std::string got;
  for (int i = 0; i < 20; ++i) {
    EXPECT_EQ(ReadSync(*tier, kDropped, absl::StrCat("k", i), got, 5000).status().code(),
              absl::StatusCode::kNotFound);
  }
  ASSERT_TRUE(ReadSync(*tier, kKept, "k0", got, 5000).ok());
  EXPECT_TRUE(got == RowBytes(99, 5000));
}

TEST_F(ClusterTierRedisTest, AclUserAndKeyPrefix) {
  ClusterTierOptions o = Options();
  o.user = kAclUser;
  o.password_file = SecretFile(kAclPassword);
  o.key_prefix = kAclPrefix;
  std::unique_ptr<ClusterTier> tier = MakeTier(o);
  ASSERT_NE(tier, nullptr);
  const std::string bytes = RowBytes(3, 40000);
  ASSERT_EQ(WriteSync(*tier, kNs, "acl-row", bytes), absl::OkStatus());
  std::string got;
  ASSERT_TRUE(ReadSync(*tier, kNs, "acl-row", got, 40000).ok());
  EXPECT_TRUE(got == bytes);

  // The user may not write outside its prefix.
  ClusterTierOptions outside = o;
  outside.key_prefix = "kvo-not-mine";
  std::unique_ptr<ClusterTier> trespasser = MakeTier(outside);
  ASSERT_NE(trespasser, nullptr);
  EXPECT_EQ(WriteSync(*trespasser, kNs, "acl-row", bytes).code(),
            absl::StatusCode::kPermissionDenied);

  // A wrong password: refused at Create, and the message holds no secret.
  ClusterTierOptions wrong = o;
  wrong.password_file = SecretFile("not-the-password");
  absl::StatusOr<std::unique_ptr<ClusterTier>> refused = ClusterTier::Create(wrong);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kUnauthenticated);
  EXPECT_EQ(std::string(refused.status().message()).find("not-the-password"), std::string::npos);
}

TEST_F(ClusterTierRedisTest, ConcurrentCallsEachCallbackExactlyOnce) {
  ClusterTierOptions o = Options();
  std::unique_ptr<ClusterTier> tier = MakeTier(o);
  ASSERT_NE(tier, nullptr);
  constexpr int kRows = 48;
  constexpr size_t kRow = 256u << 10;
  std::vector<std::string> rows;
  for (int i = 0; i < kRows; ++i) rows.push_back(RowBytes(1000 + i, kRow));
  std::vector<std::shared_ptr<testing::Outcome<absl::Status>>> writes;
  for (int i = 0; i < kRows; ++i) {
    writes.push_back(std::make_shared<testing::Outcome<absl::Status>>());
    auto out = writes.back();
    ASSERT_EQ(tier->Write(kNs, absl::StrCat("conc-", i), rows[i].data(), kRow,
                          [out](absl::Status s) { out->Set(std::move(s)); }),
              absl::OkStatus());
  }
  for (auto& w : writes) EXPECT_EQ(w->Await(), absl::OkStatus());
  std::vector<std::string> dst(kRows, std::string(kRow, '\0'));
  std::vector<std::shared_ptr<testing::Outcome<absl::StatusOr<uint64_t>>>> reads;
  std::vector<std::thread> callers;
  for (int t = 0; t < 4; ++t) {
    for (int i = t; i < kRows; i += 4) {
      reads.push_back(std::make_shared<testing::Outcome<absl::StatusOr<uint64_t>>>());
    }
  }
  for (int t = 0; t < 4; ++t) {
    callers.emplace_back([&, t] {
      for (int i = t; i < kRows; i += 4) {
        auto out = reads[i];
        EXPECT_EQ(tier->Read(kNs, absl::StrCat("conc-", i), dst[i].data(), kRow,
                             [out](absl::StatusOr<uint64_t> n) { out->Set(std::move(n)); }),
                  absl::OkStatus());
      }
    });
  }
  for (std::thread& c : callers) c.join();
  for (int i = 0; i < kRows; ++i) {
    absl::StatusOr<uint64_t> n = reads[i]->Await();
    ASSERT_TRUE(n.ok()) << n.status();
    EXPECT_TRUE(dst[i] == rows[i]) << i;
  }
  tier.reset();  // waits for the tier's threads: no callback can come later
  for (auto& w : writes) EXPECT_EQ(w->call_count(), 1);
  for (auto& r : reads) EXPECT_EQ(r->call_count(), 1);
}

TEST_F(ClusterTierRedisTest, RefusalsAreImmediate) {
  std::unique_ptr<ClusterTier> tier = MakeTier(Options());
  ASSERT_NE(tier, nullptr);
  char buf[16];
  auto never = [](absl::Status) { ADD_FAILURE() << "done called after a refusal"; };
  EXPECT_EQ(tier->Write(kNs, "", buf, sizeof(buf), never).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(tier->Write(kNs, std::string(257, 'k'), buf, sizeof(buf), never).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(tier->Write(kNs, "k", buf, 0, never).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(tier->Read(kNs, "k", buf, 0, [](absl::StatusOr<uint64_t>) {
    ADD_FAILURE() << "done called after a refusal";
  }).code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(ClusterTierRedisTest, WithNoSeedAnsweringCreateGivesAnEmptyTierThatRefusesWrites) {
  ClusterTierOptions o = Options();
  o.seeds = {{"127.0.0.1", 1}};  // nothing listens on port 1
  absl::StatusOr<std::unique_ptr<ClusterTier>> tier = ClusterTier::Create(o);
  ASSERT_TRUE(tier.ok()) << tier.status();
  EXPECT_FALSE((*tier)->backend_stats().connected);
  EXPECT_EQ(WriteSync(**tier, kNs, "k", RowBytes(1, 100)).code(), absl::StatusCode::kUnavailable);
  std::string got;
  EXPECT_EQ(ReadSync(**tier, kNs, "k", got, 100).status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ((*tier)->ContainsAll(kNs, {"k"}), std::vector<bool>{false});
  EXPECT_EQ((*tier)->DropNamespace(kNs).code(), absl::StatusCode::kUnavailable);
}

}  // namespace
}  // namespace kvoffload::tier::cluster
