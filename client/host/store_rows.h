// StoreRows: writes rows of an engine's region through a real store job, for tests that need
// READY rows (a commit alone makes nothing readable: SlotIndex). A host-backend worker of the
// spec's layout connects, stores GPU blocks [0, n) into `rows`, waits for the verdict and leaves.
//
//   ASSERT_OK_AND_ASSIGN(auto store, scheduler->PrepareStore(keys));
//   ASSERT_TRUE(StoreRows(socket, spec, store.rows).ok());
//   ASSERT_TRUE(scheduler->CompleteStore(store.keys, true).ok());
//
// The spec must describe one local worker (mp_rank 0) of "separate_kv" tensors: num_layers
// tensors of page_bytes each (worker_bytes_per_block 0 or page_bytes × num_layers).
#ifndef KVOFFLOAD_CLIENT_HOST_STORE_ROWS_H_
#define KVOFFLOAD_CLIENT_HOST_STORE_ROWS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "client/kvoffload_client.h"

namespace kvoffload::client {

// The job's status (the daemon's verdict), or why the worker could not run it.
absl::Status StoreRows(const std::string& socket_path, const EngineSpec& spec,
                       const std::vector<uint64_t>& rows, uint64_t job_id = 1);

}  // namespace kvoffload::client

#endif  // KVOFFLOAD_CLIENT_HOST_STORE_ROWS_H_
