// The few CUDA driver functions the backend needs, reached through
// cudaGetDriverEntryPointByVersion (never by linking libcuda: the same binary must start on a
// machine without a driver). Thread-safe.
#ifndef KVOFFLOAD_DAEMON_COPY_CUDA_DRIVER_API_H_
#define KVOFFLOAD_DAEMON_COPY_CUDA_DRIVER_API_H_

#include <cstdint>

#include <cuda_runtime_api.h>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace kvoffload::daemon::cuda {

struct AddressRange {
  uint64_t base = 0;
  uint64_t bytes = 0;
};

// cuMemGetAddressRange: the allocation that contains `device_ptr` (needs a current context).
absl::StatusOr<AddressRange> GetAddressRange(uint64_t device_ptr);

// Device memory one CUDA context costs on `device`: the drop of cuMemGetInfo's free bytes while a
// second, temporary context exists (the primary context must already be current on this thread;
// it is current again on return). An estimate: other processes allocating meanwhile skew it.
absl::StatusOr<uint64_t> MeasureContextBytes(int device);

}  // namespace kvoffload::daemon::cuda

#endif  // KVOFFLOAD_DAEMON_COPY_CUDA_DRIVER_API_H_
