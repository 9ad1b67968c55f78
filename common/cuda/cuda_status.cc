#include "common/cuda/cuda_status.h"

#include <cuda.h>

#include "absl/strings/str_cat.h"

namespace kvoffload {

absl::StatusCode CudaErrorCode(cudaError_t err) {
  switch (err) {
    case cudaSuccess:
      return absl::StatusCode::kOk;
    case cudaErrorNoDevice:
    case cudaErrorInsufficientDriver:
    case cudaErrorDevicesUnavailable:
    case cudaErrorSystemDriverMismatch:
    case cudaErrorCompatNotSupportedOnDevice:
    case cudaErrorSystemNotReady:
    case cudaErrorCudartUnloading:
      return absl::StatusCode::kUnavailable;
    case cudaErrorMemoryAllocation:
      return absl::StatusCode::kResourceExhausted;
    case cudaErrorInvalidValue:
    case cudaErrorInvalidDevice:
    case cudaErrorInvalidDevicePointer:
    case cudaErrorInvalidResourceHandle:
    case cudaErrorInvalidPitchValue:
    case cudaErrorInvalidHostPointer:
      return absl::StatusCode::kInvalidArgument;
    case cudaErrorHostMemoryAlreadyRegistered:
    case cudaErrorHostMemoryNotRegistered:
    case cudaErrorNotSupported:
    case cudaErrorNotPermitted:
    case cudaErrorOperatingSystem:
      return absl::StatusCode::kFailedPrecondition;
    default:
      return absl::StatusCode::kInternal;
  }
}

absl::Status CudaStatus(cudaError_t err, absl::string_view context) {
  return CudaStatus(err, CudaErrorCode(err), context);
}

absl::Status CudaStatus(cudaError_t err, absl::StatusCode code, absl::string_view context) {
  if (err == cudaSuccess) return absl::OkStatus();
  const char* name = cudaGetErrorName(err);
  const char* text = cudaGetErrorString(err);
  return absl::Status(code, absl::StrCat(context, ": ", name != nullptr ? name : "cudaError?",
                                         " (", text != nullptr ? text : "", ")"));
}

absl::Status CuResultStatus(int result, absl::string_view context) {
  if (result == CUDA_SUCCESS) return absl::OkStatus();
  // cuGetErrorName through the runtime's entry point lookup: no link against libcuda.
  using GetErrorName = CUresult (*)(CUresult, const char**);
  void* fn = nullptr;
  cudaDriverEntryPointQueryResult found = cudaDriverEntryPointSymbolNotFound;
  const char* name = nullptr;
  if (cudaGetDriverEntryPointByVersion("cuGetErrorName", &fn, 6000, cudaEnableDefault, &found) ==
          cudaSuccess &&
      found == cudaDriverEntryPointSuccess && fn != nullptr) {
    reinterpret_cast<GetErrorName>(fn)(static_cast<CUresult>(result), &name);
  }
  absl::StatusCode code = absl::StatusCode::kInternal;
  switch (result) {
    case CUDA_ERROR_OUT_OF_MEMORY:
      code = absl::StatusCode::kResourceExhausted;
      break;
    case CUDA_ERROR_INVALID_VALUE:
    case CUDA_ERROR_INVALID_HANDLE:
    case CUDA_ERROR_NOT_FOUND:
      code = absl::StatusCode::kInvalidArgument;
      break;
    case CUDA_ERROR_NO_DEVICE:
    case CUDA_ERROR_NOT_INITIALIZED:
      code = absl::StatusCode::kUnavailable;
      break;
    default:
      break;
  }
  return absl::Status(code, absl::StrCat(context, ": ",
                                         name != nullptr ? name : absl::StrCat("CUresult ", result)));
}

}  // namespace kvoffload
