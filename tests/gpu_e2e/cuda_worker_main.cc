// kvoffload_cuda_worker: a scripted worker (client/scripted/scripted_worker.h) whose KV tensors
// are cudaMalloc memory registered through CUDA IPC, for the GPU end-to-end tests and the
// benchmark. Extra commands (cuda_kv_memory.cc):
//   write_then_store JOB BLOCK ROW SEED   store ordering: the store waits on the worker's event
//   bench store|load JOB_BASE FIRST_ROW N REPS   → "bench DIR median_us=.. bytes=.. gbps=.."
//   latency N ROWS                        → "latency p50_us=.. p99_us=.. n=.."
//   interference ITERATIONS N ROWS        → "interference alone_ms=.. loaded_ms=.. slowdown_pct=.."
// For the worker-death tests (the worker is SIGKILLed right after):
//   submit_gated store|load JOB BLOCKS ROWS SLOT DELAY_MS [PROBE_JOB PROBE_BLOCKS PROBE_ROWS]
//       event SLOT recorded behind DELAY_MS of GPU work, the job submitted naming it, not waited
//       for; the probe (a store, no event) is waited for → "submitted JOB [probe=finished ...]"
//   record_behind SLOT DELAY_MS           event recorded behind GPU work, nothing submitted
//                                         → "recorded SLOT"
//   busy MS                               MS ms of every-SM spin kernels queued → "busy MS"
#include <memory>

#include "client/scripted/scripted_worker.h"
#include "tests/gpu_e2e/cuda_kv_memory.h"

int main(int argc, char** argv) {
  return kvoffload::client::ScriptedWorkerMain(
      argc, argv,
      [](const std::string& layout, uint32_t layers, uint64_t layer_page,
         uint64_t blocks) -> absl::StatusOr<std::unique_ptr<kvoffload::client::KvBlocks>> {
        auto memory = kvoffload::testing::CudaKvMemory::Create(layout, layers, layer_page, blocks);
        if (!memory.ok()) return memory.status();
        return std::unique_ptr<kvoffload::client::KvBlocks>(std::move(*memory));
      });
}
