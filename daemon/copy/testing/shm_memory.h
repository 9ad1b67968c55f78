// ShmWorkerMemory: a test worker's "device memory" for the host copy backend: one sealed memfd
// (F_SEAL_SHRINK, as the host backend requires) of this process, holding `num_tensors` KV tensors of `num_blocks` blocks, each block one page of
// `page_bytes` (tensor-major, stride = page_bytes), filled with random bytes that contain no zero
// byte, so a copy that moved nothing or the wrong block never compares equal by accident.
//
//   ASSIGN_OR_RETURN(auto memory, ShmWorkerMemory::Create(/*tensors=*/2, /*blocks=*/8, 4096, seed));
//   engine->Attach(mp_rank, memory->Registration(), &listener);
//   EXPECT_EQ(memory->Block(3), expected);   // the worker's bytes of GPU block 3
//
// Not thread-safe for writes; reading the bytes while a copy writes them is the test's business.
// Owns the memfd: the destructor unmaps and closes it (a backend that opened it keeps its own
// mapping). Registration() names it "memfd:<fd>" of this process (caller_pid = getpid()).
#ifndef KVOFFLOAD_DAEMON_COPY_TESTING_SHM_MEMORY_H_
#define KVOFFLOAD_DAEMON_COPY_TESTING_SHM_MEMORY_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "daemon/copy/copy_backend.h"

namespace kvoffload::daemon {

class ShmWorkerMemory {
 public:
  static absl::StatusOr<std::unique_ptr<ShmWorkerMemory>> Create(uint32_t num_tensors,
                                                                  uint64_t num_blocks,
                                                                  uint64_t page_bytes,
                                                                  uint64_t seed);
  ~ShmWorkerMemory();
  ShmWorkerMemory(const ShmWorkerMemory&) = delete;
  ShmWorkerMemory& operator=(const ShmWorkerMemory&) = delete;

  // The registration a worker would send: one tensor per page, in order.
  WorkerRegistration Registration() const;
  // The worker's bytes of GPU block `block`: its pages of every tensor, concatenated.
  std::string Block(uint64_t block) const;
  // Overwrites block `block` of every tensor with fresh random bytes (no zero byte).
  void Scramble(uint64_t block, uint64_t seed);

  const std::string& name() const { return name_; }
  uint64_t bytes_per_block() const { return num_tensors_ * page_bytes_; }
  uint64_t num_blocks() const { return num_blocks_; }

 private:
  ShmWorkerMemory(int fd, uint8_t* data, uint32_t num_tensors, uint64_t num_blocks,
                  uint64_t page_bytes);
  uint8_t* Page(uint32_t tensor, uint64_t block) const {
    return data_ + (tensor * num_blocks_ + block) * page_bytes_;
  }

  const int fd_;
  const std::string name_;
  uint8_t* const data_;
  const uint32_t num_tensors_;
  const uint64_t num_blocks_;
  const uint64_t page_bytes_;
};

}  // namespace kvoffload::daemon

#endif  // KVOFFLOAD_DAEMON_COPY_TESTING_SHM_MEMORY_H_
