// A stand-in for an inference-engine worker, in its own process, for the multi-process GPU tests.
// The test binary re-executes itself (fork + exec of /proc/self/exe with --kvo_gpu_worker=FD), so a
// worker starts with a fresh CUDA state whatever the parent did before (CUDA then fork breaks).
// The worker allocates one cudaMalloc buffer, places its KV tensors inside it at non-zero offsets,
// fills it with a deterministic pattern, and answers commands over a socket.
//
//   // in main(), before anything else:
//   if (int rc = kvoffload::testing::MaybeRunWorker(argc, argv); rc >= 0) return rc;
//   ...
//   ASSIGN_OR_RETURN(auto worker, WorkerProcess::Spawn());
//   ASSIGN_OR_RETURN(WorkerRegistration reg, worker->Setup(layout, /*generation=*/1, 4));
#ifndef KVOFFLOAD_TESTS_GPU_GPU_WORKER_H_
#define KVOFFLOAD_TESTS_GPU_GPU_WORKER_H_

#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "daemon/copy/copy_backend.h"

namespace kvoffload::testing {

struct TensorSpec {
  uint64_t offset = 0;  // within the worker's buffer
  uint64_t num_blocks = 0;
  uint64_t stride = 0;
  uint64_t page_bytes = 0;
};

struct WorkerLayout {
  uint64_t buffer_bytes = 0;  // multiple of 8
  std::vector<TensorSpec> tensors;
};

// In main(): runs the worker and returns its exit code when argv asks for one, else -1.
int MaybeRunWorker(int argc, char** argv);

// The parent's handle on one worker process. Not thread-safe.
class WorkerProcess {
 public:
  static absl::StatusOr<std::unique_ptr<WorkerProcess>> Spawn();
  ~WorkerProcess();  // asks the worker to exit; kills it if it does not within 10 s
  WorkerProcess(const WorkerProcess&) = delete;
  WorkerProcess& operator=(const WorkerProcess&) = delete;

  // Allocates and fills the buffer (generation), creates `num_events` interprocess events and
  // returns the registration the client library would send (device uuid, IPC handles of the
  // allocation base with offsets, event handles).
  absl::StatusOr<daemon::WorkerRegistration> Setup(const WorkerLayout& layout,
                                                   uint64_t generation, int num_events);
  // Refills the whole buffer with `generation` and waits for it.
  absl::Status Fill(uint64_t generation);
  // Queues on the worker's stream: spin `spin`, fill with `generation`, record event
  // `event_index`. Returns once queued (the GPU work runs later).
  absl::Status SpinFillRecord(absl::Duration spin, uint64_t generation, int event_index);
  // Waits for the worker's stream.
  absl::Status Sync();
  // Waits on event `event_index` (recorded by the daemon after a load) from the worker's stream,
  // then for the stream.
  absl::Status WaitEvent(int event_index);

  struct Expect {
    uint64_t dst_block = 0;
    uint64_t src_block = 0;
    uint64_t src_generation = 0;
  };
  // Compares the whole buffer with: every tensor page of each dst_block holds that tensor's page of
  // src_block in src_generation; every other byte holds `rest_generation`. Returns the number of
  // differing bytes (0 = byte-exact); `detail` gets the first difference.
  absl::StatusOr<uint64_t> CountMismatches(uint64_t rest_generation,
                                           const std::vector<Expect>& expect, std::string* detail);

  pid_t pid() const { return pid_; }

 private:
  WorkerProcess(int fd, pid_t pid) : fd_(fd), pid_(pid) {}
  absl::StatusOr<std::string> Call(const std::string& request, absl::Duration timeout);

  int fd_;
  pid_t pid_;
};

}  // namespace kvoffload::testing

#endif  // KVOFFLOAD_TESTS_GPU_GPU_WORKER_H_
