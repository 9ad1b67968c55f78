#include "client/scripted/kv_layout.h"

#include "absl/strings/str_cat.h"

namespace kvoffload::client {

absl::StatusOr<KvLayout> PlanKvLayout(const std::string& layout, uint32_t layers,
                                      uint64_t layer_page, uint64_t blocks) {
  if (layers == 0 || layer_page == 0 || blocks == 0 || layer_page % 2 != 0) {
    return absl::InvalidArgumentError("layers, blocks and an even layer_page must be > 0");
  }
  KvLayout out;
  out.blocks = blocks;
  const uint64_t half = layer_page / 2;
  if (layout == "separate_kv") {
    const uint64_t stride = half + 256;
    const uint64_t tensor_bytes = stride * blocks + 4096;
    out.allocation_bytes = {tensor_bytes * layers + 4096, tensor_bytes * layers + 4096};
    for (uint32_t l = 0; l < layers; ++l) {
      out.tensors.push_back({0, 4096 + l * tensor_bytes, stride, half});
      out.tensors.push_back({1, 4096 + l * tensor_bytes, stride, half});
    }
  } else if (layout == "stacked_kv") {
    const uint64_t tensor_bytes = layer_page * blocks;
    out.allocation_bytes = {tensor_bytes * layers + 8192};
    for (uint32_t l = 0; l < layers; ++l) {
      out.tensors.push_back({0, 8192 + l * tensor_bytes, layer_page, layer_page});
    }
  } else if (layout == "block_first") {
    const uint64_t per_block = layer_page * layers;
    out.allocation_bytes = {per_block * blocks + 512};
    out.tensors.push_back({0, 512, per_block, per_block});
  } else {
    return absl::InvalidArgumentError(absl::StrCat(
        "unknown layout '", layout, "' (want separate_kv, stacked_kv or block_first)"));
  }
  return out;
}

}  // namespace kvoffload::client
