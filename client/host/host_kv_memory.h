// HostKvMemory: a worker's KV tensors in POSIX shared memory, for the daemon's host backend
// (demo, tests, nodes without a GPU). It plays the GPU: the daemon maps the shm objects by name
// at registration, exactly as the CUDA backend opens IPC handles.
//
//   HostKvMemory kv;
//   kv.Create("separate_kv", /*layers=*/4, /*layer_page=*/8192, /*blocks=*/64);
//   kv.Fill(seed);
//   options.tensors = kv.Handles();
//   ... WorkerClient::Connect(options) ...
//   kv.UnlinkNames();   // the daemon holds its mappings; nothing is left in /dev/shm
//
// Not thread-safe. Owns its mappings (unmapped on destruction).
#ifndef KVOFFLOAD_CLIENT_HOST_HOST_KV_MEMORY_H_
#define KVOFFLOAD_CLIENT_HOST_HOST_KV_MEMORY_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "client/kvoffload_client.h"
#include "client/scripted/kv_layout.h"
#include "client/scripted/scripted_worker.h"

namespace kvoffload::client {

class HostKvMemory final : public KvBlocks {
 public:
  HostKvMemory() = default;
  ~HostKvMemory() override;
  HostKvMemory(const HostKvMemory&) = delete;
  HostKvMemory& operator=(const HostKvMemory&) = delete;

  // Layouts as in client/scripted/kv_layout.h; `layer_page` is one layer's bytes per block.
  absl::Status Create(const std::string& layout, uint32_t layers, uint64_t layer_page,
                      uint64_t blocks);
  // Random content from `seed` (never zeros), remembered as the expected bytes.
  void Fill(uint64_t seed) override;
  // The bytes of one block, tensors concatenated in registration order.
  std::string BlockBytes(uint64_t block) const override;
  void Clobber(uint64_t block) override;       // poison pattern 0xA5
  bool Verify(uint64_t block) const override;  // equal to what Fill wrote
  std::vector<TensorHandle> Handles() const;
  void UnlinkNames();
  uint64_t blocks() const override { return blocks_; }
  absl::Status Describe(WorkerOptions* options) override {
    options->tensors = Handles();
    return absl::OkStatus();
  }
  // The daemon holds its mappings now; nothing is left in /dev/shm even if we are killed.
  void Registered() override { UnlinkNames(); }

 private:
  struct Allocation {
    std::string name;
    uint8_t* data = nullptr;
    uint64_t bytes = 0;
  };
  absl::Status Allocate(uint64_t bytes);

  uint64_t blocks_ = 0;
  std::vector<Allocation> allocations_;
  std::vector<KvLayout::Tensor> tensors_;
  std::vector<std::string> golden_;
};

}  // namespace kvoffload::client

#endif  // KVOFFLOAD_CLIENT_HOST_HOST_KV_MEMORY_H_
