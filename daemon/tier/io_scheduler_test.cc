// IoScheduler: reads go first, writes are capped and never start while a read waits. A fake
// BlockIo that completes only when told makes every step deterministic.
#include "daemon/tier/io_scheduler.h"

#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "gtest/gtest.h"

namespace kvoffload::tier {
namespace {

class ManualBlockIo final : public BlockIo {
 public:
  absl::string_view name() const override { return "manual"; }
  absl::StatusOr<int> OpenFile(const std::string&) override { return 3; }
  absl::Status Preallocate(int, uint64_t) override { return absl::OkStatus(); }
  absl::StatusOr<uint64_t> FileSize(int) override { return 0; }
  absl::Status Sync(int) override { return absl::OkStatus(); }
  void CloseFile(int) override {}
  void Submit(IoRequest request, IoCallback done) override {
    absl::MutexLock lock(&mu_);
    started_.push_back(QueuedIo{std::move(request), std::move(done)});
  }
  // The kinds started so far, in order: "r" or "w" (offset is the request's tag).
  std::string Started() {
    absl::MutexLock lock(&mu_);
    std::string s;
    for (const QueuedIo& q : started_) s += q.request.kind == IoRequest::Kind::kRead ? 'r' : 'w';
    return s;
  }
  // Completes the i-th started request.
  void Complete(size_t i) {
    IoCallback done;
    {
      absl::MutexLock lock(&mu_);
      done = std::move(started_[i].done);
    }
    done(uint64_t{4096});
  }

 private:
  absl::Mutex mu_;
  std::vector<QueuedIo> started_ ABSL_GUARDED_BY(mu_);
};

IoRequest Req(IoRequest::Kind kind) {
  IoRequest r;
  r.kind = kind;
  return r;
}

TEST(IoSchedulerTest, WritesAreCappedAndWaitBehindReads) {
  ManualBlockIo io;
  int completed = 0;
  auto count = [&completed](absl::StatusOr<uint64_t> r) { completed += r.ok(); };
  {
    IoScheduler s(io, /*depth=*/4, /*write_depth=*/2);
    for (int i = 0; i < 3; ++i) s.Submit(Req(IoRequest::Kind::kWrite), count);
    EXPECT_EQ(io.Started(), "ww");  // the write cap
    for (int i = 0; i < 3; ++i) s.Submit(Req(IoRequest::Kind::kRead), count);
    EXPECT_EQ(io.Started(), "wwrr");  // reads fill the depth, the third waits
    IoScheduler::Counts c = s.counts();
    EXPECT_EQ(c.reads_waiting, 1u);
    EXPECT_EQ(c.writes_waiting, 1u);
    io.Complete(0);  // a write ends: the waiting read goes first, not the waiting write
    EXPECT_EQ(io.Started(), "wwrrr");
    io.Complete(2);  // a read ends; no read waits: the write may start (1 write in flight)
    EXPECT_EQ(io.Started(), "wwrrrw");
    for (size_t i : {1, 3, 4, 5}) io.Complete(i);
    EXPECT_EQ(s.counts().reads_in_flight + s.counts().writes_in_flight, 0);
  }
  EXPECT_EQ(completed, 6);
}

TEST(IoSchedulerTest, AWriteFloodLeavesReadsRoom) {
  ManualBlockIo io;
  IoScheduler s(io, /*depth=*/3, /*write_depth=*/2);
  auto ignore = [](absl::StatusOr<uint64_t>) {};
  for (int i = 0; i < 10; ++i) s.Submit(Req(IoRequest::Kind::kWrite), ignore);
  s.Submit(Req(IoRequest::Kind::kRead), ignore);
  EXPECT_EQ(io.Started(), "wwr");  // the read starts at once despite 8 writes waiting
  for (size_t i = 0; i < 11; ++i) io.Complete(i);  // drains (each completion starts the next)
  EXPECT_EQ(io.Started(), "wwrwwwwwwww");
}

}  // namespace
}  // namespace kvoffload::tier
