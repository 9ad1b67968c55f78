// TensorHandle: one KV tensor of a worker as it is registered with the daemon — the same record
// in the client (WorkerOptions.tensors) and in the daemon (TensorRegistration), so the two sides
// of the wire cannot drift apart. Bytes of GPU block b:
//   page_bytes at (base of allocation `allocation_handle` + offset + b × block_stride_bytes).
//
// Thread-safety: a plain value.
#ifndef KVOFFLOAD_COMMON_TENSOR_HANDLE_H_
#define KVOFFLOAD_COMMON_TENSOR_HANDLE_H_

#include <cstdint>
#include <string>

namespace kvoffload::common {

struct TensorHandle {
  // CUDA: the cudaIpcMemHandle_t bytes of the allocation; host backend: "memfd:<fd>" of a
  // sealed memfd (client/host/host_kv_memory.h).
  std::string allocation_handle;
  uint64_t allocation_bytes = 0;
  uint64_t offset = 0;
  uint64_t num_blocks = 0;
  uint64_t block_stride_bytes = 0;
  uint64_t page_bytes = 0;
};

}  // namespace kvoffload::common

#endif  // KVOFFLOAD_COMMON_TENSOR_HANDLE_H_
