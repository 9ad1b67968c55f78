// Runs on every machine: without a driver or GPU the factory must say UNAVAILABLE (the daemon's
// --backend=auto then uses the host backend); with one it must give a working backend.
#include "daemon/copy/cuda/cuda_copy_backend.h"

#include <sys/mman.h>

#include <cstring>

#include "absl/synchronization/notification.h"
#include "gtest/gtest.h"

namespace kvoffload::daemon::cuda {
namespace {

TEST(CudaCopyBackendTest, UnavailableWithoutGpuOrOkWithOne) {
  absl::StatusOr<std::unique_ptr<CopyBackend>> backend = CreateCudaCopyBackend({});
  if (!backend.ok()) {
    EXPECT_EQ(backend.status().code(), absl::StatusCode::kUnavailable) << backend.status();
    const bool names_error =
        backend.status().message().find("cudaError") != absl::string_view::npos ||
        backend.status().message().find("no CUDA device") != absl::string_view::npos;
    EXPECT_TRUE(names_error) << backend.status();
    return;
  }
  EXPECT_EQ((*backend)->name(), "cuda");
  // No context is created before a worker or region needs one.
  EXPECT_TRUE((*backend)->GpuMemoryBytes().empty());
}

TEST(CudaCopyBackendTest, RejectsBadOptionsBeforeLookingForGpus) {
  CudaBackendOptions options;
  options.copy_sms = 0;
  EXPECT_EQ(CreateCudaCopyBackend(options).status().code(), absl::StatusCode::kInvalidArgument);
  options = CudaBackendOptions();
  options.staging_chunk_bytes = 1000;
  EXPECT_EQ(CreateCudaCopyBackend(options).status().code(), absl::StatusCode::kInvalidArgument);
  // A forced SM path contradicts "never".
  options = CudaBackendOptions();
  options.sm_copies = SmCopies::kNever;
  options.forced_path = ForcedPath::kStaged;
  EXPECT_EQ(CreateCudaCopyBackend(options).status().code(), absl::StatusCode::kInvalidArgument);
  options.forced_path = ForcedPath::kKernel;
  EXPECT_EQ(CreateCudaCopyBackend(options).status().code(), absl::StatusCode::kInvalidArgument);
  options.forced_path = ForcedPath::kCopyEngine;
  EXPECT_NE(CreateCudaCopyBackend(options).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(CudaCopyBackendTest, RejectsBatchSizesOutsideTheBatchBound) {
  CudaBackendOptions options;
  options.max_batch_copies = 0;
  absl::Status s = CreateCudaCopyBackend(options).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("max_batch_copies must be 1..4096, not 0"), absl::string_view::npos)
      << s;
  options.max_batch_copies = 4097;
  EXPECT_EQ(CreateCudaCopyBackend(options).status().code(), absl::StatusCode::kInvalidArgument);
  options.max_batch_copies = 64;
  options.first_batch_copies = 65;
  s = CreateCudaCopyBackend(options).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("first_batch_copies (65) must be at most max_batch_copies (64)"),
            absl::string_view::npos)
      << s;
  // The old behaviour (one call up to the max) and the smallest schedule are valid.
  options.first_batch_copies = 0;
  EXPECT_NE(CreateCudaCopyBackend(options).status().code(), absl::StatusCode::kInvalidArgument);
  options.first_batch_copies = 1;
  options.max_batch_copies = 1;
  EXPECT_NE(CreateCudaCopyBackend(options).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(CudaCopyBackendTest, RejectsIssueThreadsOutsideTheirBound) {
  CudaBackendOptions options;
  options.issue_threads = 0;
  absl::Status s = CreateCudaCopyBackend(options).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("issue_threads must be 1..16, not 0 (--cuda_issue_threads)"),
            absl::string_view::npos)
      << s;
  options.issue_threads = 17;
  EXPECT_EQ(CreateCudaCopyBackend(options).status().code(), absl::StatusCode::kInvalidArgument);
  options.issue_threads = 4;
  options.parallel_issue_min_copies = 0;
  s = CreateCudaCopyBackend(options).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("parallel_issue_min_copies must be at least 1"),
            absl::string_view::npos)
      << s;
  // One thread (no split) and the most threads are valid.
  options.parallel_issue_min_copies = 1;
  options.issue_threads = 1;
  EXPECT_NE(CreateCudaCopyBackend(options).status().code(), absl::StatusCode::kInvalidArgument);
  options.issue_threads = 16;
  EXPECT_NE(CreateCudaCopyBackend(options).status().code(), absl::StatusCode::kInvalidArgument);
}

class CudaCopyBackendGpuTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<std::unique_ptr<CudaCopyBackend>> backend = CudaCopyBackend::Create({});
    if (!backend.ok()) GTEST_SKIP() << "no GPU: " << backend.status();
    backend_ = std::move(*backend);
  }
  std::unique_ptr<CudaCopyBackend> backend_;
};

TEST_F(CudaCopyBackendGpuTest, OpenWorkerRejectsMalformedRegistrations) {
  WorkerRegistration r;
  r.device = 0;
  TensorRegistration t;
  t.allocation_handle = "short";
  t.allocation_bytes = 1 << 20;
  t.num_blocks = 4;
  t.block_stride_bytes = 4096;
  t.page_bytes = 4096;
  r.tensors.push_back(t);
  EXPECT_EQ(backend_->OpenWorker(r).status().code(), absl::StatusCode::kInvalidArgument);

  r.tensors[0].allocation_handle = std::string(sizeof(cudaIpcMemHandle_t), '\0');
  r.tensors[0].allocation_bytes = 8192;  // 4 blocks of 4 KiB do not fit
  EXPECT_EQ(backend_->OpenWorker(r).status().code(), absl::StatusCode::kInvalidArgument);

  r.tensors[0].allocation_bytes = 1 << 20;  // fits, but the handle is garbage
  absl::Status opened = backend_->OpenWorker(r).status();
  EXPECT_EQ(opened.code(), absl::StatusCode::kInvalidArgument) << opened;
  EXPECT_NE(opened.message().find("cudaIpcOpenMemHandle"), absl::string_view::npos) << opened;

  r.device_uuid = std::string(16, '\x7f');
  EXPECT_EQ(backend_->OpenWorker(r).status().code(), absl::StatusCode::kInvalidArgument);
}

// A region alone creates no CUDA context, so no GPU memory is reported for it (it is pinned when
// the first worker opens: cuda_copy_backend_gpu_test's RegionsArePinnedInTheContextOf...).
TEST_F(CudaCopyBackendGpuTest, RegistersRegionWithoutCreatingAContext) {
  const size_t bytes = size_t{8} << 20;
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(p, MAP_FAILED);
  ASSERT_TRUE(backend_->RegisterRegion(static_cast<uint8_t*>(p), bytes, 12288).ok());
  EXPECT_EQ(backend_->RegisterRegion(static_cast<uint8_t*>(p), bytes, 12288).code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(backend_->GpuMemoryBytes().empty());
  backend_->UnregisterRegion(static_cast<uint8_t*>(p));
  munmap(p, bytes);
}

TEST_F(CudaCopyBackendGpuTest, SubmitWithForeignMemoryFailsThroughDone) {
  CopyJob job;
  absl::Notification finished;
  absl::Status status;
  backend_->Submit(std::move(job), [&](absl::Status s, uint64_t bytes) {
    status = s;
    EXPECT_EQ(bytes, 0u);
    finished.Notify();
  });
  ASSERT_TRUE(finished.WaitForNotificationWithTimeout(absl::Seconds(10)));
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace kvoffload::daemon::cuda
