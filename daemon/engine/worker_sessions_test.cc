#include "daemon/engine/worker_sessions.h"

#include <memory>

#include "daemon/engine/verdicts.h"
#include "gtest/gtest.h"

namespace kvoffload::daemon {
namespace {

class FakeMemory final : public WorkerMemory {
 public:
  uint64_t num_blocks() const override { return 8; }
  uint64_t bytes_per_block() const override { return 8192; }
  size_t num_events() const override { return 0; }
};

class RecordingListener final : public JobListener {
 public:
  void OnJobFinished(const JobResult& result) override { finished.push_back(result.job_id); }
  void OnEngineClosed(const absl::Status& why) override { closed = why; }
  std::vector<uint64_t> finished;
  absl::Status closed;
};

common::Geometry GeometryOf(common::EngineSpec spec) {
  auto geometry = common::ComputeGeometry(spec);
  EXPECT_TRUE(geometry.ok()) << geometry.status();
  return *geometry;
}

common::EngineSpec Spec(uint32_t world, uint32_t local, common::Attention attention) {
  common::EngineSpec spec;
  spec.world_size = world;
  spec.tp = world;
  spec.local_world_size = local;
  spec.attention = attention;
  spec.num_kv_groups = attention == common::Attention::kMla ? 1 : world;
  spec.num_layers = 2;
  spec.page_bytes = 4096;
  spec.budget_bytes = 1 << 20;
  return spec;
}

WorkerRegistration Registration(std::vector<uint64_t> pages) {
  WorkerRegistration r;
  for (uint64_t p : pages) {
    TensorRegistration t;
    t.page_bytes = p;
    r.tensors.push_back(t);
  }
  return r;
}

TEST(CheckWorkerRegistrationTest, NamesWhatIsWrong) {
  const common::EngineSpec spec = Spec(2, 2, common::Attention::kMha);
  const common::Geometry g = GeometryOf(spec);
  EXPECT_TRUE(CheckWorkerRegistration(spec, g, 1, Registration({4096, 4096})).ok());
  EXPECT_EQ(CheckWorkerRegistration(spec, g, 2, Registration({4096, 4096})).code(),
            absl::StatusCode::kInvalidArgument);  // rank outside the world
  EXPECT_EQ(CheckWorkerRegistration(spec, g, 0, Registration({})).code(),
            absl::StatusCode::kInvalidArgument);
  absl::Status wrong = CheckWorkerRegistration(spec, g, 0, Registration({4096}));
  EXPECT_EQ(wrong.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(wrong.message().find("pages [4096]"), absl::string_view::npos) << wrong;
  EXPECT_EQ(
      CheckWorkerRegistration(spec, g, 0, Registration({UINT64_MAX, 4097})).code(),
      absl::StatusCode::kInvalidArgument);  // overflow
}

TEST(WorkerSessionsTest, OneSessionPerRankAndSlotAndAtMostTheLocalWorkers) {
  const common::Geometry g = GeometryOf(Spec(2, 2, common::Attention::kMha));
  WorkerSessions sessions(g, "e/0");
  RecordingListener listener;
  const std::vector<uint64_t> pages = {4096, 4096};
  ASSERT_TRUE(sessions.CheckAttach(0, 0, pages).ok());
  WorkerSession& a =
      sessions.Add(0, 0, true, pages, std::make_shared<FakeMemory>(), &listener);
  EXPECT_EQ(a.id, 1u);
  EXPECT_EQ(sessions.idle_since(), absl::InfiniteFuture());
  EXPECT_EQ(sessions.CheckAttach(0, 1, pages).code(), absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(sessions.CheckAttach(1, 0, pages).code(), absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(sessions.CheckAttach(1, 1, {8192}).code(), absl::StatusCode::kFailedPrecondition);
  ASSERT_TRUE(sessions.CheckAttach(1, 1, pages).ok());
  sessions.Add(1, 1, false, pages, std::make_shared<FakeMemory>(), &listener);
  EXPECT_EQ(sessions.size(), 2u);
}

TEST(WorkerSessionsTest, ReplicatedRanksShareSlotZeroUpToTheLocalWorkers) {
  const common::Geometry g = GeometryOf(Spec(2, 2, common::Attention::kMla));
  WorkerSessions sessions(g, "e/0");
  const std::vector<uint64_t> pages = {4096, 4096};
  sessions.Add(0, 0, true, pages, std::make_shared<FakeMemory>(), nullptr);
  ASSERT_TRUE(sessions.CheckAttach(1, 0, pages).ok());
  sessions.Add(1, 0, false, pages, std::make_shared<FakeMemory>(), nullptr);
  EXPECT_EQ(sessions.CheckAttach(2, 0, pages).code(), absl::StatusCode::kResourceExhausted);
}

TEST(WorkerSessionsTest, ARestoredLayoutBindsTheFirstWorkerToo) {
  const common::Geometry g = GeometryOf(Spec(2, 2, common::Attention::kMha));
  WorkerSessions sessions(g, "e/0", /*layout=*/{8192});
  EXPECT_EQ(sessions.CheckAttach(0, 0, {4096, 4096}).code(), absl::StatusCode::kFailedPrecondition);
  ASSERT_TRUE(sessions.CheckAttach(0, 0, {8192}).ok());
  bool fixed = true;
  sessions.Add(0, 0, true, {8192}, std::make_shared<FakeMemory>(), nullptr, &fixed);
  EXPECT_FALSE(fixed);  // it was fixed before this worker
  WorkerSessions fresh(g, "e/1");
  fresh.Add(0, 0, true, {4096, 4096}, std::make_shared<FakeMemory>(), nullptr, &fixed);
  EXPECT_TRUE(fixed);
  EXPECT_EQ(fresh.layout(), (std::vector<uint64_t>{4096, 4096}));
}

TEST(WorkerSessionsTest, ARankIsRefusedWhileItsDepartedMemoryIsStillHeld) {
  const common::Geometry g = GeometryOf(Spec(2, 2, common::Attention::kMha));
  WorkerSessions sessions(g, "e/0");
  const std::vector<uint64_t> pages = {4096, 4096};
  const uint64_t id =
      sessions.Add(0, 0, true, pages, std::make_shared<FakeMemory>(), nullptr).id;
  uint32_t rank = 99;
  std::shared_ptr<WorkerMemory> held = sessions.Remove(id, &rank);  // a copy still holds it
  ASSERT_NE(held, nullptr);
  EXPECT_EQ(rank, 0u);
  EXPECT_TRUE(sessions.empty());
  EXPECT_NE(sessions.idle_since(), absl::InfiniteFuture());
  EXPECT_EQ(sessions.CheckAttach(0, 0, pages).code(), absl::StatusCode::kUnavailable);
  EXPECT_TRUE(sessions.CheckAttach(1, 1, pages).ok());  // other ranks are not affected
  held.reset();
  EXPECT_TRUE(sessions.CheckAttach(0, 0, pages).ok());
  EXPECT_EQ(sessions.Remove(id, &rank), nullptr);  // idempotent
}

TEST(WorkerSessionsTest, TellQueuesEverySessionAndCountsDownItsSubmitters) {
  const common::Geometry g = GeometryOf(Spec(2, 2, common::Attention::kMha));
  WorkerSessions sessions(g, "e/0");
  RecordingListener l0, l1;
  const std::vector<uint64_t> pages = {4096, 4096};
  WorkerSession& a = sessions.Add(0, 0, true, pages, std::make_shared<FakeMemory>(), &l0);
  WorkerSession& b = sessions.Add(1, 1, true, pages, std::make_shared<FakeMemory>(), &l1);
  a.jobs_in_flight = 1;
  b.jobs_in_flight = 1;
  Verdicts verdicts;
  sessions.Tell(JobResult{5, absl::OkStatus(), 0}, {a.id}, &verdicts.finished);
  EXPECT_EQ(a.jobs_in_flight, 0u);
  EXPECT_EQ(b.jobs_in_flight, 1u);
  verdicts.closed = sessions.Listeners();
  verdicts.closed_why = absl::CancelledError("dropped");
  verdicts.DeliverTo();
  EXPECT_EQ(l0.finished, std::vector<uint64_t>{5});
  EXPECT_EQ(l1.finished, std::vector<uint64_t>{5});
  EXPECT_EQ(l1.closed, absl::CancelledError("dropped"));
}

}  // namespace
}  // namespace kvoffload::daemon
