// Engine under a fault-injecting copy backend: votes, detach while copying, drain, expiry, close
// under load, and exactly one verdict per accepted job. Every test asserts exact status codes,
// verdict counts and the bytes that reached the region (read back through loads).
#include "daemon/engine/engine.h"

#include <map>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "daemon/copy/testing/fault_copy_backend.h"
#include "daemon/copy/testing/shm_memory.h"
#include "daemon/engine/testing/engine_test_env.h"
#include "daemon/index/testing/slot_index_invariants.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace kvoffload::daemon {
namespace {

using testing::EngineTestEnv;
using testing::kBytesPerBlock;
using testing::kNumRows;
using testing::kWorkerBlocks;
using testing::PerRankSpec;
using testing::RecordingListener;
using testing::ReplicatedSpec;
using Fault = FaultCopyBackend::Fault;

struct Worker {
  std::unique_ptr<ShmWorkerMemory> memory;
  RecordingListener listener;
  WorkerInfo info;
};

class EngineTest : public ::testing::Test {
 protected:
  void Open(const common::EngineSpec& spec) {
    auto engine = Engine::Create(spec, env_.deps(), /*region_epoch=*/1);
    ASSERT_TRUE(engine.ok()) << engine.status();
    engine_ = *std::move(engine);
  }

  // Attaches mp_ranks 0..n-1, each with its own random memory.
  void AttachWorkers(uint32_t n) {
    for (uint32_t rank = 0; rank < n; ++rank) {
      auto w = std::make_unique<Worker>();
      auto memory = ShmWorkerMemory::Create(testing::kLayers, kWorkerBlocks, testing::kPageBytes,
                                            /*seed=*/1000 + rank);
      ASSERT_TRUE(memory.ok()) << memory.status();
      w->memory = *std::move(memory);
      auto opened = env_.backend().OpenWorker(w->memory->Registration());
      ASSERT_TRUE(opened.ok()) << opened.status();
      auto info =
          engine_->Attach(rank, w->memory->Registration(), *std::move(opened), &w->listener);
      ASSERT_TRUE(info.ok()) << info.status();
      w->info = *info;
      workers_.push_back(std::move(w));
    }
  }

  // Keys k<first>.. k<first+n-1> → rows in WRITING.
  std::vector<uint64_t> PrepareStore(int first, int n, std::vector<std::string>* keys) {
    for (int i = first; i < first + n; ++i) keys->push_back(absl::StrCat("k", i));
    auto prepared = engine_->index().PrepareStore(*keys);
    EXPECT_TRUE(prepared.ok()) << prepared.status();
    return prepared.ok() ? prepared->rows : std::vector<uint64_t>{};
  }

  absl::Status Submit(uint32_t rank, uint64_t job_id, CopyDirection direction,
                      std::vector<uint64_t> gpu_blocks, std::vector<uint64_t> rows) {
    JobPart part;
    part.job_id = job_id;
    part.direction = direction;
    part.gpu_blocks = std::move(gpu_blocks);
    part.rows = std::move(rows);
    return engine_->Submit(workers_[rank]->info.session_id, part);
  }

  // Loads `rows` into GPU blocks `into` of `rank` (scrambled first) and returns their bytes.
  std::vector<std::string> LoadBack(uint32_t rank, uint64_t job_id,
                                    const std::vector<uint64_t>& rows,
                                    const std::vector<uint64_t>& into) {
    Worker& w = *workers_[rank];
    for (uint64_t b : into) w.memory->Scramble(b, job_id * 100 + b);
    const size_t before = w.listener.results().size();
    // Every local rank must vote on a load: the others load into the same blocks of their own.
    for (uint32_t r = 0; r < workers_.size(); ++r) {
      EXPECT_TRUE(Submit(r, job_id, CopyDirection::kLoad, into, rows).ok());
    }
    EXPECT_TRUE(w.listener.WaitForResults(before + 1));
    auto result = w.listener.ResultsFor(job_id);
    EXPECT_EQ(result.size(), 1u);
    if (!result.empty()) {
      EXPECT_TRUE(result[0].status.ok()) << result[0].status;
    }
    std::vector<std::string> bytes;
    for (uint64_t b : into) bytes.push_back(w.memory->Block(b));
    return bytes;
  }

  void TearDown() override { ASSERT_TRUE(env_.Settle()); }

