// --backend and the CUDA flags the factory passes on, without a GPU (CI): option errors are
// INVALID_ARGUMENT before any GPU is looked for; a missing GPU is UNAVAILABLE, nothing else.
#include "daemon/backend_factory.h"

#include "gtest/gtest.h"

namespace kvoffload::daemon {
namespace {

TEST(BackendFactoryTest, AnUnknownBackendIsRefused) {
  BackendOptions options;
  options.kind = "tpu";
  absl::Status s = CreateBackend(options).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("--backend must be auto, cuda or host (got 'tpu')"),
            absl::string_view::npos)
      << s;
}

TEST(BackendFactoryTest, TheDefaultFirstBatchFitsASmallerLargestBatch) {
  BackendOptions options;
  options.kind = "cuda";
  ASSERT_EQ(options.first_batch_copies, 8u);
  options.max_batch_copies = 4;  // below the default first call: clamped, not an error
  EXPECT_NE(CreateBackend(options).status().code(), absl::StatusCode::kInvalidArgument);
  options.max_batch_copies = 0;  // still out of the batch bound
  absl::Status s = CreateBackend(options).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("max_batch_copies must be 1..4096, not 0"), absl::string_view::npos)
      << s;
}

TEST(BackendFactoryTest, TheHostBackendNeedsCopyThreads) {
  BackendOptions options;
  options.kind = "host";
  options.host_copy_threads = 0;
  EXPECT_EQ(CreateBackend(options).status().code(), absl::StatusCode::kInvalidArgument);
  options.host_copy_threads = 2;
  EXPECT_TRUE(CreateBackend(options).ok());
}

}  // namespace
}  // namespace kvoffload::daemon
