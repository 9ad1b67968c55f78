// ReadinessDaemon: a stand-in kvoffloadd for tests of the clients' readiness calls. It serves
// Engine.OpenEngine on <dir>/kvoffload.sock (any spec: a fixed geometry, epoch kEpoch) and
// Admin.Stats on <dir>/admin.sock, whose one engine line reports a region still being pinned
// for the first `not_ready_answers` Stats calls (rows_not_ready kNotReadyRows, region bytes
// kReadyBytes of kRegionBytes) and fully ready after them. The real daemon cannot be held
// half-ready on demand; its answers when ready are tested against kvoffloadd itself.
//
//   ASSERT_OK_AND_ASSIGN(auto fake, ReadinessDaemon::Start("llama", /*not_ready_answers=*/3));
//   ... SchedulerClient::Open(fake->data_socket(), spec) ... WaitUntilReady(...)
//   EXPECT_EQ(fake->stats_calls(), 4);
//
// Thread-safe. Owns its servers (shut down on destruction) and its directory (removed).
#ifndef KVOFFLOAD_CLIENT_TESTING_READINESS_DAEMON_H_
#define KVOFFLOAD_CLIENT_TESTING_READINESS_DAEMON_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"

namespace kvoffload::client::testing {

class ReadinessDaemon {
 public:
  static constexpr uint64_t kEpoch = 0x1f3a9c20d4e5b7;
  static constexpr uint64_t kNumRows = 128;
  static constexpr uint64_t kRowBytes = 8192;
  static constexpr uint64_t kRegionBytes = kNumRows * kRowBytes;
  static constexpr uint64_t kNotReadyRows = 96;
  static constexpr uint64_t kReadyBytes = (kNumRows - kNotReadyRows) * kRowBytes;

  // Engine `engine_id`/0; `not_ready_answers` < 0: never ready.
  static absl::StatusOr<std::unique_ptr<ReadinessDaemon>> Start(const std::string& engine_id,
                                                                int64_t not_ready_answers);
  ~ReadinessDaemon();
  ReadinessDaemon(const ReadinessDaemon&) = delete;
  ReadinessDaemon& operator=(const ReadinessDaemon&) = delete;

  std::string data_socket() const;
  int64_t stats_calls() const;

 private:
  struct Impl;
  explicit ReadinessDaemon(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace kvoffload::client::testing

#endif  // KVOFFLOAD_CLIENT_TESTING_READINESS_DAEMON_H_
