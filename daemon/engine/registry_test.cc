// EngineRegistry under a fault-injecting copy backend: drop while copies run (the region and its
// budget outlive the copies), refusals with exact codes, maintenance (expiry, idle TTL) and
// shutdown with a copy that does not finish within the grace period.
#include "daemon/engine/registry.h"

#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/synchronization/notification.h"
#include "daemon/copy/testing/fault_copy_backend.h"
#include "daemon/copy/testing/shm_memory.h"
#include "daemon/engine/testing/engine_test_env.h"
#include "gtest/gtest.h"

namespace kvoffload::daemon {
namespace {

using testing::EngineTestEnv;
using testing::kBytesPerBlock;
using testing::kNumRows;
using testing::PerRankSpec;
using testing::RecordingListener;
using Fault = FaultCopyBackend::Fault;

class RegistryTest : public ::testing::Test {
 protected:
  RegistryTest() {
    RegistryOptions options;
    options.idle_engine_ttl = absl::Minutes(1);
    registry_ = std::make_unique<EngineRegistry>(env_.deps(), options);
  }
  ~RegistryTest() override {
    env_.Settle();
    registry_.reset();
  }

  // Opens a one-rank engine, attaches a worker and submits a held store of one row.
  void StartHeldStore(const std::string& engine_id) {
    auto opened = registry_->Open(PerRankSpec(1, engine_id));
    ASSERT_TRUE(opened.ok()) << opened.status();
    ASSERT_TRUE(opened->created);
    engine_ = opened->engine;
    auto memory = ShmWorkerMemory::Create(testing::kLayers, 4, testing::kPageBytes, 3);
    ASSERT_TRUE(memory.ok());
    memory_ = *std::move(memory);
    auto worker_memory = env_.backend().OpenWorker(memory_->Registration());
    ASSERT_TRUE(worker_memory.ok()) << worker_memory.status();
    auto info = engine_->Attach(0, memory_->Registration(), *std::move(worker_memory), &listener_);
    ASSERT_TRUE(info.ok()) << info.status();
    session_ = info->session_id;
    auto prepared = engine_->index().PrepareStore({"key"});
    ASSERT_TRUE(prepared.ok());
    env_.backend().AddRule({.fault = Fault::kHold});
    JobPart part;
    part.job_id = 1;
    part.gpu_blocks = {2};
    part.rows = prepared->rows;
    ASSERT_TRUE(engine_->Submit(session_, part).ok());
    ASSERT_TRUE(env_.backend().WaitForHeld(1, absl::Seconds(10)));
  }

