#include "common/cuda/cuda_status.h"

#include <cuda.h>

#include "gtest/gtest.h"

namespace kvoffload {
namespace {

TEST(CudaStatusTest, SuccessIsOk) {
  EXPECT_TRUE(CudaStatus(cudaSuccess, "anything").ok());
  EXPECT_TRUE(CuResultStatus(CUDA_SUCCESS, "anything").ok());
}

TEST(CudaStatusTest, MessageCarriesErrorNameAndContext) {
  absl::Status s = CudaStatus(cudaErrorInvalidValue, "cudaMemcpyAsync of the pair table");
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("cudaErrorInvalidValue"), absl::string_view::npos) << s;
  EXPECT_NE(s.message().find("cudaMemcpyAsync of the pair table"), absl::string_view::npos) << s;
}

TEST(CudaStatusTest, MapsCodes) {
  EXPECT_EQ(CudaStatus(cudaErrorInsufficientDriver, "x").code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(CudaStatus(cudaErrorNoDevice, "x").code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(CudaStatus(cudaErrorMemoryAllocation, "x").code(),
            absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(CudaStatus(cudaErrorHostMemoryAlreadyRegistered, "x").code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(CudaStatus(cudaErrorLaunchFailure, "x").code(), absl::StatusCode::kInternal);
}

TEST(CudaStatusTest, ExplicitCodeWins) {
  absl::Status s =
      CudaStatus(cudaErrorMapBufferObjectFailed, absl::StatusCode::kInvalidArgument, "open");
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("cudaErrorMapBufferObjectFailed"), absl::string_view::npos) << s;
}

TEST(CudaStatusTest, DriverResultWithoutDriverStillNamesTheCode) {
  absl::Status s = CuResultStatus(CUDA_ERROR_INVALID_VALUE, "cuMemGetAddressRange");
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("cuMemGetAddressRange"), absl::string_view::npos) << s;
}

}  // namespace
}  // namespace kvoffload
