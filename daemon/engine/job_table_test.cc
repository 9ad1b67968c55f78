#include "daemon/engine/job_table.h"

#include <vector>

#include "gtest/gtest.h"

namespace kvoffload::daemon {
namespace {

// A part of one-block rows, GPU block i into row rows[i], every row under `ticket`.
ValidPart Part(uint64_t id, CopyDirection direction, std::vector<uint64_t> rows,
               uint32_t ticket = 0) {
  ValidPart part;
  part.job_id = id;
  part.direction = direction;
  for (size_t i = 0; i < rows.size(); ++i) {
    AppendRun(&part.runs, CopyRun{i, rows[i], 1});
    AppendRows(&part.rows, RowRun{rows[i], 1, ticket});
  }
  part.num_blocks = rows.size();
  return part;
}

JobLimits Limits(uint64_t max_jobs = 8, size_t remembered = 4) {
  JobLimits limits;
  limits.max_jobs_per_engine = max_jobs;
  limits.finished_remembered = remembered;
  limits.job_timeout = absl::Seconds(30);
  return limits;
}

VoteRule PerRank(uint32_t local) { return VoteRule{false, local, false}; }
VoteRule Replicated(uint32_t local, bool writer_only) { return VoteRule{true, local, writer_only}; }

TEST(VoteRuleTest, PerRankNeedsEverySlotReplicatedEveryRankOrTheWriter) {
  Job job;
  job.direction = CopyDirection::kStore;
  job.voted = {0, 1};
  job.voted_slots = {0};  // rank 1 was counted through slot 0 (a newcomer in a left rank's slot)
  EXPECT_FALSE(PerRank(2).AllVoted(job));
  job.voted_slots = {0, 1};
  EXPECT_TRUE(PerRank(2).AllVoted(job));

  Job replicated;
  replicated.direction = CopyDirection::kStore;
  replicated.voted = {0};
  replicated.voted_slots = {0};
  EXPECT_FALSE(Replicated(2, false).AllVoted(replicated));
  EXPECT_TRUE(Replicated(2, true).AllVoted(replicated));  // writer-only store
  replicated.voted = {1};
  EXPECT_FALSE(Replicated(2, true).AllVoted(replicated));  // a non-writer never finishes it
  replicated.direction = CopyDirection::kLoad;
  replicated.voted = {0};
  EXPECT_FALSE(Replicated(2, true).AllVoted(replicated));  // loads need every rank
}

TEST(VoteRuleTest, WriterOnlyStoresWaitForNoNonWriter) {
  EXPECT_FALSE(Replicated(2, true).NeedsVoteOf(CopyDirection::kStore, 1));
  EXPECT_TRUE(Replicated(2, true).NeedsVoteOf(CopyDirection::kStore, 0));
  EXPECT_TRUE(Replicated(2, true).NeedsVoteOf(CopyDirection::kLoad, 1));
  EXPECT_TRUE(Replicated(2, false).NeedsVoteOf(CopyDirection::kStore, 1));
}

TEST(JobTableTest, AJobIsDueWhenEveryVoteIsInAndNoCopyRuns) {
  JobTable jobs(PerRank(2), Limits(), "e/0");
  const ValidPart part = Part(7, CopyDirection::kStore, {3, 4});
  ASSERT_TRUE(jobs.CheckNew(part, 0).ok());
  Job& job = jobs.Open(part, absl::Now());
  job.submitted.insert(0);
  job.copies_in_flight = 1;
  jobs.Vote(job, 0, 0, absl::OkStatus());
  EXPECT_FALSE(jobs.Due(job));  // a copy still runs
  job.copies_in_flight = 0;
  EXPECT_FALSE(jobs.Due(job));  // slot 1 has not voted
  jobs.CountCopied(job, 100);
  jobs.Vote(job, 1, 1, absl::OkStatus());
  ASSERT_TRUE(jobs.Due(job));
  const JobResult result = jobs.Report(job);
  EXPECT_EQ(result.job_id, 7u);
  EXPECT_TRUE(result.status.ok());
  EXPECT_EQ(result.bytes, 100u);
  jobs.Retire(job);
  EXPECT_EQ(jobs.Find(7), nullptr);
  EXPECT_EQ(jobs.counters().store_jobs, 1u);
  EXPECT_EQ(jobs.counters().store_bytes, 100u);
  EXPECT_EQ(jobs.counters().jobs_done, 1u);
  // The id is retired: a repeat is a duplicate.
  EXPECT_EQ(jobs.CheckNew(part, 0).code(), absl::StatusCode::kAlreadyExists);
}

TEST(JobTableTest, TheFirstErrorIsTheVerdictAndAFailedJobWaitsForItsCopies) {
  JobTable jobs(PerRank(2), Limits(), "e/0");
  Job& job = jobs.Open(Part(1, CopyDirection::kLoad, {0}), absl::Now());
  job.submitted = {0, 1};
  job.copies_in_flight = 1;
  jobs.Vote(job, 0, 0, absl::DataLossError("first"));
  jobs.Fail(job, absl::UnavailableError("second"));
  EXPECT_FALSE(jobs.Due(job));  // never reported while a copy may still write GPU blocks
  job.copies_in_flight = 0;
  ASSERT_TRUE(jobs.Due(job));
  EXPECT_EQ(jobs.Report(job).status, absl::DataLossError("first"));
  jobs.Retire(job);
  EXPECT_EQ(jobs.counters().jobs_failed, 1u);
  // A late part of the failed job from a rank whose part was in: ALREADY_EXISTS; from another
  // rank: the job's verdict.
  const ValidPart late = Part(1, CopyDirection::kLoad, {0});
  EXPECT_EQ(jobs.CheckNew(late, 1).code(), absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(jobs.CheckNew(late, 2), absl::DataLossError("first"));
}

TEST(JobTableTest, RefusesOverTheLimitRowsTwiceInAStoreAndDifferingParts) {
  JobTable jobs(PerRank(2), Limits(/*max_jobs=*/1), "e/0");
  EXPECT_EQ(jobs.CheckNew(Part(1, CopyDirection::kStore, {5, 2, 5}), 0).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(jobs.CheckNew(Part(1, CopyDirection::kLoad, {5, 2, 5}), 0).ok());  // loads may
  const ValidPart part = Part(1, CopyDirection::kStore, {1, 2}, /*ticket=*/9);
  Job& job = jobs.Open(part, absl::Now());
  job.submitted.insert(0);
  EXPECT_EQ(jobs.CheckNew(Part(2, CopyDirection::kStore, {3}), 0).code(),
            absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(jobs.CheckJoin(job, part, 0).code(), absl::StatusCode::kAlreadyExists);
  EXPECT_TRUE(jobs.CheckJoin(job, part, 1).ok());
  EXPECT_EQ(jobs.CheckJoin(job, Part(1, CopyDirection::kStore, {1, 2}, 8), 1).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(jobs.CheckJoin(job, Part(1, CopyDirection::kStore, {1, 3}, 9), 1).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(jobs.CheckJoin(job, Part(1, CopyDirection::kLoad, {1, 2}, 9), 1).code(),
            absl::StatusCode::kInvalidArgument);
  // Another rank's GPU blocks are its own: only the region blocks must agree.
  ValidPart other_blocks = part;
  other_blocks.runs = {CopyRun{7, 1, 1}, CopyRun{3, 2, 1}};
  EXPECT_TRUE(jobs.CheckJoin(job, other_blocks, 1).ok());
  other_blocks.runs = {CopyRun{7, 1, 1}, CopyRun{3, 3, 1}};
  EXPECT_EQ(jobs.CheckJoin(job, other_blocks, 1).code(), absl::StatusCode::kInvalidArgument);
}

TEST(JobTableTest, DrainingFailsJobsThatCanGetNoMoreVotes) {
  JobTable jobs(PerRank(2), Limits(), "e/0");
  jobs.Vote(jobs.Open(Part(1, CopyDirection::kStore, {0}), absl::Now()), 0, 0,
            absl::OkStatus());
  jobs.Open(Part(2, CopyDirection::kStore, {1}), absl::Now()).copies_in_flight = 1;
  Job& waiting = *jobs.Find(1);  // references last until the next Open
  Job& copying = *jobs.Find(2);
  EXPECT_EQ(jobs.WaitingForParts(), std::vector<uint64_t>{1});
  jobs.StartDraining(absl::UnavailableError("stopping"));
  ASSERT_TRUE(jobs.Due(waiting));
  EXPECT_EQ(waiting.status, absl::UnavailableError("stopping"));
  EXPECT_FALSE(jobs.Due(copying));  // its copy decides
}

TEST(JobTableTest, ExpiredJobsNameTheRanksWhoseCopiesArePending) {
  JobTable jobs(PerRank(2), Limits(), "e/0");
  const absl::Time t0 = absl::Now();
  Job& job = jobs.Open(Part(3, CopyDirection::kLoad, {0}), t0);
  job.submitted = {0, 1};
  jobs.Vote(job, 0, 0, absl::OkStatus());
  EXPECT_TRUE(jobs.Expired(t0 + absl::Seconds(29), 2).empty());
  auto expired = jobs.Expired(t0 + absl::Seconds(30), 2);
  ASSERT_EQ(expired.size(), 1u);
  EXPECT_EQ(expired[0].first, 3u);
  EXPECT_EQ(expired[0].second.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_NE(expired[0].second.message().find("1 of 2 local votes"), absl::string_view::npos)
      << expired[0].second;
  EXPECT_NE(expired[0].second.message().find("copies pending for mp_ranks [1]"),
            absl::string_view::npos)
      << expired[0].second;
}

TEST(JobTableTest, AwaitingVoteOfSkipsVotedJobsAndWriterOnlyStores) {
  JobTable jobs(Replicated(2, true), Limits(), "e/0");
  jobs.Open(Part(1, CopyDirection::kStore, {0}), absl::Now());
  jobs.Open(Part(2, CopyDirection::kLoad, {0}), absl::Now());
  EXPECT_EQ(jobs.AwaitingVoteOf(1), std::vector<uint64_t>{2});
  jobs.Vote(*jobs.Find(2), 1, 0, absl::OkStatus());
  EXPECT_TRUE(jobs.AwaitingVoteOf(1).empty());
  EXPECT_EQ(jobs.AwaitingVoteOf(0).size(), 2u);
}

TEST(JobTableTest, RetiredOutcomesAreBounded) {
  JobTable jobs(PerRank(1), Limits(8, /*remembered=*/2), "e/0");
  for (uint64_t id = 1; id <= 3; ++id) {
    Job& job = jobs.Open(Part(id, CopyDirection::kLoad, {0}), absl::Now());
    jobs.Vote(job, 0, 0, absl::OkStatus());
    ASSERT_TRUE(jobs.Due(job));
    jobs.Report(job);
    jobs.Retire(job);
  }
  EXPECT_TRUE(jobs.CheckNew(Part(1, CopyDirection::kLoad, {0}), 0).ok());  // forgotten
  EXPECT_EQ(jobs.CheckNew(Part(3, CopyDirection::kLoad, {0}), 0).code(),
            absl::StatusCode::kAlreadyExists);
}

}  // namespace
}  // namespace kvoffload::daemon
