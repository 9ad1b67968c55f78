#include "daemon/copy/cuda/driver_api.h"

#include <cuda.h>
#include <cuda_runtime_api.h>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "common/cuda/cuda_status.h"

namespace kvoffload::daemon::cuda {
namespace {

using MemGetAddressRangeFn = CUresult (*)(CUdeviceptr*, size_t*, CUdeviceptr);
using DeviceGetFn = CUresult (*)(CUdevice*, int);
using CtxCreateFn = CUresult (*)(CUcontext*, unsigned int, CUdevice);  // cuCtxCreate_v2
using CtxDestroyFn = CUresult (*)(CUcontext);
using MemGetInfoFn = CUresult (*)(size_t*, size_t*);

template <typename Fn>
absl::StatusOr<Fn> Lookup(const char* symbol, unsigned int version) {
  void* fn = nullptr;
  cudaDriverEntryPointQueryResult found = cudaDriverEntryPointSymbolNotFound;
  RETURN_IF_ERROR(CudaStatus(
      cudaGetDriverEntryPointByVersion(symbol, &fn, version, cudaEnableDefault, &found),
      absl::StrCat("cudaGetDriverEntryPointByVersion(", symbol, ")")));
  if (found != cudaDriverEntryPointSuccess || fn == nullptr) {
    return absl::UnavailableError(
        absl::StrCat("driver entry point ", symbol, " (version ", version, ") not found"));
  }
  return reinterpret_cast<Fn>(fn);
}

}  // namespace

absl::StatusOr<AddressRange> GetAddressRange(uint64_t device_ptr) {
  ASSIGN_OR_RETURN(auto fn, Lookup<MemGetAddressRangeFn>("cuMemGetAddressRange", 3020));
  CUdeviceptr base = 0;
  size_t bytes = 0;
  RETURN_IF_ERROR(CuResultStatus(fn(&base, &bytes, static_cast<CUdeviceptr>(device_ptr)),
                                 "cuMemGetAddressRange"));
  return AddressRange{static_cast<uint64_t>(base), static_cast<uint64_t>(bytes)};
}

absl::StatusOr<uint64_t> MeasureContextBytes(int device) {
  ASSIGN_OR_RETURN(auto device_get, Lookup<DeviceGetFn>("cuDeviceGet", 2000));
  ASSIGN_OR_RETURN(auto ctx_create, Lookup<CtxCreateFn>("cuCtxCreate", 3020));
  ASSIGN_OR_RETURN(auto ctx_destroy, Lookup<CtxDestroyFn>("cuCtxDestroy", 4000));
  ASSIGN_OR_RETURN(auto mem_get_info, Lookup<MemGetInfoFn>("cuMemGetInfo", 3020));
  CUdevice dev = 0;
  RETURN_IF_ERROR(CuResultStatus(device_get(&dev, device), "cuDeviceGet"));
  size_t free_before = 0;
  size_t total = 0;
  RETURN_IF_ERROR(CuResultStatus(mem_get_info(&free_before, &total), "cuMemGetInfo"));
  CUcontext temporary = nullptr;
  RETURN_IF_ERROR(CuResultStatus(ctx_create(&temporary, 0, dev), "cuCtxCreate"));
  size_t free_during = 0;
  const CUresult info = mem_get_info(&free_during, &total);
  // Destroying the current context pops it: the primary context is current again.
  const CUresult destroyed = ctx_destroy(temporary);
  RETURN_IF_ERROR(CuResultStatus(info, "cuMemGetInfo"));
  RETURN_IF_ERROR(CuResultStatus(destroyed, "cuCtxDestroy"));
  RETURN_IF_ERROR(CudaStatus(cudaSetDevice(device), "cudaSetDevice"));
  return free_before > free_during ? static_cast<uint64_t>(free_before - free_during) : 0;
}

}  // namespace kvoffload::daemon::cuda