  EngineTestEnv env_;
  std::shared_ptr<Engine> engine_;
  std::vector<std::unique_ptr<Worker>> workers_;
};

TEST_F(EngineTest, PerRankStoreFinishesOnlyWhenEverySlotHasCopied) {
  Open(PerRankSpec(2));
  AttachWorkers(2);
  std::vector<std::string> keys;
  const std::vector<uint64_t> rows = PrepareStore(0, 2, &keys);
  ASSERT_TRUE(Submit(0, 1, CopyDirection::kStore, {3, 4}, rows).ok());
  ASSERT_TRUE(env_.backend().WaitForCompleted(1, absl::Seconds(10)));
  // Rank 0's copy is done and voted (the callback ran before completed() moved): no verdict yet.
  EXPECT_TRUE(workers_[0]->listener.results().empty());
  EXPECT_EQ(engine_->Snapshot().jobs_in_flight, 1u);

  ASSERT_TRUE(Submit(1, 1, CopyDirection::kStore, {5, 6}, rows).ok());
  for (auto& w : workers_) {
    ASSERT_TRUE(w->listener.WaitForResults(1));
    ASSERT_EQ(w->listener.results().size(), 1u);
    EXPECT_EQ(w->listener.results()[0].job_id, 1u);
    EXPECT_TRUE(w->listener.results()[0].status.ok());
    EXPECT_EQ(w->listener.results()[0].bytes, 2 * 2 * kBytesPerBlock);  // 2 ranks × 2 blocks
  }
  ASSERT_TRUE(engine_->index().CompleteStore(keys, true).ok());
  auto load_rows = engine_->index().PrepareLoad(keys);
  ASSERT_TRUE(load_rows.ok());
  const std::string stored0 = workers_[0]->memory->Block(3);
  EXPECT_EQ(LoadBack(0, 2, *load_rows, {10, 11}),
            (std::vector<std::string>{stored0, workers_[0]->memory->Block(4)}));
  // Rank 1 read its own slot: its blocks 5 and 6, not rank 0's.
  EXPECT_EQ(workers_[1]->memory->Block(10), workers_[1]->memory->Block(5));
  EXPECT_EQ(workers_[1]->memory->Block(11), workers_[1]->memory->Block(6));
  EXPECT_NE(workers_[1]->memory->Block(10), stored0);
  EngineSnapshot s = engine_->Snapshot();
  EXPECT_EQ(s.jobs_done, 2u);
  EXPECT_EQ(s.jobs_failed, 0u);
  EXPECT_EQ(s.store_bytes, 4 * kBytesPerBlock);
  EXPECT_EQ(s.load_bytes, 4 * kBytesPerBlock);
}

TEST_F(EngineTest, ReplicatedNonWriterCannotFinishAStoreAlone) {
  Open(ReplicatedSpec());
  AttachWorkers(2);
  ASSERT_TRUE(engine_->geometry().replicated);
  ASSERT_TRUE(workers_[0]->info.writer);
  ASSERT_FALSE(workers_[1]->info.writer);
  std::vector<std::string> keys;
  const std::vector<uint64_t> rows = PrepareStore(0, 2, &keys);
  env_.backend().AddRule({.fault = Fault::kHold});

  // The non-writer votes at once, without a copy: the job must still wait for the writer.
  ASSERT_TRUE(Submit(1, 7, CopyDirection::kStore, {1, 2}, rows).ok());
  EXPECT_EQ(env_.backend().submitted(), 0u);
  EXPECT_TRUE(workers_[1]->listener.results().empty());
  // The writer's copy is accepted but has not run: still no verdict (seed 002's data-loss case).
  ASSERT_TRUE(Submit(0, 7, CopyDirection::kStore, {1, 2}, rows).ok());
  ASSERT_TRUE(env_.backend().WaitForHeld(1, absl::Seconds(10)));
  EXPECT_TRUE(workers_[0]->listener.results().empty());
  EXPECT_TRUE(workers_[1]->listener.results().empty());
  EXPECT_EQ(engine_->index().Lookup(keys),
            std::vector<SlotIndex::KeyState>(2, SlotIndex::KeyState::kHitPending));

  env_.backend().ReleaseAllHeld();
  for (auto& w : workers_) {
    ASSERT_TRUE(w->listener.WaitForResults(1));
    ASSERT_EQ(w->listener.ResultsFor(7).size(), 1u);
    EXPECT_TRUE(w->listener.ResultsFor(7)[0].status.ok());
    EXPECT_EQ(w->listener.ResultsFor(7)[0].bytes, 2 * kBytesPerBlock);  // the writer alone
  }
  ASSERT_TRUE(engine_->index().CompleteStore(keys, true).ok());
  auto load_rows = engine_->index().PrepareLoad(keys);
  ASSERT_TRUE(load_rows.ok());
  // Both ranks load the one copy: the writer's bytes.
  LoadBack(1, 8, *load_rows, {20, 21});
  EXPECT_EQ(workers_[1]->memory->Block(20), workers_[0]->memory->Block(1));
  EXPECT_EQ(workers_[1]->memory->Block(21), workers_[0]->memory->Block(2));
}

TEST_F(EngineTest, ReplicatedWriterFailureFailsTheJobForEveryWorker) {
  Open(ReplicatedSpec());
  AttachWorkers(2);
  std::vector<std::string> keys;
  const std::vector<uint64_t> rows = PrepareStore(0, 1, &keys);
  env_.backend().AddRule({.fault = Fault::kFail, .status = absl::DataLossError("dma error")});
  ASSERT_TRUE(Submit(1, 3, CopyDirection::kStore, {0}, rows).ok());
  ASSERT_TRUE(Submit(0, 3, CopyDirection::kStore, {0}, rows).ok());
  for (auto& w : workers_) {
    ASSERT_TRUE(w->listener.WaitForResults(1));
    ASSERT_EQ(w->listener.results().size(), 1u);
    const JobResult r = w->listener.results()[0];
    EXPECT_EQ(r.status.code(), absl::StatusCode::kDataLoss) << r.status;
    EXPECT_TRUE(absl::StrContains(r.status.message(), "mp_rank 0 copy failed: dma error"))
        << r.status;
    EXPECT_EQ(r.bytes, 0u);
  }
  EngineSnapshot s = engine_->Snapshot();
  EXPECT_EQ(s.jobs_failed, 1u);
  EXPECT_EQ(s.store_bytes, 0u);
  EXPECT_EQ(s.jobs_in_flight, 0u);
}

TEST_F(EngineTest, CopyThatWroteButFailedFailsTheJobAndCountsNoBytes) {
  Open(PerRankSpec(2));
  AttachWorkers(2);
  std::vector<std::string> keys;
  const std::vector<uint64_t> rows = PrepareStore(0, 2, &keys);
  env_.backend().AddRule(
      {.fault = Fault::kFailAfterCopy, .status = absl::InternalError("ecc error"), .slot = 1});
  ASSERT_TRUE(Submit(0, 4, CopyDirection::kStore, {0, 1}, rows).ok());
  ASSERT_TRUE(Submit(1, 4, CopyDirection::kStore, {0, 1}, rows).ok());
  for (auto& w : workers_) {
    ASSERT_TRUE(w->listener.WaitForResults(1));
    ASSERT_EQ(w->listener.results().size(), 1u);
    EXPECT_EQ(w->listener.results()[0].status.code(), absl::StatusCode::kInternal);
    // The job's bytes are what succeeded: rank 0's copy only.
    EXPECT_EQ(w->listener.results()[0].bytes, 2 * kBytesPerBlock);
  }
  EXPECT_EQ(engine_->Snapshot().store_bytes, 2 * kBytesPerBlock);
  EXPECT_EQ(engine_->Snapshot().jobs_failed, 1u);
}

TEST_F(EngineTest, DetachWhileCopyingReportsOnlyAfterTheCopyEnds) {
  Open(PerRankSpec(2));
  AttachWorkers(2);
  std::vector<std::string> keys;
  const std::vector<uint64_t> rows = PrepareStore(0, 2, &keys);
  env_.backend().AddRule({.fault = Fault::kHold, .slot = 0});
  ASSERT_TRUE(Submit(0, 9, CopyDirection::kStore, {0, 1}, rows).ok());
  ASSERT_TRUE(Submit(1, 9, CopyDirection::kStore, {0, 1}, rows).ok());
  ASSERT_TRUE(env_.backend().WaitForHeld(1, absl::Seconds(10)));
  ASSERT_TRUE(env_.backend().WaitForCompleted(1, absl::Seconds(10)));  // rank 1's copy

  engine_->Detach(workers_[0]->info.session_id);
  EXPECT_EQ(engine_->num_workers(), 1u);
  // The job failed (rank 0 left before its vote), but its copy may still read rank 0's memory
  // and write the rows: nobody hears about it yet, and the rows stay guarded.
  EXPECT_TRUE(workers_[1]->listener.results().empty());
  EXPECT_EQ(engine_->Snapshot().jobs_in_flight, 1u);
  ASSERT_TRUE(engine_->index().CompleteStore(keys, false).ok());
  EXPECT_EQ(engine_->index().counts().rows_quarantined, 2u);

  // The copy runs now, on the detached worker's memory (still mapped until it ends).
  env_.backend().ReleaseAllHeld();
  ASSERT_TRUE(workers_[1]->listener.WaitForResults(1));
  ASSERT_EQ(workers_[1]->listener.results().size(), 1u);
  EXPECT_EQ(workers_[1]->listener.results()[0].status.code(), absl::StatusCode::kUnavailable);
  EXPECT_TRUE(absl::StrContains(workers_[1]->listener.results()[0].status.message(),
                                "mp_rank 0 of engine engine/0 disconnected"));
  EXPECT_TRUE(workers_[0]->listener.results().empty());  // detached: told nothing more
  ASSERT_TRUE(env_.Settle());
  EXPECT_EQ(engine_->index().counts().rows_quarantined, 0u);
  EXPECT_EQ(engine_->index().counts().rows_free, kNumRows);
  EXPECT_EQ(engine_->Snapshot().jobs_in_flight, 0u);
}

TEST_F(EngineTest, ExpiryFailsAJobMissingAVote) {
  Open(PerRankSpec(2));
  AttachWorkers(2);
  std::vector<std::string> keys;
  const std::vector<uint64_t> rows = PrepareStore(0, 1, &keys);
  ASSERT_TRUE(Submit(0, 5, CopyDirection::kStore, {2}, rows).ok());
  ASSERT_TRUE(env_.backend().WaitForCompleted(1, absl::Seconds(10)));
  engine_->ExpireJobs(absl::Now() + absl::Seconds(29));  // before the deadline: nothing
  EXPECT_TRUE(workers_[0]->listener.results().empty());
  engine_->ExpireJobs(absl::Now() + absl::Seconds(31));
  for (auto& w : workers_) {
    ASSERT_EQ(w->listener.results().size(), 1u);
    EXPECT_EQ(w->listener.results()[0].status.code(), absl::StatusCode::kDeadlineExceeded);
    EXPECT_TRUE(absl::StrContains(w->listener.results()[0].status.message(), "1 of 2 local votes"))
        << w->listener.results()[0].status;
  }
  // The late part gets the job's verdict; a part of a rank that had submitted is a duplicate.
  EXPECT_EQ(Submit(1, 5, CopyDirection::kStore, {2}, rows).code(),
            absl::StatusCode::kDeadlineExceeded);
  EXPECT_EQ(Submit(0, 5, CopyDirection::kStore, {2}, rows).code(),
            absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(workers_[1]->listener.results().size(), 1u);
}

TEST_F(EngineTest, ExpiredJobWithACopyInFlightKeepsItsRowsUntilTheCopyEnds) {
  Open(PerRankSpec(2));
  AttachWorkers(2);
  std::vector<std::string> keys;
  const std::vector<uint64_t> rows = PrepareStore(0, 2, &keys);
  env_.backend().AddRule({.fault = Fault::kHold, .slot = 1});
  ASSERT_TRUE(Submit(0, 6, CopyDirection::kStore, {0, 1}, rows).ok());
  ASSERT_TRUE(Submit(1, 6, CopyDirection::kStore, {0, 1}, rows).ok());
  ASSERT_TRUE(env_.backend().WaitForHeld(1, absl::Seconds(10)));
  ASSERT_TRUE(env_.backend().WaitForCompleted(1, absl::Seconds(10)));  // rank 0's copy
  engine_->ExpireJobs(absl::Now() + absl::Seconds(31));
  EXPECT_TRUE(workers_[0]->listener.results().empty());  // a copy can still write
  ASSERT_TRUE(engine_->index().CompleteStore(keys, false).ok());
  SlotIndex::Counts c = engine_->index().counts();
  EXPECT_EQ(c.rows_quarantined, 2u);
  EXPECT_EQ(c.rows_free, kNumRows - 2);
  // Nothing can hand those rows out meanwhile: fill every free row, then one more.
  std::vector<std::string> others;
  for (uint64_t i = 0; i < kNumRows - 2; ++i) others.push_back(absl::StrCat("o", i));
  auto filled = engine_->index().PrepareStore(others);
  ASSERT_TRUE(filled.ok());
  for (uint64_t r : filled->rows) EXPECT_TRUE(r != rows[0] && r != rows[1]) << r;
  EXPECT_EQ(engine_->index().PrepareStore({"one-more"}).status().code(),
            absl::StatusCode::kResourceExhausted);

  env_.backend().ReleaseAllHeld();
  for (auto& w : workers_) {
    ASSERT_TRUE(w->listener.WaitForResults(1));
    ASSERT_EQ(w->listener.results().size(), 1u);
    EXPECT_EQ(w->listener.results()[0].status.code(), absl::StatusCode::kDeadlineExceeded);
    EXPECT_TRUE(absl::StrContains(w->listener.results()[0].status.message(),
                                  "copies pending for mp_ranks [1]"))
        << w->listener.results()[0].status;
  }
  ASSERT_TRUE(env_.Settle());
  EXPECT_EQ(engine_->index().counts().rows_quarantined, 0u);
  EXPECT_EQ(engine_->index().counts().rows_free, 2u);
}

TEST_F(EngineTest, ReorderedCompletionsEachGetExactlyOneVerdict) {
  Open(PerRankSpec(1));
  AttachWorkers(1);
  std::vector<std::string> keys;
  const std::vector<uint64_t> rows = PrepareStore(0, 3, &keys);
  for (int i = 0; i < 3; ++i) env_.backend().AddRule({.fault = Fault::kHold});
  for (uint64_t job = 1; job <= 3; ++job) {
    ASSERT_TRUE(Submit(0, job, CopyDirection::kStore, {job}, {rows[job - 1]}).ok());
  }
  ASSERT_TRUE(env_.backend().WaitForHeld(3, absl::Seconds(10)));
  const std::vector<FaultCopyBackend::HeldId> held = env_.backend().Held();
  ASSERT_EQ(held.size(), 3u);
  // Finish them backwards: job 3, then 1, then 2.
  for (size_t i : {2, 0, 1}) {
    const size_t before = workers_[0]->listener.results().size();
    ASSERT_TRUE(env_.backend().ReleaseHeld(held[i]));
    ASSERT_TRUE(workers_[0]->listener.WaitForResults(before + 1));
  }
  EXPECT_EQ(workers_[0]->listener.events(),
            (std::vector<std::string>{"finished 3 0", "finished 1 0", "finished 2 0"}));
  for (const JobResult& r : workers_[0]->listener.results()) EXPECT_EQ(r.bytes, kBytesPerBlock);
  ASSERT_TRUE(engine_->index().CompleteStore(keys, true).ok());
  auto load_rows = engine_->index().PrepareLoad(keys);
  ASSERT_TRUE(load_rows.ok());
  EXPECT_EQ(LoadBack(0, 4, *load_rows, {10, 11, 12}),
            (std::vector<std::string>{workers_[0]->memory->Block(1), workers_[0]->memory->Block(2),
                                      workers_[0]->memory->Block(3)}));
}

TEST_F(EngineTest, DrainFailsJobsWaitingForPartsAndLetsRunningCopiesFinish) {
  Open(PerRankSpec(2));
  AttachWorkers(2);
  std::vector<std::string> keys;
  const std::vector<uint64_t> rows = PrepareStore(0, 2, &keys);
  env_.backend().AddRule({.fault = Fault::kHold, .slot = 1});
  // Job 1: both parts in, rank 1's copy running. Job 2: rank 0 copied, rank 1 never submitted.
  ASSERT_TRUE(Submit(0, 1, CopyDirection::kStore, {0}, {rows[0]}).ok());
  ASSERT_TRUE(Submit(1, 1, CopyDirection::kStore, {0}, {rows[0]}).ok());
  ASSERT_TRUE(Submit(0, 2, CopyDirection::kStore, {1}, {rows[1]}).ok());
  ASSERT_TRUE(env_.backend().WaitForHeld(1, absl::Seconds(10)));
  ASSERT_TRUE(env_.backend().WaitForCompleted(2, absl::Seconds(10)));

  engine_->Drain(absl::UnavailableError("draining"));
  for (auto& w : workers_) {
    ASSERT_EQ(w->listener.results().size(), 1u);
    EXPECT_EQ(w->listener.results()[0].job_id, 2u);
    EXPECT_EQ(w->listener.results()[0].status, absl::UnavailableError("draining"));
  }
  EXPECT_EQ(Submit(1, 2, CopyDirection::kStore, {1}, {rows[1]}),
            absl::UnavailableError("draining"));
  EXPECT_EQ(Submit(0, 3, CopyDirection::kStore, {1}, {rows[1]}),
            absl::UnavailableError("draining"));

  env_.backend().ReleaseAllHeld();
  for (auto& w : workers_) {
    ASSERT_TRUE(w->listener.WaitForResults(2));
    ASSERT_EQ(w->listener.ResultsFor(1).size(), 1u);
    EXPECT_TRUE(w->listener.ResultsFor(1)[0].status.ok());
    EXPECT_EQ(w->listener.ResultsFor(1)[0].bytes, 2 * kBytesPerBlock);
  }
  EXPECT_EQ(engine_->Snapshot().jobs_in_flight, 0u);
}

TEST_F(EngineTest, FailingOpenWorkerRefusesTheRegistrationAndNothingElse) {
  Open(PerRankSpec(2));
  auto memory = ShmWorkerMemory::Create(testing::kLayers, 4, testing::kPageBytes, 1);
  ASSERT_TRUE(memory.ok());
  RecordingListener listener;
  env_.backend().FailNextOpenWorker(absl::InvalidArgumentError("cannot open handle"));
  // The registry opens a worker's memory before it attaches: a failing open never reaches the
  // engine, and the next open and attach succeed.
  auto refused = env_.backend().OpenWorker((*memory)->Registration());
  EXPECT_EQ(refused.status(), absl::InvalidArgumentError("cannot open handle"));
  EXPECT_EQ(engine_->num_workers(), 0u);
  auto opened = env_.backend().OpenWorker((*memory)->Registration());
  ASSERT_TRUE(opened.ok()) << opened.status();
  auto accepted = engine_->Attach(0, (*memory)->Registration(), *std::move(opened), &listener);
  ASSERT_TRUE(accepted.ok()) << accepted.status();
  EXPECT_EQ(accepted->slot, 0u);
  engine_->Detach(accepted->session_id);
}

// Many jobs with delayed, failing and held copies; the engine closes (an operator's drop) while
// they run. Every accepted job gets exactly one verdict, with a code its fault explains.
class EngineCloseTest : public EngineTest {
 protected:
  // Submits one store job per row with a random fault each; returns the fault of every job.
  std::map<uint64_t, Fault> SubmitUnderFaults(uint32_t seed) {
    Open(PerRankSpec(1));
    AttachWorkers(1);
    std::vector<std::string> keys;
    const std::vector<uint64_t> rows = PrepareStore(0, kNumRows, &keys);
    std::mt19937 rng(seed);
    std::map<uint64_t, Fault> faults;
    for (uint64_t job = 1; job <= kNumRows; ++job) {
      const Fault fault =
          std::vector<Fault>{Fault::kNone, Fault::kDelay, Fault::kFail, Fault::kHold}[rng() % 4];
      env_.backend().AddRule({.fault = fault, .delay = absl::Milliseconds(rng() % 20)});
      faults[job] = fault;
      EXPECT_TRUE(Submit(0, job, CopyDirection::kStore, {job}, {rows[job - 1]}).ok());
    }
    return faults;
  }
};

TEST_F(EngineCloseTest, CloseUnderLoadGivesEveryAcceptedJobExactlyOneVerdict) {
  const std::map<uint64_t, Fault> faults = SubmitUnderFaults(42);
  engine_->Close(absl::AbortedError("engine dropped by an operator"));
  EXPECT_EQ(Submit(0, 100, CopyDirection::kStore, {0}, {0}),
            absl::AbortedError("engine dropped by an operator"));
  ASSERT_TRUE(env_.Settle());
  RecordingListener& listener = workers_[0]->listener;
  ASSERT_EQ(listener.results().size(), kNumRows);
  for (const auto& [job, fault] : faults) {
    const std::vector<JobResult> verdicts = listener.ResultsFor(job);
    ASSERT_EQ(verdicts.size(), 1u) << "job " << job;
    const absl::StatusCode code = verdicts[0].status.code();
    switch (fault) {
      case Fault::kHold:  // still parked when the engine closed
        EXPECT_EQ(code, absl::StatusCode::kAborted) << "job " << job;
        break;
      case Fault::kFail:  // failed before the close, or the close came first
        EXPECT_TRUE(code == absl::StatusCode::kDataLoss || code == absl::StatusCode::kAborted)
            << "job " << job << ": " << verdicts[0].status;
        break;
      default:
        EXPECT_TRUE(code == absl::StatusCode::kOk || code == absl::StatusCode::kAborted)
            << "job " << job << ": " << verdicts[0].status;
        if (code == absl::StatusCode::kOk) {
          EXPECT_EQ(verdicts[0].bytes, kBytesPerBlock);
        }
    }
  }
  EngineSnapshot s = engine_->Snapshot();
  EXPECT_EQ(s.jobs_done + s.jobs_failed, kNumRows);
  EXPECT_EQ(s.jobs_in_flight, 0u);
  EXPECT_EQ(engine_->index().counts().copies_in_flight, 0u);
}

// A worker is not told its session is over while a copy of its jobs can still touch its memory:
// the close notice follows the last verdict.
TEST_F(EngineCloseTest, CloseNoticeComesAfterTheLastVerdict) {
  SubmitUnderFaults(7);
  engine_->Close(absl::AbortedError("engine dropped by an operator"));
  ASSERT_TRUE(env_.Settle());
  const std::vector<std::string> events = workers_[0]->listener.events();
  ASSERT_EQ(events.size(), kNumRows + 1);
  EXPECT_EQ(events.back(), "closed 10");
}

// A copy ended and its job was settled, but its verdict is still on its way (the delivering
// thread is slow): the job table is empty, yet Close must not tell the session to end before
// that verdict. The daemon's shutdown closes engines as soon as no job is in flight.
TEST_F(EngineTest, CloseWaitsForAVerdictStillBeingDelivered) {
  Open(PerRankSpec(1));
  AttachWorkers(1);
  std::vector<std::string> keys;
  const std::vector<uint64_t> rows = PrepareStore(0, 1, &keys);
  RecordingListener& listener = workers_[0]->listener;
  listener.HoldNextVerdict();
  ASSERT_TRUE(Submit(0, 1, CopyDirection::kStore, {3}, {rows[0]}).ok());
  ASSERT_TRUE(listener.WaitUntilVerdictHeld());
  ASSERT_EQ(engine_->Snapshot().jobs_in_flight, 0u);
  std::thread closer([&] { engine_->Close(absl::UnavailableError("kvoffloadd is shutting down")); });
  absl::SleepFor(absl::Milliseconds(100));  // room for a close that does not wait
  listener.ReleaseHeldVerdict();
  closer.join();
  EXPECT_THAT(listener.events(), ::testing::ElementsAre("finished 1 0", "closed 14"));
  EXPECT_TRUE(engine_->WaitClosed(absl::Now() + absl::Seconds(5)));
}

// After Close, the last copy to end announces the close while another copy thread is still
// delivering an earlier job's verdict: the notice waits for that delivery.
TEST_F(EngineTest, TheLastCopysCloseNoticeWaitsForAVerdictAnotherThreadDelivers) {
  Open(PerRankSpec(1));
  AttachWorkers(1);
  std::vector<std::string> keys;
  const std::vector<uint64_t> rows = PrepareStore(0, 2, &keys);
  env_.backend().AddRule({.fault = Fault::kHold});
  env_.backend().AddRule({.fault = Fault::kHold});
  ASSERT_TRUE(Submit(0, 1, CopyDirection::kStore, {1}, {rows[0]}).ok());
  ASSERT_TRUE(Submit(0, 2, CopyDirection::kStore, {2}, {rows[1]}).ok());
  ASSERT_EQ(env_.backend().Held().size(), 2u);
  engine_->Close(absl::AbortedError("engine dropped by an operator"));
  RecordingListener& listener = workers_[0]->listener;
  listener.HoldNextVerdict();
  ASSERT_TRUE(env_.backend().ReleaseHeld(env_.backend().Held()[0]));  // job 1, on copy thread A
  ASSERT_TRUE(listener.WaitUntilVerdictHeld());
  ASSERT_TRUE(env_.backend().ReleaseHeld(env_.backend().Held()[0]));  // job 2, the last, on B
  ASSERT_TRUE(listener.WaitForResults(1));  // job 2's verdict; job 1's is still being delivered
  absl::SleepFor(absl::Milliseconds(100));  // room for a notice that does not wait
  listener.ReleaseHeldVerdict();
  ASSERT_TRUE(engine_->WaitClosed(absl::Now() + absl::Seconds(5)));
  EXPECT_THAT(listener.events(),
              ::testing::ElementsAre("finished 2 10", "finished 1 10", "closed 10"));
}

// The index learns that a store job failed: CompleteStore(true) for its rows is
// FAILED_PRECONDITION and they never read as HIT; they stay WRITING until the scheduler ends the
// store with success=false, which frees them.
TEST_F(EngineTest, CompleteStoreAfterAFailedStoreIsRefused) {
  Open(PerRankSpec(1));
  AttachWorkers(1);
  std::vector<std::string> keys;
  const std::vector<uint64_t> rows = PrepareStore(0, 1, &keys);
  env_.backend().AddRule({.fault = Fault::kFail});
  ASSERT_TRUE(Submit(0, 1, CopyDirection::kStore, {0}, rows).ok());
  ASSERT_TRUE(workers_[0]->listener.WaitForResults(1));
  ASSERT_EQ(workers_[0]->listener.results()[0].status.code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(engine_->index().CompleteStore(keys, true).code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(engine_->index().Lookup(keys),
            std::vector<SlotIndex::KeyState>{SlotIndex::KeyState::kHitPending});
  EXPECT_TRUE(engine_->index().CompleteStore(keys, false).ok());
  EXPECT_EQ(engine_->index().Lookup(keys),
            std::vector<SlotIndex::KeyState>{SlotIndex::KeyState::kMiss});
}

// vLLM 0.20 commits a preempted request's store before its workers submit it: the commit is
// recorded, the rows stay pending (never loadable), and become READY when the job finishes.
TEST_F(EngineTest, CommitBeforeTheStoreJobWaitsForIt) {
  Open(PerRankSpec(1));
  AttachWorkers(1);
  std::vector<std::string> keys;
  const std::vector<uint64_t> rows = PrepareStore(0, 2, &keys);
  ASSERT_TRUE(engine_->index().CompleteStore(keys, true).ok());
  EXPECT_EQ(engine_->index().Lookup(keys),
            std::vector<SlotIndex::KeyState>(2, SlotIndex::KeyState::kHitPending));
  EXPECT_EQ(engine_->index().PrepareLoad(keys).status().code(),
            absl::StatusCode::kFailedPrecondition);
  ASSERT_TRUE(Submit(0, 1, CopyDirection::kStore, {5, 6}, rows).ok());
  ASSERT_TRUE(workers_[0]->listener.WaitForResults(1));
  ASSERT_TRUE(workers_[0]->listener.ResultsFor(1)[0].status.ok());
  EXPECT_EQ(engine_->index().Lookup(keys),
            std::vector<SlotIndex::KeyState>(2, SlotIndex::KeyState::kHit));
  auto load_rows = engine_->index().PrepareLoad(keys);
  ASSERT_TRUE(load_rows.ok());
  const std::vector<std::string> stored = {workers_[0]->memory->Block(5),
                                           workers_[0]->memory->Block(6)};
  EXPECT_EQ(LoadBack(0, 2, *load_rows, {20, 21}), stored);
}

// ... and when that job fails, the committed keys are dropped: a miss, never a wrong hit.
TEST_F(EngineTest, CommitBeforeAStoreThatFailsDropsTheKeys) {
  Open(PerRankSpec(1));
  AttachWorkers(1);
  std::vector<std::string> keys;
  const std::vector<uint64_t> rows = PrepareStore(0, 2, &keys);
  ASSERT_TRUE(engine_->index().CompleteStore(keys, true).ok());
  env_.backend().AddRule({.fault = Fault::kFail});
  ASSERT_TRUE(Submit(0, 1, CopyDirection::kStore, {5, 6}, rows).ok());
  ASSERT_TRUE(workers_[0]->listener.WaitForResults(1));
  EXPECT_FALSE(workers_[0]->listener.ResultsFor(1)[0].status.ok());
  EXPECT_EQ(engine_->index().Lookup(keys),
            std::vector<SlotIndex::KeyState>(2, SlotIndex::KeyState::kMiss));
  SlotIndex::Counts c = engine_->index().counts();
  EXPECT_EQ(c.rows_free, kNumRows);
  EXPECT_EQ(c.commits_dropped, 2u);
  EXPECT_TRUE(CheckSlotIndexInvariants(engine_->index()).ok());
}

// A commit whose store job never comes (the worker died before submitting) is dropped by the
// engine's expiry after the job timeout.
TEST_F(EngineTest, CommitWhoseStoreNeverComesExpires) {
  Open(PerRankSpec(1));
  AttachWorkers(1);
  std::vector<std::string> keys;
  PrepareStore(0, 1, &keys);
  ASSERT_TRUE(engine_->index().CompleteStore(keys, true).ok());
  engine_->ExpireJobs(absl::Now());
  EXPECT_EQ(engine_->index().Lookup(keys),
            std::vector<SlotIndex::KeyState>{SlotIndex::KeyState::kHitPending});
  engine_->ExpireJobs(absl::Now() + env_.deps().jobs.job_timeout + absl::Seconds(1));
  EXPECT_EQ(engine_->index().Lookup(keys),
            std::vector<SlotIndex::KeyState>{SlotIndex::KeyState::kMiss});
  EXPECT_EQ(engine_->index().counts().rows_free, kNumRows);
}

// vLLM's 2026-08 connector lets only rank 0 store under MLA: with stores_by_writer_only the
// writer's vote finishes a store, a non-writer's store part is refused, a non-writer leaving
// does not fail it, and loads still need every local worker.
TEST_F(EngineTest, WriterOnlyStoresFinishOnTheWritersVote) {
  common::EngineSpec spec = ReplicatedSpec();
  spec.stores_by_writer_only = true;
  Open(spec);
  AttachWorkers(2);
  ASSERT_TRUE(engine_->geometry().replicated);
  std::vector<std::string> keys;
  const std::vector<uint64_t> rows = PrepareStore(0, 2, &keys);
  const absl::Status refused = Submit(1, 7, CopyDirection::kStore, {1, 2}, rows);
  EXPECT_EQ(refused.code(), absl::StatusCode::kFailedPrecondition) << refused;
  EXPECT_TRUE(absl::StrContains(refused.message(), "stores_by_writer_only")) << refused;

  env_.backend().AddRule({.fault = Fault::kHold});
  ASSERT_TRUE(Submit(0, 7, CopyDirection::kStore, {1, 2}, rows).ok());
  ASSERT_TRUE(env_.backend().WaitForHeld(1, absl::Seconds(10)));
  EXPECT_TRUE(workers_[0]->listener.results().empty());  // the writer's copy has not run
  engine_->Detach(workers_[1]->info.session_id);         // a non-writer leaves meanwhile
  env_.backend().ReleaseAllHeld();
  ASSERT_TRUE(workers_[0]->listener.WaitForResults(1));
  ASSERT_EQ(workers_[0]->listener.ResultsFor(7).size(), 1u);
  EXPECT_TRUE(workers_[0]->listener.ResultsFor(7)[0].status.ok());
  EXPECT_EQ(workers_[0]->listener.ResultsFor(7)[0].bytes, 2 * kBytesPerBlock);
  EXPECT_TRUE(workers_[1]->listener.ResultsFor(7).empty());  // detached before the verdict
  ASSERT_TRUE(engine_->index().CompleteStore(keys, true).ok());
  EXPECT_EQ(engine_->index().Lookup(keys),
            std::vector<SlotIndex::KeyState>(2, SlotIndex::KeyState::kHit));

  // The non-writer comes back; a load needs both votes. As a real worker would, it waits until
  // its previous session's memory is no longer referenced: the writer's copy callback drops its
  // references last, after the verdict, and the engine refuses the rank until then (UNAVAILABLE
  // "register again shortly"). On a loaded machine that can be after the verdict arrived here.
  ASSERT_TRUE(env_.Settle());
  auto memory = ShmWorkerMemory::Create(testing::kLayers, kWorkerBlocks, testing::kPageBytes, 77);
  ASSERT_TRUE(memory.ok());
  workers_[1]->memory = *std::move(memory);
  auto opened = env_.backend().OpenWorker(workers_[1]->memory->Registration());
  ASSERT_TRUE(opened.ok());
  auto info = engine_->Attach(1, workers_[1]->memory->Registration(), *std::move(opened),
                              &workers_[1]->listener);
  ASSERT_TRUE(info.ok()) << info.status();
  workers_[1]->info = *info;
  auto load_rows = engine_->index().PrepareLoad(keys);
  ASSERT_TRUE(load_rows.ok());
  ASSERT_TRUE(Submit(1, 8, CopyDirection::kLoad, {20, 21}, *load_rows).ok());
  EXPECT_EQ(engine_->Snapshot().jobs_in_flight, 1u);  // waits for the writer's part
  LoadBack(0, 9, *load_rows, {22, 23});               // another load meanwhile, by both
  ASSERT_TRUE(workers_[1]->listener.WaitForResults(1));
  ASSERT_EQ(workers_[1]->listener.ResultsFor(8).size(), 0u);  // job 8 still needs rank 0
  ASSERT_TRUE(Submit(0, 8, CopyDirection::kLoad, {20, 21}, *load_rows).ok());
  ASSERT_TRUE(workers_[1]->listener.WaitForResults(2));
  ASSERT_TRUE(workers_[1]->listener.ResultsFor(8)[0].status.ok());
  EXPECT_EQ(workers_[1]->memory->Block(20), workers_[0]->memory->Block(1));
  EXPECT_EQ(workers_[1]->memory->Block(21), workers_[0]->memory->Block(2));
}

// Without replication the flag changes nothing: every slot still votes.
TEST_F(EngineTest, WriterOnlyStoresNeedEverySlotOnAPerRankLayout) {
  common::EngineSpec spec = PerRankSpec(2);
  spec.stores_by_writer_only = true;
  Open(spec);
  AttachWorkers(2);
  std::vector<std::string> keys;
  const std::vector<uint64_t> rows = PrepareStore(0, 1, &keys);
  ASSERT_TRUE(Submit(0, 1, CopyDirection::kStore, {3}, rows).ok());
  ASSERT_TRUE(env_.backend().WaitForCompleted(1, absl::Seconds(10)));
  EXPECT_TRUE(workers_[0]->listener.results().empty());
  ASSERT_TRUE(Submit(1, 1, CopyDirection::kStore, {3}, rows).ok());
  ASSERT_TRUE(workers_[0]->listener.WaitForResults(1));
  EXPECT_TRUE(workers_[0]->listener.ResultsFor(1)[0].status.ok());
}

// A row's blocks are addressable one by one for loads: a load may start and end inside a row
// (vLLM loads an offloaded block's tail when its head is still in the GPU cache).
TEST_F(EngineTest, LoadsOfSingleBlocksOfRows) {
  common::EngineSpec spec = PerRankSpec(1);
  spec.blocks_per_row = 2;
  Open(spec);
  AttachWorkers(1);
  std::vector<std::string> keys;
  const std::vector<uint64_t> rows = PrepareStore(0, 2, &keys);  // 4 blocks
  ASSERT_TRUE(Submit(0, 1, CopyDirection::kStore, {4, 5, 6, 7}, rows).ok());
  ASSERT_TRUE(workers_[0]->listener.WaitForResults(1));
  ASSERT_TRUE(engine_->index().CompleteStore(keys, true).ok());
  auto load_rows = engine_->index().PrepareLoad(keys);
  ASSERT_TRUE(load_rows.ok());
  Worker& w = *workers_[0];
  const std::string b5 = w.memory->Block(5), b6 = w.memory->Block(6), b7 = w.memory->Block(7);

  // Region blocks 1..3: the second block of the first row, then all of the second row.
  JobPart part;
  part.job_id = 2;
  part.direction = CopyDirection::kLoad;
  part.runs = {PartRun{20, (*load_rows)[0], 0, 1, 1}, PartRun{21, (*load_rows)[1], 0, 0, 2}};
  for (uint64_t b : {20, 21, 22}) w.memory->Scramble(b, b);
  ASSERT_TRUE(engine_->Submit(w.info.session_id, part).ok());
  ASSERT_TRUE(w.listener.WaitForResults(2));
  ASSERT_TRUE(w.listener.ResultsFor(2)[0].status.ok()) << w.listener.ResultsFor(2)[0].status;
  EXPECT_EQ(w.listener.ResultsFor(2)[0].bytes, 3 * kBytesPerBlock);
  EXPECT_EQ(w.memory->Block(20), b5);
  EXPECT_EQ(w.memory->Block(21), b6);
  EXPECT_EQ(w.memory->Block(22), b7);

  // Refused, changing nothing: a store by block, a range starting past its row, a block past
  // the end of the region.
  JobPart bad = part;
  bad.job_id = 3;
  bad.direction = CopyDirection::kStore;
  EXPECT_EQ(engine_->Submit(w.info.session_id, bad).code(), absl::StatusCode::kInvalidArgument);
  bad = part;
  bad.job_id = 4;
  bad.runs[0].first_block = 2;
  EXPECT_EQ(engine_->Submit(w.info.session_id, bad).code(), absl::StatusCode::kInvalidArgument);
  bad = part;
  bad.job_id = 5;
  bad.runs.back().row = engine_->geometry().num_rows - 1;
  bad.runs.back().first_block = 1;
  EXPECT_EQ(engine_->Submit(w.info.session_id, bad).code(), absl::StatusCode::kOutOfRange);
  ASSERT_TRUE(engine_->index().CompleteLoad(keys).ok());
  EXPECT_EQ(engine_->Snapshot().jobs_in_flight, 0u);
  EXPECT_TRUE(CheckSlotIndexInvariants(engine_->index()).ok());
}

// A store part whose rows were freed and handed to another key since it was planned (it came
// late, or again after a lost session) is refused by the rows' store tickets, changing nothing.
TEST_F(EngineTest, AStorePartForARowReusedSinceIsRefused) {
  Open(PerRankSpec(1));
  AttachWorkers(1);
  auto k1 = engine_->index().PrepareStore({"k1"});
  ASSERT_TRUE(k1.ok());
  ASSERT_TRUE(engine_->index().CompleteStore({"k1"}, false).ok());
  auto k2 = engine_->index().PrepareStore({"k2"});
  ASSERT_TRUE(k2.ok());
  ASSERT_EQ(k2->rows, k1->rows);
  const std::vector<uint64_t> stale = {StoreHandle(k1->ticket, k1->rows[0])};
  const std::vector<uint64_t> fresh = {StoreHandle(k2->ticket, k2->rows[0])};
  const absl::Status refused = Submit(0, 1, CopyDirection::kStore, {4}, stale);
  EXPECT_EQ(refused.code(), absl::StatusCode::kFailedPrecondition) << refused;
  EXPECT_EQ(engine_->Snapshot().jobs_in_flight, 0u);
  ASSERT_TRUE(Submit(0, 2, CopyDirection::kStore, {5}, fresh).ok());
  ASSERT_TRUE(workers_[0]->listener.WaitForResults(1));
  ASSERT_TRUE(workers_[0]->listener.ResultsFor(2)[0].status.ok());
  ASSERT_TRUE(engine_->index().CompleteStore({"k2"}, true).ok());
  auto rows = engine_->index().PrepareLoad({"k2"});
  ASSERT_TRUE(rows.ok());
  const std::string stored = workers_[0]->memory->Block(5);
  EXPECT_EQ(LoadBack(0, 3, *rows, {9}), std::vector<std::string>{stored});
}

// A worker that lost its session and registers again (a new session of the same mp_rank) is
// refused while copies of the old session still run, so a part it resubmits can never race one
// of them into the same GPU blocks.
TEST_F(EngineTest, ARankRegistersAgainOnlyOnceItsOldCopiesEnded) {
  Open(PerRankSpec(1));
  AttachWorkers(1);
  std::vector<std::string> keys;
  const std::vector<uint64_t> rows = PrepareStore(0, 1, &keys);
  env_.backend().AddRule({.fault = Fault::kHold});
  ASSERT_TRUE(Submit(0, 1, CopyDirection::kStore, {2}, rows).ok());
  ASSERT_TRUE(env_.backend().WaitForHeld(1, absl::Seconds(10)));
  engine_->Detach(workers_[0]->info.session_id);

  auto again = [&]() -> absl::Status {
    auto memory = ShmWorkerMemory::Create(testing::kLayers, kWorkerBlocks, testing::kPageBytes, 5);
    if (!memory.ok()) return memory.status();
    auto opened = env_.backend().OpenWorker((*memory)->Registration());
    if (!opened.ok()) return opened.status();
    auto info =
        engine_->Attach(0, (*memory)->Registration(), *std::move(opened), &workers_[0]->listener);
    if (info.ok()) engine_->Detach(info->session_id);
    return info.status();
  };
  const absl::Status refused = again();
  EXPECT_EQ(refused.code(), absl::StatusCode::kUnavailable) << refused;
  EXPECT_TRUE(absl::StrContains(refused.message(), "still running")) << refused;
  env_.backend().ReleaseAllHeld();
  ASSERT_TRUE(env_.Settle());
  EXPECT_TRUE(again().ok());
}

}  // namespace
}  // namespace kvoffload::daemon

namespace kvoffload::daemon {
namespace {

// The layout identity outlives a daemon through EngineResources: a restored engine refuses a
// worker whose tensors split the same bytes per block differently, and a new engine reports the
// first worker's layout exactly once.
TEST(EngineLayoutTest, ARestoredLayoutRefusesAnotherSplitAndANewOneIsRecordedOnce) {
  EngineTestEnv env;
  const common::EngineSpec spec = PerRankSpec(2);
  auto geometry = common::ComputeGeometry(spec);
  ASSERT_TRUE(geometry.ok());
  auto make = [&](std::vector<uint64_t> layout, std::vector<std::vector<uint64_t>>* recorded) {
    auto resources = AcquireEngineResources(spec, *geometry, &env.budget(), &env.backend(),
                                            env.deps().region_options);
    EXPECT_TRUE(resources.ok()) << resources.status();
    resources->layout = std::move(layout);
    resources->record_layout = [recorded](const std::vector<uint64_t>& pages) {
      recorded->push_back(pages);
    };
    return Engine::FromResources(spec, *geometry, env.deps(), /*region_epoch=*/7,
                                 *std::move(resources));
  };
  auto attach = [&](Engine& engine, uint32_t rank, uint32_t tensors, RecordingListener* listener,
                    std::unique_ptr<ShmWorkerMemory>* keep) {
    auto memory = ShmWorkerMemory::Create(tensors, kWorkerBlocks, kBytesPerBlock / tensors,
                                          /*seed=*/rank);
    EXPECT_TRUE(memory.ok()) << memory.status();
    auto opened = env.backend().OpenWorker((*memory)->Registration());
    EXPECT_TRUE(opened.ok()) << opened.status();
    auto info = engine.Attach(rank, (*memory)->Registration(), *std::move(opened), listener);
    *keep = *std::move(memory);
    return info.status();
  };
  RecordingListener l0, l1;
  std::unique_ptr<ShmWorkerMemory> m0, m1;
  {
    std::vector<std::vector<uint64_t>> recorded;
    std::shared_ptr<Engine> restored = make({kBytesPerBlock}, &recorded);
    absl::Status other = attach(*restored, 0, /*tensors=*/2, &l0, &m0);
    EXPECT_EQ(other.code(), absl::StatusCode::kFailedPrecondition) << other;
    EXPECT_TRUE(attach(*restored, 0, /*tensors=*/1, &l0, &m0).ok());
    EXPECT_TRUE(recorded.empty());  // restored, not fixed again
    restored->Close(absl::CancelledError("test over"));
    ASSERT_TRUE(restored->WaitClosed(absl::Now() + absl::Seconds(5)));
    restored->Detach(1);
  }
  ASSERT_TRUE(env.Settle());
  {
    std::vector<std::vector<uint64_t>> recorded;
    std::shared_ptr<Engine> fresh = make({}, &recorded);
    EXPECT_TRUE(attach(*fresh, 0, /*tensors=*/2, &l0, &m0).ok());
    EXPECT_TRUE(attach(*fresh, 1, /*tensors=*/2, &l1, &m1).ok());
    ASSERT_EQ(recorded.size(), 1u);
    EXPECT_EQ(recorded[0], (std::vector<uint64_t>{kBytesPerBlock / 2, kBytesPerBlock / 2}));
  }
}

}  // namespace
}  // namespace kvoffload::daemon
