// Converts CUDA runtime and driver errors into absl::Status once, at the edge, keeping their
// identity: the message carries cudaGetErrorName (e.g. "cudaErrorInvalidValue"), so logs and
// callers can tell a missing driver from a bad handle. The one mapping of the worker-side client
// (client/cuda) and the daemon's CUDA backend, so a CUDA error has the same code on both sides;
// the only CUDA code under common/, in namespace kvoffload so that both find it unqualified.
// Thread-safe (pure functions).
//
//   RETURN_IF_ERROR(CudaStatus(cudaSetDevice(device), "cudaSetDevice"));
//   absl::Status s = CudaStatus(err, absl::StatusCode::kInvalidArgument, "cudaIpcOpenMemHandle");
#ifndef KVOFFLOAD_COMMON_CUDA_CUDA_STATUS_H_
#define KVOFFLOAD_COMMON_CUDA_CUDA_STATUS_H_

#include <cuda_runtime_api.h>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace kvoffload {

// The status code a CUDA error maps to when the caller has no better knowledge:
//   no device / no or too old driver      → UNAVAILABLE
//   out of device or pinned host memory   → RESOURCE_EXHAUSTED
//   invalid value/handle/device/pointer   → INVALID_ARGUMENT
//   already registered / not supported    → FAILED_PRECONDITION
//   anything else (launch failures, ...)  → INTERNAL
absl::StatusCode CudaErrorCode(cudaError_t err);

// OK for cudaSuccess; otherwise "<context>: <cudaGetErrorName> (<cudaGetErrorString>)" with the
// code from CudaErrorCode.
absl::Status CudaStatus(cudaError_t err, absl::string_view context);

// As above with an explicit code (e.g. INVALID_ARGUMENT for a worker-supplied handle that does
// not open, whatever the CUDA error).
absl::Status CudaStatus(cudaError_t err, absl::StatusCode code, absl::string_view context);

// Driver API results (CUresult as int, from functions reached through
// cudaGetDriverEntryPointByVersion). The name comes from cuGetErrorName when the driver is there.
absl::Status CuResultStatus(int result, absl::string_view context);

}  // namespace kvoffload

#endif  // KVOFFLOAD_COMMON_CUDA_CUDA_STATUS_H_
