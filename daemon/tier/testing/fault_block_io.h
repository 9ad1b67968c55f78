// FaultBlockIo: a BlockIo wrapper for tests (LevelDB's FaultInjectionTestEnv): it passes
// requests to a real BlockIo and, when told, fails them with an errno (EIO, ENOSPC) without
// touching the device, tears writes (only the first bytes reach the device, then EIO), makes
// them short (the first bytes reach the device and that count is reported), refuses
// fallocate, or holds completions until the test releases them (a deterministic "slow device":
// no sleeps). Rules apply to the next `count` matching requests, in submission order.
//
// Thread-safe. Owns the wrapped BlockIo. Held completions must be released before destruction.
#ifndef KVOFFLOAD_DAEMON_TIER_TESTING_FAULT_BLOCK_IO_H_
#define KVOFFLOAD_DAEMON_TIER_TESTING_FAULT_BLOCK_IO_H_

#include <climits>
#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "daemon/tier/block_io.h"

namespace kvoffload::tier::testing {

class FaultBlockIo final : public BlockIo {
 public:
  explicit FaultBlockIo(std::unique_ptr<BlockIo> base) : base_(std::move(base)) {}
  ~FaultBlockIo() override = default;

  void FailWrites(int err, int count = INT_MAX);
  void FailReads(int err, int count = INT_MAX);
  // Only the first `keep_bytes` of each write reach the device; the write then reports EIO.
  void TearWrites(uint64_t keep_bytes, int count = INT_MAX);
  // Only the first `keep_bytes` reach the device, and the write reports that many bytes.
  void ShortWrites(uint64_t keep_bytes, int count = INT_MAX);
  void FailPreallocate(int err);
  // Stops running completions (they are kept, in order) until ReleaseHeld.
  void HoldCompletions();
  // Runs every held completion on the calling thread and stops holding. Returns how many.
  size_t ReleaseHeld();
  size_t held() const;
  // Submits seen, by kind (including failed ones).
  uint64_t reads_submitted() const;
  uint64_t writes_submitted() const;

  absl::string_view name() const override { return base_->name(); }
  absl::StatusOr<int> OpenFile(const std::string& path) override { return base_->OpenFile(path); }
  absl::Status Preallocate(int fd, uint64_t bytes) override;
  absl::StatusOr<uint64_t> FileSize(int fd) override { return base_->FileSize(fd); }
  absl::Status Sync(int fd) override { return base_->Sync(fd); }
  void CloseFile(int fd) override { base_->CloseFile(fd); }
  void Submit(IoRequest request, IoCallback done) override;

 private:
  enum class Fault { kNone, kFail, kTear, kShort };
  struct Rule {
    Fault fault = Fault::kNone;
    int err = 0;
    uint64_t keep_bytes = 0;
    int count = 0;
  };
  // The fault for the next request of a kind (consuming one of its count).
  Rule Take(Rule& rule) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Calls `done` now, or keeps it while holding.
  void Complete(IoCallback done, absl::StatusOr<uint64_t> result);

  std::unique_ptr<BlockIo> base_;
  mutable absl::Mutex mu_;
  Rule write_rule_ ABSL_GUARDED_BY(mu_);
  Rule read_rule_ ABSL_GUARDED_BY(mu_);
  int preallocate_err_ ABSL_GUARDED_BY(mu_) = 0;
  bool holding_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::pair<IoCallback, absl::StatusOr<uint64_t>>> held_ ABSL_GUARDED_BY(mu_);
  uint64_t reads_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t writes_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace kvoffload::tier::testing

#endif  // KVOFFLOAD_DAEMON_TIER_TESTING_FAULT_BLOCK_IO_H_
