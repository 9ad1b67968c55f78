// A scripted worker: registers a worker's KV memory with kvoffloadd, then obeys one command per
// line on stdin and answers one line per command on stdout. The demo, the integration tests and
// the GPU tests drive workers this way, in separate processes; the KV memory is the only part
// that differs (sealed memfds for the host backend, cudaMalloc for the CUDA backend).
//
//   (store and load take an optional REGION_EPOCH after EVENT; the hello line ends " epoch=N")
//   store JOB BLOCKS ROWS [EVENT]   submit a store part and wait   → "finished JOB CODE BYTES
//   [msg]" load JOB BLOCKS ROWS [EVENT]    submit a load part and wait    → "finished JOB CODE
//   BYTES [msg]" submit store|load JOB BLOCKS ROWS [EVENT]  without waiting     → "submitted JOB"
//   wait JOB TIMEOUT_MS             wait for a submitted job       → "finished ..." | "error CODE
//   msg" clobber BLOCKS                  overwrite blocks with poison   → "ok" verify BLOCKS
//   compare with the bytes filled  → "verify ok" | "verify mismatch block=B" digest BLOCKS FNV-1a
//   of the blocks' bytes    → "digest HEX" refill SEED                     new random content →
//   "ok" quit                                                           → exits 0
// BLOCKS and ROWS are comma lists ("3,4,9", "-" for none); CODE is the absl status code.
// Backends may add commands (KvBlocks::HandleCommand).
//
// Flags (engine spec, rank, memory shape): see scripted_worker.cc.
#ifndef KVOFFLOAD_CLIENT_SCRIPTED_SCRIPTED_WORKER_H_
#define KVOFFLOAD_CLIENT_SCRIPTED_SCRIPTED_WORKER_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "client/kvoffload_client.h"

namespace kvoffload::client {

// A worker's KV memory as the scripted worker sees it. Not thread-safe.
class KvBlocks {
 public:
  virtual ~KvBlocks() = default;
  virtual uint64_t blocks() const = 0;
  // Random content from `seed` (never zeros), remembered as the expected bytes.
  virtual void Fill(uint64_t seed) = 0;
  virtual std::string BlockBytes(uint64_t block) const = 0;
  virtual void Clobber(uint64_t block) = 0;
  virtual bool Verify(uint64_t block) const = 0;
  // Fills the registration part of `options`: tensors, device, event handles.
  virtual absl::Status Describe(WorkerOptions* options) = 0;
  // Called once the daemon has opened the memory (e.g. unlink shm names).
  virtual void Registered() {}
  // Extra commands; return false for an unknown command.
  virtual bool HandleCommand(const std::vector<std::string>& words, WorkerClient& worker,
                             std::ostream& out) {
    return false;
  }
};

// Creates the KV memory for a layout ("separate_kv", "stacked_kv", "block_first"), `layers`
// layers of `layer_page` bytes (K and V) per block, `blocks` blocks.
using KvBlocksFactory = std::function<absl::StatusOr<std::unique_ptr<KvBlocks>>(
    const std::string& layout, uint32_t layers, uint64_t layer_page, uint64_t blocks)>;

// main() of a scripted worker: parses flags, creates, fills and registers the memory, runs the
// command loop. Returns the process exit code (1 when registration is refused, after printing
// "refused CODE message").
int ScriptedWorkerMain(int argc, char** argv, const KvBlocksFactory& factory);

}  // namespace kvoffload::client

#endif  // KVOFFLOAD_CLIENT_SCRIPTED_SCRIPTED_WORKER_H_
