// KvLayout: where a scripted worker places its KV tensors inside its allocations, the same way
// for shm (host backend) and cudaMalloc (CUDA backend) memory.
//
//   separate_kv  a K and a V tensor per layer; strides padded by 256 bytes; K tensors in
//                allocation 0, V tensors in allocation 1, 4 KiB apart (offsets never 0, as with
//                PyTorch's caching allocator)
//   stacked_kv   one tensor per layer, K then V per block (page = layer_page)
//   block_first  one cross-layer tensor: every layer of a block together
#ifndef KVOFFLOAD_CLIENT_SCRIPTED_KV_LAYOUT_H_
#define KVOFFLOAD_CLIENT_SCRIPTED_KV_LAYOUT_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace kvoffload::client {

struct KvLayout {
  struct Tensor {
    int allocation = 0;
    uint64_t offset = 0;
    uint64_t stride = 0;
    uint64_t page = 0;
  };
  std::vector<uint64_t> allocation_bytes;
  std::vector<Tensor> tensors;
  uint64_t blocks = 0;
};

// INVALID_ARGUMENT for an unknown layout, zero sizes or an odd layer_page.
absl::StatusOr<KvLayout> PlanKvLayout(const std::string& layout, uint32_t layers,
                                      uint64_t layer_page, uint64_t blocks);

}  // namespace kvoffload::client

#endif  // KVOFFLOAD_CLIENT_SCRIPTED_KV_LAYOUT_H_
