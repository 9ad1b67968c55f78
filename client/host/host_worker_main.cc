// kvoffload_host_worker: a scripted worker (client/scripted/scripted_worker.h) whose "GPU
// memory" is POSIX shared memory, for the host backend: the demo, integration tests, and smoke
// tests of a node without a GPU.
#include <memory>

#include "client/host/host_kv_memory.h"
#include "client/scripted/scripted_worker.h"

int main(int argc, char** argv) {
  return kvoffload::client::ScriptedWorkerMain(
      argc, argv,
      [](const std::string& layout, uint32_t layers, uint64_t layer_page,
         uint64_t blocks) -> absl::StatusOr<std::unique_ptr<kvoffload::client::KvBlocks>> {
        auto memory = std::make_unique<kvoffload::client::HostKvMemory>();
        absl::Status s = memory->Create(layout, layers, layer_page, blocks);
        if (!s.ok()) return s;
        return memory;
      });
}
