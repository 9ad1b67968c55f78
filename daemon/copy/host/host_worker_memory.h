// HostWorkerMemory: a worker's "device memory" as the host backend sees it (host_copy_backend.h):
// the memfds the worker registered, each mapped once, and the tensor table that points into
// them. OpenHostWorker opens it from a registration.
//
//   ASSIGN_OR_RETURN(std::unique_ptr<HostWorkerMemory> memory, OpenHostWorker(registration));
//   for (const TensorDescriptor& t : memory->tensors()) { ... t.gpu_base ... }
//
// Every check on the numbers comes before anything is opened; a bad number is INVALID_ARGUMENT
// naming the tensor. A handle is "memfd:<fd>", descriptor <fd> of the registering process
// (registration.caller_pid, reopened through /proc/<pid>/fd), a regular file owned by
// registration.caller_uid (else PERMISSION_DENIED) and sealed with F_SEAL_SHRINK (else
// FAILED_PRECONDITION), so it can never be truncated under a copy; RESOURCE_EXHAUSTED when
// descriptors or address space run out. Named shm objects are refused: the daemon would open
// them with its own credentials.
//
// Thread-safety: immutable once opened; read concurrently by copy threads. Ownership: owns its
// mappings and unmaps them on destruction.
#ifndef KVOFFLOAD_DAEMON_COPY_HOST_HOST_WORKER_MEMORY_H_
#define KVOFFLOAD_DAEMON_COPY_HOST_HOST_WORKER_MEMORY_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "daemon/copy/copy_backend.h"
#include "daemon/copy/descriptor_table.h"

namespace kvoffload::daemon {

class HostWorkerMemory final : public WorkerMemory {
 public:
  class Mappings;  // the mapped memfds (host_worker_memory.cc)

  HostWorkerMemory(std::unique_ptr<Mappings> mappings, std::vector<TensorDescriptor> tensors,
                   uint64_t num_blocks, uint64_t bytes_per_block, size_t num_events);
  ~HostWorkerMemory() override;

  uint64_t num_blocks() const override { return num_blocks_; }
  uint64_t bytes_per_block() const override { return bytes_per_block_; }
  size_t num_events() const override { return num_events_; }
  const std::vector<TensorDescriptor>& tensors() const { return tensors_; }

 private:
  std::unique_ptr<Mappings> mappings_;
  std::vector<TensorDescriptor> tensors_;
  uint64_t num_blocks_;
  uint64_t bytes_per_block_;
  size_t num_events_;
};

// Opens a worker's memory from its registration (event handles are counted, not opened: the host
// backend has no streams to order).
absl::StatusOr<std::unique_ptr<HostWorkerMemory>> OpenHostWorker(
    const WorkerRegistration& registration);

}  // namespace kvoffload::daemon

#endif  // KVOFFLOAD_DAEMON_COPY_HOST_HOST_WORKER_MEMORY_H_
