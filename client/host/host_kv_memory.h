// HostKvMemory: a worker's KV tensors in memfds, for the daemon's host backend (demo, tests, nodes
// without a GPU). It plays the GPU: at registration the daemon opens each memfd from this process
// (handle "memfd:<fd>", taken from the pid the kernel names for the connection), as the CUDA
// backend opens IPC handles. Each memfd is sealed against shrinking (F_SEAL_SHRINK): the daemon
// refuses memory that could be truncated under its copies.
//
//   HostKvMemory kv;
//   kv.Create("separate_kv", /*layers=*/4, /*layer_page=*/8192, /*blocks=*/64);
//   kv.Fill(seed);
//   options.tensors = kv.Handles();
//   ... WorkerClient::Connect(options) ...
//
// Not thread-safe. Owns its memfds and mappings (closed and unmapped on destruction); nothing is
// ever left in /dev/shm.
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
  uint64_t blocks() const override { return blocks_; }
  absl::Status Describe(WorkerOptions* options) override {
    options->tensors = Handles();
    return absl::OkStatus();
  }

 private:
  struct Allocation {
    int fd = -1;
    std::string name;  // "memfd:<fd>"
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
