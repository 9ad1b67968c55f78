// SchedulerClient::Readiness and WaitUntilReady (readiness): the engine's readiness from
// the real kvoffloadd (host backend: ready by the time it is asked, every number exact), an
// engine that is gone, a daemon that is gone; and, against a stand-in daemon whose region stays
// half pinned (the real one cannot be held there on demand), the wait that ends when every row
// is registered and the one that ends DEADLINE_EXCEEDED saying how far the region got.
#include <memory>
#include <string>

#include "absl/strings/match.h"
#include "absl/time/clock.h"
#include "client/kvoffload_client.h"
#include "client/testing/readiness_daemon.h"
#include "client/testing/restartable_daemon.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "kvoffload/v1/kvoffload.grpc.pb.h"

namespace kvoffload::client {
namespace {

using testing::ReadinessDaemon;
using testing::RestartableDaemon;

EngineSpec Spec(const std::string& engine_id) {
  EngineSpec spec;
  spec.engine_id = engine_id;
  spec.num_layers = 4;
  spec.page_bytes = 8192;
  spec.budget_bytes = 4 << 20;
  return spec;
}

TEST(ReadinessTest, ARealDaemonsEngineIsReadyWithItsNumbers) {
  auto daemon = RestartableDaemon::Start();
  ASSERT_TRUE(daemon.ok()) << daemon.status();
  auto scheduler = SchedulerClient::Open((*daemon)->data_socket(), Spec("ready"));
  ASSERT_TRUE(scheduler.ok()) << scheduler.status();
  SchedulerClient& index = **scheduler;
  EXPECT_TRUE(index.WaitUntilReady(absl::Seconds(10)).ok());
  absl::StatusOr<EngineReadiness> r = index.Readiness();
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->region_epoch, index.region_epoch());
  EXPECT_EQ(r->num_rows, index.geometry().num_rows);
  EXPECT_EQ(r->rows_not_ready, 0u);
  EXPECT_TRUE(r->ready());
  EXPECT_EQ(r->region_bytes, index.geometry().num_rows * index.geometry().row_bytes);
  EXPECT_EQ(r->region_ready_bytes, r->region_bytes);
  EXPECT_GE(r->first_ready_seconds, 0);
  EXPECT_GE(r->fully_ready_seconds, r->first_ready_seconds);
}

TEST(ReadinessTest, AnEngineThatIsGoneIsNotFoundAtOnce) {
  auto daemon = RestartableDaemon::Start();
  ASSERT_TRUE(daemon.ok()) << daemon.status();
  auto scheduler = SchedulerClient::Open((*daemon)->data_socket(), Spec("dropped"));
  ASSERT_TRUE(scheduler.ok()) << scheduler.status();
  {
    auto admin = v1::Admin::NewStub(grpc::CreateChannel("unix:" + (*daemon)->admin_socket(),
                                                        grpc::InsecureChannelCredentials()));
    v1::DropEngineRequest drop;
    drop.set_engine_id("dropped");
    v1::Empty empty;
    grpc::ClientContext context;
    ASSERT_TRUE(admin->DropEngine(&context, drop, &empty).ok());
  }
  absl::StatusOr<EngineReadiness> r = (*scheduler)->Readiness();
  EXPECT_EQ(r.status().code(), absl::StatusCode::kNotFound) << r.status();
  EXPECT_TRUE(absl::StartsWith(r.status().message(), "engine dropped/0 is not in the Stats of "
                                                     "kvoffloadd at " + (*daemon)->admin_socket()))
      << r.status();
  const absl::Time start = absl::Now();
  absl::Status waited = (*scheduler)->WaitUntilReady(absl::Seconds(30));
  EXPECT_EQ(waited.code(), absl::StatusCode::kNotFound) << waited;
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));  // not the 30 s of the wait

  (*daemon)->Kill();  // the socket files stay; nobody listens on them
  r = (*scheduler)->Readiness();
  EXPECT_EQ(r.status().code(), absl::StatusCode::kUnavailable) << r.status();
  EXPECT_TRUE(absl::StrContains(r.status().message(), (*daemon)->admin_socket())) << r.status();
}

TEST(ReadinessTest, WaitsUntilEveryRowIsRegistered) {
  auto fake = ReadinessDaemon::Start("half", /*not_ready_answers=*/3);
  ASSERT_TRUE(fake.ok()) << fake.status();
  auto scheduler = SchedulerClient::Open((*fake)->data_socket(), Spec("half"));
  ASSERT_TRUE(scheduler.ok()) << scheduler.status();
  absl::StatusOr<EngineReadiness> r = (*scheduler)->Readiness();
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->region_epoch, ReadinessDaemon::kEpoch);
  EXPECT_EQ(r->num_rows, 128u);
  EXPECT_EQ(r->rows_not_ready, 96u);
  EXPECT_FALSE(r->ready());
  EXPECT_EQ(r->region_bytes, 1048576u);
  EXPECT_EQ(r->region_ready_bytes, 262144u);
  EXPECT_EQ(r->first_ready_seconds, 0.25);
  EXPECT_EQ(r->fully_ready_seconds, -1);

  EXPECT_TRUE((*scheduler)->WaitUntilReady(absl::Seconds(30), absl::Milliseconds(1)).ok());
  EXPECT_EQ((*fake)->stats_calls(), 4);  // two more not ready, then ready
  r = (*scheduler)->Readiness();
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->rows_not_ready, 0u);
  EXPECT_EQ(r->region_ready_bytes, 1048576u);
  EXPECT_EQ(r->fully_ready_seconds, 1.5);
}

TEST(ReadinessTest, DeadlineExceededSaysHowFarTheRegionGot) {
  auto fake = ReadinessDaemon::Start("stuck", /*not_ready_answers=*/-1);
  ASSERT_TRUE(fake.ok()) << fake.status();
  auto scheduler = SchedulerClient::Open((*fake)->data_socket(), Spec("stuck"));
  ASSERT_TRUE(scheduler.ok()) << scheduler.status();
  const absl::Time start = absl::Now();
  absl::Status waited =
      (*scheduler)->WaitUntilReady(absl::Milliseconds(200), absl::Milliseconds(20));
  const absl::Duration took = absl::Now() - start;
  EXPECT_EQ(waited.code(), absl::StatusCode::kDeadlineExceeded) << waited;
  EXPECT_EQ(waited.message(),
            "engine stuck/0 not ready after 200ms: 96 of 128 rows not ready yet, 262144 of "
            "1048576 region bytes registered");
  EXPECT_GE(took, absl::Milliseconds(200));
  EXPECT_LT(took, absl::Seconds(5));
  EXPECT_GE((*fake)->stats_calls(), 2);

  // No time at all: one look, then the answer.
  const int64_t calls = (*fake)->stats_calls();
  waited = (*scheduler)->WaitUntilReady(absl::ZeroDuration());
  EXPECT_EQ(waited.code(), absl::StatusCode::kDeadlineExceeded) << waited;
  EXPECT_EQ((*fake)->stats_calls(), calls + 1);
}

}  // namespace
}  // namespace kvoffload::client
