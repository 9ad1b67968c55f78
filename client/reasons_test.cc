// Error reasons end to end: a refusal's reason reaches the C++ client from a real daemon, and
// the scheduler's decision to re-open the engine rests on code + reason (engine_not_found,
// region_epoch_mismatch), never on the message; an answer about a key (key_not_in_index) or a
// refused spec does not re-open anything.
#include <map>
#include <memory>
#include <string>

#include "absl/strings/str_format.h"
#include "client/kvoffload_client.h"
#include "client/testing/restartable_daemon.h"
#include "common/error_info.h"
#include "common/refusals.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "kvoffload/v1/kvoffload.grpc.pb.h"

namespace kvoffload::client {
namespace {

using testing::RestartableDaemon;
using Metadata = std::map<std::string, std::string>;

EngineSpec Spec(const std::string& id) {
  EngineSpec spec;
  spec.engine_id = id;
  spec.num_layers = 2;
  spec.page_bytes = 4096;
  spec.budget_bytes = 1 << 20;
  return spec;
}

class ReasonsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto daemon = RestartableDaemon::Start();
    ASSERT_TRUE(daemon.ok()) << daemon.status();
    daemon_ = std::move(*daemon);
  }

  void Drop(const std::string& engine_id) {
    auto admin = v1::Admin::NewStub(grpc::CreateChannel(
        "unix:" + daemon_->admin_socket(), grpc::InsecureChannelCredentials()));
    grpc::ClientContext context;
    v1::DropEngineRequest request;
    request.set_engine_id(engine_id);
    request.set_force(true);
    v1::Empty response;
    const grpc::Status dropped = admin->DropEngine(&context, request, &response);
    ASSERT_TRUE(dropped.ok()) << dropped.error_message();
  }

  std::unique_ptr<RestartableDaemon> daemon_;
};

std::string Hex(uint64_t v) { return absl::StrFormat("%x", v); }

TEST_F(ReasonsTest, EpochMismatchAndMissingEngineReopenAKeyAnswerDoesNot) {
  auto a = SchedulerClient::Open(daemon_->data_socket(), Spec("reasons"));
  ASSERT_TRUE(a.ok()) << a.status();
  const uint64_t first = (*a)->region_epoch();
  ASSERT_TRUE((*a)->PrepareStore({"k"}).ok());

  // An answer about a key: NOT_FOUND key_not_in_index, and the engine is not re-opened.
  absl::Status unknown = (*a)->CompleteLoad({"never-stored"});
  EXPECT_EQ(unknown.code(), absl::StatusCode::kNotFound) << unknown;
  EXPECT_EQ(common::ErrorReason(unknown), common::reason::kKeyNotInIndex) << unknown;
  EXPECT_EQ(common::ErrorInfoOf(unknown).metadata.at("key_index"), "0");
  ASSERT_TRUE((*a)->Lookup({"k"}).ok());
  EXPECT_EQ((*a)->reopens(), 0u);

  // Dropped and re-created by another client: the index call names the old region.
  Drop("reasons");
  auto b = SchedulerClient::Open(daemon_->data_socket(), Spec("reasons"));
  ASSERT_TRUE(b.ok()) << b.status();
  const uint64_t second = (*b)->region_epoch();
  ASSERT_NE(second, first);
  auto stale = (*a)->Lookup({"k"});
  EXPECT_EQ(stale.status().code(), absl::StatusCode::kFailedPrecondition) << stale.status();
  EXPECT_EQ(common::ErrorReason(stale.status()), common::reason::kRegionEpochMismatch);
  EXPECT_EQ(common::ErrorInfoOf(stale.status()).metadata,
            (Metadata{{"planned_epoch", Hex(first)}, {"region_epoch", Hex(second)}}));
  auto fresh = (*a)->Lookup({"k"});  // re-opened first, in the new region
  ASSERT_TRUE(fresh.ok()) << fresh.status();
  EXPECT_EQ((*fresh)[0], KeyState::kMiss);
  EXPECT_EQ((*a)->region_epoch(), second);
  EXPECT_EQ((*a)->reopens(), 1u);

  // Dropped and not re-created: engine_not_found, then the next call re-opens (creates) it.
  Drop("reasons");
  auto gone = (*a)->Lookup({"k"});
  EXPECT_EQ(gone.status().code(), absl::StatusCode::kNotFound) << gone.status();
  EXPECT_EQ(common::ErrorReason(gone.status()), common::reason::kEngineNotFound);
  EXPECT_EQ(common::ErrorInfoOf(gone.status()).metadata, (Metadata{{"engine", "reasons/0"}}));
  ASSERT_TRUE((*a)->Lookup({"k"}).ok());
  EXPECT_EQ((*a)->reopens(), 2u);
}

// A call split into several requests names the unknown key by its place in the whole call.
TEST_F(ReasonsTest, KeyIndexCountsInTheWholeSplitCall) {
  ClientOptions options;
  options.max_keys_per_request = 2;
  auto a = SchedulerClient::Open(daemon_->data_socket(), Spec("reasons-split"), 0, options);
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_TRUE((*a)->PrepareStore({"a", "b", "c"}).ok());
  absl::Status s = (*a)->CompleteStore({"a", "b", "c", "never-stored"}, /*success=*/false);
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound) << s;
  EXPECT_EQ(common::ErrorInfoOf(s).metadata,
            (Metadata{{"key_index", "3"}, {"operation", "CompleteStore"}}))
      << s;
}

TEST_F(ReasonsTest, OpenRefusalsCarryTheirReasons) {
  auto a = SchedulerClient::Open(daemon_->data_socket(), Spec("reasons-open"));
  ASSERT_TRUE(a.ok()) << a.status();
  const uint64_t epoch = (*a)->region_epoch();

  EngineSpec other = Spec("reasons-open");
  other.page_bytes = 8192;
  auto mismatch = SchedulerClient::Open(daemon_->data_socket(), other);
  EXPECT_EQ(mismatch.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(common::ErrorReason(mismatch.status()), common::reason::kSpecMismatch);
  EXPECT_EQ(common::ErrorInfoOf(mismatch.status()).metadata,
            (Metadata{{"engine", "reasons-open/0"}}));

  EngineSpec pp = Spec("reasons-pp");
  pp.world_size = 2;
  pp.local_world_size = 2;
  pp.pp = 2;
  auto rule = SchedulerClient::Open(daemon_->data_socket(), pp);
  EXPECT_EQ(rule.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(common::ErrorReason(rule.status()), common::reason::kSpecRule);
  EXPECT_EQ(common::ErrorInfoOf(rule.status()).metadata,
            (Metadata{{"rule", "no_pipeline_parallel"}}));

  // The registry's door of the epoch rule: a region that no longer exists.
  Drop("reasons-open");
  auto old = SchedulerClient::Open(daemon_->data_socket(), Spec("reasons-open"), epoch);
  EXPECT_EQ(old.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(common::ErrorReason(old.status()), common::reason::kRegionEpochMismatch);
  EXPECT_EQ(common::ErrorInfoOf(old.status()).metadata,
            (Metadata{{"planned_epoch", Hex(epoch)}, {"region_epoch", "0"}}));
}

}  // namespace
}  // namespace kvoffload::client
