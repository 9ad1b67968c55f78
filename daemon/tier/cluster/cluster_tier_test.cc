// ClusterTier's own logic (parts, checks, threads, refusals, shutdown) on an in-memory back end:
// runs everywhere, Redis or not. The Redis back end: cluster_tier_redis_test.
#include "daemon/tier/cluster/cluster_tier.h"

#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "daemon/tier/cluster/testing/memory_backend.h"
#include "daemon/tier/cluster/testing/sync_calls.h"
#include "daemon/tier/record_format.h"
#include "gtest/gtest.h"

namespace kvoffload::tier::cluster {
namespace {

using testing::MemoryBackend;
using testing::Outcome;
using testing::ReadSync;
using testing::RowBytes;
using testing::WriteSync;

constexpr uint64_t kNs = 0xABCD;

ClusterTierOptions Options() {
  ClusterTierOptions o;
  o.seeds = {{"127.0.0.1", 1}};  // not used by the memory back end
  return o;
}

// Options whose values hold `part` payload bytes each.
ClusterTierOptions WithParts(uint64_t part) {
  ClusterTierOptions o = Options();
  o.max_value_bytes = kRecordHeaderBytes + part;
  return o;
}

std::unique_ptr<ClusterTier> Tier(const ClusterTierOptions& o,
                                  std::shared_ptr<MemoryBackend::State> state) {
  absl::StatusOr<std::unique_ptr<ClusterTier>> t =
      ClusterTier::CreateWithBackend(o, std::make_unique<MemoryBackend>(std::move(state)));
  EXPECT_TRUE(t.ok()) << t.status();
  return t.ok() ? *std::move(t) : nullptr;
}

TEST(ClusterTier, PartsRoundTripAcrossPartSizes) {
  auto state = std::make_shared<MemoryBackend::State>();
  std::unique_ptr<ClusterTier> a = Tier(WithParts(1000), state);
  std::unique_ptr<ClusterTier> b = Tier(WithParts(3000), state);
  for (size_t bytes : {1u, 999u, 1000u, 1001u, 2999u, 3000u, 7777u}) {
    const std::string key = "k" + std::to_string(bytes);
    const std::string row = RowBytes(bytes, bytes);
    ASSERT_EQ(WriteSync(*a, kNs, key, row), absl::OkStatus());
    {
      absl::MutexLock lock(&state->mu);
      EXPECT_EQ(state->values.count(a->ValueKey(kNs, key, (bytes - 1) / 1000)), 1u);
      EXPECT_EQ(state->values.count(a->ValueKey(kNs, key, (bytes - 1) / 1000 + 1)), 0u);
    }
    for (ClusterTier* t : {a.get(), b.get()}) {
      std::string got;
      absl::StatusOr<uint64_t> n = ReadSync(*t, kNs, key, got, 8000);
      ASSERT_TRUE(n.ok()) << bytes << ": " << n.status();
      EXPECT_EQ(*n, bytes);
      EXPECT_TRUE(got == row) << bytes;
    }
    // And the other way round: written with the larger parts.
    ASSERT_EQ(WriteSync(*b, kNs, key + "b", row), absl::OkStatus());
    std::string got;
    ASSERT_TRUE(ReadSync(*a, kNs, key + "b", got, 8000).ok()) << bytes;
    EXPECT_TRUE(got == row) << bytes;
  }
}

TEST(ClusterTier, ATamperedPartOfManyIsDataLossAndTheRecordIsDeleted) {
  auto state = std::make_shared<MemoryBackend::State>();
  std::unique_ptr<ClusterTier> t = Tier(WithParts(1000), state);
  ASSERT_EQ(WriteSync(*t, kNs, "r", RowBytes(1, 3500)), absl::OkStatus());
  const std::string part2 = t->ValueKey(kNs, "r", 2);
  {
    absl::MutexLock lock(&state->mu);
    state->values[part2][kRecordHeaderBytes + 10] ^= 1;
  }
  std::string got;
  EXPECT_EQ(ReadSync(*t, kNs, "r", got, 4000).status().code(), absl::StatusCode::kDataLoss);
  absl::MutexLock lock(&state->mu);
  EXPECT_TRUE(state->values.empty());  // all four parts forgotten
}

TEST(ClusterTier, PartsSwappedOrTruncatedAreDataLoss) {
  auto state = std::make_shared<MemoryBackend::State>();
  std::unique_ptr<ClusterTier> t = Tier(WithParts(1000), state);
  ASSERT_EQ(WriteSync(*t, kNs, "s", RowBytes(2, 2000)), absl::OkStatus());
  {
    absl::MutexLock lock(&state->mu);
    std::swap(state->values[t->ValueKey(kNs, "s", 0)], state->values[t->ValueKey(kNs, "s", 1)]);
  }
  std::string got;
  EXPECT_EQ(ReadSync(*t, kNs, "s", got, 2000).status().code(), absl::StatusCode::kDataLoss);
  ASSERT_EQ(WriteSync(*t, kNs, "u", RowBytes(3, 2000)), absl::OkStatus());
  {
    absl::MutexLock lock(&state->mu);
    state->values[t->ValueKey(kNs, "u", 1)].resize(kRecordHeaderBytes + 999);
  }
  EXPECT_EQ(ReadSync(*t, kNs, "u", got, 2000).status().code(), absl::StatusCode::kDataLoss);
}

TEST(ClusterTier, ServiceErrorsAreMissesWithTheirCode) {
  auto state = std::make_shared<MemoryBackend::State>();
  std::unique_ptr<ClusterTier> t = Tier(Options(), state);
  ASSERT_EQ(WriteSync(*t, kNs, "x", RowBytes(4, 100)), absl::OkStatus());
  state->Fail(absl::UnavailableError("node down"));
  std::string got;
  EXPECT_EQ(ReadSync(*t, kNs, "x", got, 100).status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(WriteSync(*t, kNs, "y", RowBytes(5, 100)).code(), absl::StatusCode::kUnavailable);
  EXPECT_FALSE(t->ContainsAll(kNs, {"x"})[0]);
  const RecordStoreStats s = t->record_stats();
  EXPECT_EQ(s.read_errors, 1u);
  EXPECT_EQ(s.write_errors, 1u);
}

TEST(ClusterTier, QueueBoundRefusesAndShutdownCancelsWhatDidNotStart) {
  auto state = std::make_shared<MemoryBackend::State>();
  ClusterTierOptions o = Options();
  o.threads = 2;
  o.max_queued = 5;
  std::unique_ptr<ClusterTier> t = Tier(o, state);
  state->Hold();  // the service hangs: both threads stay in it
  const std::string row = RowBytes(6, 64);
  std::vector<std::shared_ptr<Outcome<absl::Status>>> outs;
  for (int i = 0; i < 5; ++i) {
    outs.push_back(std::make_shared<Outcome<absl::Status>>());
    auto out = outs.back();
    ASSERT_EQ(t->Write(kNs, "q" + std::to_string(i), row.data(), row.size(),
                       [out](absl::Status s) { out->Set(std::move(s)); }),
              absl::OkStatus());
  }
  EXPECT_EQ(t->Write(kNs, "over", row.data(), row.size(), [](absl::Status) {
    ADD_FAILURE() << "done after a refusal";
  }).code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(t->record_stats().queue_depth, 5u);
  state->AwaitWaiting(2);  // two Writes are inside the service
  std::thread destroyer([&t] { t.reset(); });
  // The three queued Writes are cancelled while the two running ones still hang.
  int cancelled = 0;
  for (int i = 2; i < 5; ++i) {
    absl::Status s = outs[i]->Await();
    EXPECT_EQ(s.code(), absl::StatusCode::kCancelled);
    ++cancelled;
  }
  EXPECT_EQ(cancelled, 3);
  EXPECT_EQ(outs[0]->call_count(), 0);
  state->Release();
  destroyer.join();
  EXPECT_EQ(outs[0]->Await(), absl::OkStatus());
  EXPECT_EQ(outs[1]->Await(), absl::OkStatus());
  for (auto& out : outs) EXPECT_EQ(out->call_count(), 1);
}

TEST(ClusterTier, DropNamespaceAbortsQueuedWritesAndDeletesOnlyItsValues) {
  auto state = std::make_shared<MemoryBackend::State>();
  ClusterTierOptions o = Options();
  o.threads = 1;
  std::unique_ptr<ClusterTier> t = Tier(o, state);
  constexpr uint64_t kDropped = kNs + 1;
  ASSERT_EQ(WriteSync(*t, kNs, "keep", RowBytes(7, 10)), absl::OkStatus());
  ASSERT_EQ(WriteSync(*t, kDropped, "gone", RowBytes(8, 10)), absl::OkStatus());
  state->Hold();  // writes wait inside the service; the drop's sweep does not
  const std::string row = RowBytes(9, 10);
  auto running = std::make_shared<Outcome<absl::Status>>();
  auto queued = std::make_shared<Outcome<absl::Status>>();
  ASSERT_EQ(t->Write(kDropped, "running", row.data(), row.size(),
                     [running](absl::Status s) { running->Set(std::move(s)); }),
            absl::OkStatus());
  state->AwaitWaiting(1);
  ASSERT_EQ(t->Write(kDropped, "queued", row.data(), row.size(),
                     [queued](absl::Status s) { queued->Set(std::move(s)); }),
            absl::OkStatus());
  ASSERT_EQ(t->DropNamespace(kDropped), absl::OkStatus());
  state->Release();
  EXPECT_EQ(queued->Await().code(), absl::StatusCode::kAborted);
  // The documented limit: a write already running when the drop swept lands after it.
  EXPECT_EQ(running->Await(), absl::OkStatus());
  std::string got;
  EXPECT_EQ(ReadSync(*t, kDropped, "gone", got, 10).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(ReadSync(*t, kDropped, "queued", got, 10).status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_TRUE(ReadSync(*t, kDropped, "running", got, 10).ok());
  EXPECT_TRUE(ReadSync(*t, kNs, "keep", got, 10).ok());
}

}  // namespace
}  // namespace kvoffload::tier::cluster
