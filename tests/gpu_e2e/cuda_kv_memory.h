// CudaKvMemory: a scripted worker's KV tensors in cudaMalloc memory (KvLayout placement, so
// tensors sit at non-zero offsets of their allocations), registered through the client's CUDA
// helpers: IPC handles of allocation bases, device UUID, an interprocess event pool.
// Not thread-safe except where noted.
#ifndef KVOFFLOAD_TESTS_GPU_E2E_CUDA_KV_MEMORY_H_
#define KVOFFLOAD_TESTS_GPU_E2E_CUDA_KV_MEMORY_H_

#include <cuda_runtime_api.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "client/cuda/cuda_client.h"
#include "client/scripted/kv_layout.h"
#include "client/scripted/scripted_worker.h"

namespace kvoffload::testing {

class CudaKvMemory final : public client::KvBlocks {
 public:
  static absl::StatusOr<std::unique_ptr<CudaKvMemory>> Create(const std::string& layout,
                                                              uint32_t layers, uint64_t layer_page,
                                                              uint64_t blocks);
  ~CudaKvMemory() override;

  uint64_t blocks() const override { return layout_.blocks; }
  // Random bytes: a 64 MiB random pattern repeated over each allocation (fast for GiB-sized
  // benchmark workers, still different in every block of a test).
  void Fill(uint64_t seed) override;
  std::string BlockBytes(uint64_t block) const override;
  void Clobber(uint64_t block) override;
  bool Verify(uint64_t block) const override;
  absl::Status Describe(client::WorkerOptions* options) override;
  bool HandleCommand(const std::vector<std::string>& words, client::WorkerClient& worker,
                     std::ostream& out) override;

 private:
  CudaKvMemory() = default;
  std::string ExpectedBlock(uint64_t block) const;
  void WriteBlock(uint64_t block, const std::string& bytes, cudaStream_t stream);

  // Commands (see cuda_worker_main.cc).
  void WriteThenStore(const std::vector<std::string>& w, client::WorkerClient& worker,
                      std::ostream& out);
  void Bench(const std::vector<std::string>& w, client::WorkerClient& worker, std::ostream& out);
  void Latency(const std::vector<std::string>& w, client::WorkerClient& worker, std::ostream& out);
  void Interference(const std::vector<std::string>& w, client::WorkerClient& worker,
                    std::ostream& out);
  // Worker-death tests: the GPU states a worker can be SIGKILLed in.
  void SubmitGated(const std::vector<std::string>& w, client::WorkerClient& worker,
                   std::ostream& out);
  void RecordBehind(const std::vector<std::string>& w, std::ostream& out);
  void Busy(const std::vector<std::string>& w, std::ostream& out);

  client::KvLayout layout_;
  std::vector<uint8_t*> allocations_;
  std::vector<std::string> patterns_;   // per allocation: the repeated random pattern
  std::vector<std::string> overrides_;  // per block: bytes written after Fill (empty: pattern)
  int device_ = 0;
  cudaStream_t stream_ = nullptr;
  std::unique_ptr<client::cuda::EventPool> events_;
};

}  // namespace kvoffload::testing

#endif  // KVOFFLOAD_TESTS_GPU_E2E_CUDA_KV_MEMORY_H_