  EngineTestEnv env_;
  std::unique_ptr<EngineRegistry> registry_;
  std::shared_ptr<Engine> engine_;
  std::unique_ptr<ShmWorkerMemory> memory_;
  RecordingListener listener_;
  uint64_t session_ = 0;
};

TEST_F(RegistryTest, OpenIsIdempotentAndRefusesADifferentSpec) {
  auto first = registry_->Open(PerRankSpec(2));
  ASSERT_TRUE(first.ok());
  EXPECT_TRUE(first->created);
  auto again = registry_->Open(PerRankSpec(2));
  ASSERT_TRUE(again.ok());
  EXPECT_FALSE(again->created);
  EXPECT_EQ(again->engine, first->engine);
  common::EngineSpec other = PerRankSpec(2);
  other.page_bytes *= 2;
  other.budget_bytes *= 2;
  EXPECT_EQ(registry_->Open(other).status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(env_.budget().reserved(), testing::ReservedFor(PerRankSpec(2)));
}

TEST_F(RegistryTest, OpenBeyondTheNodeCapReservesNothing) {
  common::EngineSpec huge = PerRankSpec(1, "huge");
  huge.budget_bytes = env_.budget().cap() + 4096 * 16;
  auto refused = registry_->Open(huge);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kResourceExhausted) << refused.status();
  EXPECT_EQ(env_.budget().reserved(), 0u);
  EXPECT_TRUE(registry_->List().empty());
}

TEST_F(RegistryTest, DropRefusesWithoutForceAndNamesMissingEngines) {
  StartHeldStore("busy");
  EXPECT_EQ(registry_->Drop("busy", 0, /*force=*/false).code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(registry_->Drop("absent", 0, true).code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(registry_->Drop("busy", 1, true).code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(registry_->Find("busy", 0).ok());
}

TEST_F(RegistryTest, ForcedDropWaitsForItsCopiesAndKeepsTheRegionUntilThen) {
  StartHeldStore("busy");
  const uint64_t region = testing::ReservedFor(PerRankSpec(1, "busy"));
  ASSERT_EQ(env_.budget().reserved(), region);
  absl::Notification dropped;
  std::thread drop([&] {
    EXPECT_TRUE(registry_->Drop("busy", 0, /*force=*/true).ok());
    dropped.Notify();
  });
  // The engine is gone from the registry at once, but the drop returns only when the held copy
  // has ended: until then region and budget stay, and the worker hears nothing (PegaFlow 403).
  for (int i = 0; i < 1000 && registry_->Find("busy", 0).ok(); ++i) {
    absl::SleepFor(absl::Milliseconds(1));
  }
  EXPECT_EQ(registry_->Find("busy", 0).status().code(), absl::StatusCode::kNotFound);
  EXPECT_FALSE(dropped.WaitForNotificationWithTimeout(absl::Milliseconds(100)));
  EXPECT_EQ(env_.budget().reserved(), region);
  EXPECT_TRUE(listener_.events().empty());
  env_.backend().ReleaseAllHeld();
  drop.join();
  // The verdict comes first, then the close notice.
  ASSERT_EQ(listener_.results().size(), 1u);
  EXPECT_EQ(listener_.results()[0].status.code(), absl::StatusCode::kAborted)
      << listener_.results()[0].status;
  ASSERT_EQ(listener_.events().size(), 2u);
  EXPECT_EQ(listener_.events().back(), "closed 10");
  engine_->Detach(session_);
  engine_.reset();
  ASSERT_TRUE(env_.Settle());
  EXPECT_EQ(env_.budget().reserved(), 0u);
}

// A rank registering again right after its session ended, while that session's last copy
// still runs: the registration waits for the copy (briefly) instead of refusing at once.
TEST_F(RegistryTest, ARankRegisteringAgainWaitsBrieflyForItsPreviousSessionsCopies) {
  StartHeldStore("again");
  engine_->Detach(session_);
  std::thread release([&] {
    absl::SleepFor(absl::Milliseconds(200));
    env_.backend().ReleaseAllHeld();
  });
  RecordingListener second;
  auto attached = registry_->AttachWorker(PerRankSpec(1, "again"), 0, 0, memory_->Registration(),
                                          &second, nullptr);
  release.join();
  ASSERT_TRUE(attached.ok()) << attached.status();
  EXPECT_EQ(attached->info.slot, 0u);
  engine_->Detach(attached->info.session_id);
}

// A previous session whose copy outlives the wait: UNAVAILABLE, and nothing attached.
TEST_F(RegistryTest, ARankWhosePreviousSessionStillCopiesIsRefusedAfterTheWait) {
  StartHeldStore("stuck");
  engine_->Detach(session_);
  RecordingListener second;
  const absl::Time start = absl::Now();
  auto attached = registry_->AttachWorker(PerRankSpec(1, "stuck"), 0, 0, memory_->Registration(),
                                          &second, nullptr);
  EXPECT_EQ(attached.status().code(), absl::StatusCode::kUnavailable) << attached.status();
  EXPECT_GE(absl::Now() - start, absl::Seconds(2));
  EXPECT_EQ(engine_->num_workers(), 0u);
  env_.backend().ReleaseAllHeld();
}

TEST_F(RegistryTest, MaintenanceExpiresJobsAndDropsIdleEngines) {
  StartHeldStore("aging");
  auto idle = registry_->Open(PerRankSpec(1, "idle"));
  ASSERT_TRUE(idle.ok());
  idle->engine.reset();
  // Past the job deadline (30 s) and the idle TTL (1 min): "idle" goes, "aging" has a worker.
  registry_->Maintain(absl::Now() + absl::Minutes(2));
  EXPECT_EQ(registry_->Find("idle", 0).status().code(), absl::StatusCode::kNotFound);
  ASSERT_TRUE(registry_->Find("aging", 0).ok());
  EXPECT_TRUE(listener_.results().empty());  // expired, but its copy is still held
  env_.backend().ReleaseAllHeld();
  ASSERT_TRUE(listener_.WaitForResults(1));
  ASSERT_EQ(listener_.results().size(), 1u);
  EXPECT_EQ(listener_.results()[0].status.code(), absl::StatusCode::kDeadlineExceeded);
  ASSERT_TRUE(env_.Settle());
  EXPECT_EQ(env_.budget().reserved(), testing::ReservedFor(PerRankSpec(1, "aging")));
}

TEST_F(RegistryTest, ShutdownReportsCopiesThatOutliveTheGrace) {
  StartHeldStore("stuck");
  EXPECT_FALSE(registry_->Shutdown(absl::UnavailableError("kvoffloadd is shutting down"),
                                   absl::Milliseconds(50)));
  EXPECT_EQ(registry_->Open(PerRankSpec(1, "late")).status().code(),
            absl::StatusCode::kUnavailable);
  // No close notice while a copy can still write the worker's memory.
  EXPECT_TRUE(listener_.events().empty());
  env_.backend().ReleaseAllHeld();
  ASSERT_TRUE(listener_.WaitForResults(1));
  EXPECT_EQ(listener_.results()[0].status, absl::UnavailableError("kvoffloadd is shutting down"));
  ASSERT_TRUE(env_.Settle());
  ASSERT_FALSE(listener_.events().empty());
  EXPECT_EQ(listener_.events().back(), "closed 14");
}

TEST_F(RegistryTest, ShutdownWithinTheGraceLetsCopiesSucceed) {
  StartHeldStore("quick");
  env_.backend().ReleaseAllHeld();
  ASSERT_TRUE(listener_.WaitForResults(1));
  EXPECT_TRUE(registry_->Shutdown(absl::UnavailableError("stopping"), absl::Seconds(5)));
  ASSERT_EQ(listener_.results().size(), 1u);
  EXPECT_TRUE(listener_.results()[0].status.ok());
  EXPECT_EQ(listener_.results()[0].bytes, kBytesPerBlock);
}

}  // namespace
}  // namespace kvoffload::daemon
