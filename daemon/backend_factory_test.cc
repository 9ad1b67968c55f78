// --backend and the CUDA flags the factory passes on, without a GPU (CI): option errors are
// INVALID_ARGUMENT before any GPU is looked for; a missing GPU is UNAVAILABLE, nothing else.
#include "daemon/backend_factory.h"

#include "gtest/gtest.h"

namespace kvoffload::daemon {
namespace {

TEST(BackendFactoryTest, TheFlagWordsParseBothWays) {
  for (BackendKind kind : {BackendKind::kAuto, BackendKind::kCuda, BackendKind::kHost}) {
    absl::StatusOr<BackendKind> parsed = ParseBackendKind(BackendKindName(kind));
    ASSERT_TRUE(parsed.ok()) << parsed.status();
    EXPECT_EQ(*parsed, kind);
  }
  for (cuda::ForcedPath path : {cuda::ForcedPath::kAuto, cuda::ForcedPath::kCopyEngine,
                                cuda::ForcedPath::kStaged, cuda::ForcedPath::kKernel}) {
    absl::StatusOr<cuda::ForcedPath> parsed = ParseCopyPath(CopyPathName(path));
    ASSERT_TRUE(parsed.ok()) << parsed.status();
    EXPECT_EQ(*parsed, path);
  }
  for (cuda::SmCopies sm : {cuda::SmCopies::kIfMps, cuda::SmCopies::kAlways,
                            cuda::SmCopies::kNever}) {
    absl::StatusOr<cuda::SmCopies> parsed = ParseSmCopies(SmCopiesName(sm));
    ASSERT_TRUE(parsed.ok()) << parsed.status();
    EXPECT_EQ(*parsed, sm);
  }
  // The flags' defaults are these words (daemon/main.cc takes them from BackendOptions).
  EXPECT_STREQ(BackendKindName(BackendOptions().kind), "auto");
  EXPECT_STREQ(CopyPathName(BackendOptions().cuda.forced_path), "auto");
  EXPECT_STREQ(SmCopiesName(BackendOptions().cuda.sm_copies), "if_mps");
}

TEST(BackendFactoryTest, AnUnknownWordIsRefusedWithTheFlagsWords) {
  absl::Status s = ParseBackendKind("tpu").status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "--backend must be auto, cuda, host (got 'tpu')");
  s = ParseCopyPath("fast").status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "--copy_path must be auto, copy_engine, staged, kernel (got 'fast')");
  s = ParseSmCopies("").status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "--sm_copies must be if_mps, always, never (got '')");
}

TEST(BackendFactoryTest, TheDefaultFirstBatchFitsASmallerLargestBatch) {
  BackendOptions options;
  options.kind = BackendKind::kCuda;
  ASSERT_EQ(options.cuda.first_batch_copies, 8u);
  options.cuda.max_batch_copies = 4;  // below the default first call: clamped, not an error
  EXPECT_TRUE(ValidateBackendOptions(options).ok());
  EXPECT_EQ(EffectiveBackendOptions(options).cuda.first_batch_copies, 4u);
  EXPECT_NE(CreateBackend(options).status().code(), absl::StatusCode::kInvalidArgument);
  options.cuda.max_batch_copies = 0;  // still out of the batch bound
  absl::Status s = CreateBackend(options).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("max_batch_copies must be 1..4096, not 0"), absl::string_view::npos)
      << s;
}

TEST(BackendFactoryTest, StagingAboveTheBoundIsRefusedWithoutAGpu) {
  BackendOptions options;
  options.cuda.staging_bytes_per_device = cuda::kMaxStagingBytesPerDevice + 1;
  absl::Status s = ValidateBackendOptions(options);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(),
            "staging_bytes_per_device must be at most 16777216 MiB (--staging_mib_per_device)");
  options.kind = BackendKind::kHost;  // the host backend has no staging: not its rule
  EXPECT_TRUE(ValidateBackendOptions(options).ok());
}

TEST(BackendFactoryTest, TheHostBackendNeedsCopyThreads) {
  BackendOptions options;
  options.kind = BackendKind::kHost;
  options.host_copy_threads = 0;
  absl::Status s = CreateBackend(options).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "--host_copy_threads must be > 0");
  options.host_copy_threads = 2;
  EXPECT_TRUE(CreateBackend(options).ok());
}

}  // namespace
}  // namespace kvoffload::daemon
