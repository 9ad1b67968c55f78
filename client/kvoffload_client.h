// kvoffload client library: what an engine links to use kvoffloadd. No gRPC, protobuf or CUDA
// types appear here (pimpl).
//
// Scheduler side (one per engine replica):
//   ASSIGN_OR_RETURN(auto scheduler, SchedulerClient::Open("/run/kvoffload/kvoffload.sock", spec));
//   RETURN_IF_ERROR(scheduler->WaitUntilReady(absl::Seconds(30)));  // optional: every row online
//   ASSIGN_OR_RETURN(auto store, scheduler->PrepareStore(keys));   // rows for the new keys
//   ... workers store, the job finishes ...
//   RETURN_IF_ERROR(scheduler->CompleteStore(store.keys, /*success=*/true));
//
// Worker side (one per GPU rank; tensors already resolved to allocation handles):
//   ASSIGN_OR_RETURN(auto worker, WorkerClient::Connect(options));
//   RETURN_IF_ERROR(worker->Submit({.job_id = 7, .direction = Direction::kStore,
//                                   .gpu_blocks = {3, 9}, .rows = store.rows}));
//   ASSIGN_OR_RETURN(FinishedJob done, worker->WaitFinished(7, absl::Seconds(5)));
//
// Deadlines: every call that talks to the daemon is bounded. The socket is checked first
// (CheckDaemonSocket), so a missing daemon fails at once with UNAVAILABLE naming the path and
// the fix; opening an engine or registering a worker (which may create and pin a region) gets
// `open_timeout`, every other call `call_timeout` (ClientOptions, WorkerOptions); a call over its
// deadline fails with DEADLINE_EXCEEDED naming the call, the socket and the deadline.
//
// Restarts (docs/clients.md, "When the daemon restarts"): both clients come back by themselves.
// A worker whose session ends because the daemon went away fails every job it had in flight
// (UNAVAILABLE), registers again in the background with the same options, and reports the
// region it found (WorkerClient::session_state). The scheduler re-opens the engine on the next
// call after the daemon went away and adopts the region it finds; a new region epoch means the
// old rows are gone (SchedulerClient::region_epoch, region_changes), and parts planned against
// the old epoch fail with FAILED_PRECONDITION.
//
// Errors: every failure is an absl::Status; a daemon's refusal also carries its reason
// (common::ErrorReason(status), common/error_info.h; the reasons in common/refusals.h and
// docs/api.md "Errors"), kept through the client's own annotations. Decide on code + reason:
//   if (common::ErrorReason(s) == common::reason::kKeyNotInIndex) ...  // not on s.message()
#ifndef KVOFFLOAD_CLIENT_KVOFFLOAD_CLIENT_H_
#define KVOFFLOAD_CLIENT_KVOFFLOAD_CLIENT_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/engine_spec.h"
#include "common/error_info.h"
#include "common/limits.h"
#include "common/geometry.h"
#include "common/refusals.h"
#include "common/tensor_handle.h"

namespace kvoffload::client {

using common::EngineSpec;

// Defaults of the deadlines below (docs/clients.md).
inline constexpr absl::Duration kDefaultOpenTimeout = absl::Seconds(60);
inline constexpr absl::Duration kDefaultCallTimeout = absl::Seconds(10);

// How long the scheduler's calls may take.
struct ClientOptions {
  // OpenEngine: creating a region allocates and pins it (about 0.1 s/GB on a cold node).
  absl::Duration open_timeout = kDefaultOpenTimeout;
  // Every index call (Lookup, PrepareStore, CompleteStore, PrepareLoad, CompleteLoad, Touch).
  absl::Duration call_timeout = kDefaultCallTimeout;
  // Re-open the engine after the daemon went away (a call failed UNAVAILABLE, engine_not_found,
  // or region_epoch_mismatch: the engine has another region than the one the request named; or the connection to the daemon had to be made again): the next call first
  // sends OpenEngine with the same spec, bounded by call_timeout (a call never waits longer for
  // the re-open; one that finds the region still being created fails DEADLINE_EXCEEDED and a
  // later call joins it), and adopts the region it finds. false: such calls keep failing (the caller opens a new SchedulerClient).
  bool reopen = true;
  // Keys per index request, 1..common::kMaxKeysPerRequest (the daemon's limit): larger calls are
  // split into several requests (see SchedulerClient). Lower it only to test the splitting.
  size_t max_keys_per_request = common::kMaxKeysPerRequest;
};

// The geometry the daemon reports for an engine, with the daemon's layout fingerprint.
struct RegionGeometry : common::Geometry {
  std::string fingerprint;
};

// One KV tensor, already resolved to the allocation that holds it (see client/cuda for CUDA
// device pointers; tests use "memfd:<fd>" handles of sealed memfds with the host backend).
using TensorHandle = common::TensorHandle;

struct WorkerOptions {
  std::string socket_path;  // the daemon's data socket
  EngineSpec spec;
  uint32_t mp_rank = 0;
  int32_t device = -1;
  std::string device_uuid;  // 16 raw bytes of the CUDA device UUID, or empty
  std::vector<TensorHandle> tensors;
  std::vector<std::string> event_handles;              // cudaIpcEventHandle_t bytes each
  // Checking the socket, connecting and registering (which may create the region).
  absl::Duration connect_timeout = kDefaultOpenTimeout;
  // One Submit: sending the part to the daemon. A Submit still blocked after this long (the
  // daemon stopped reading the session) ends the session; it returns DEADLINE_EXCEEDED.
  absl::Duration call_timeout = kDefaultCallTimeout;
  // The region this worker (or its scheduler) used before, e.g. after a reconnect; 0 = none.
  // Non-zero: registration is refused (FAILED_PRECONDITION naming both epochs, nothing created)
  // unless the engine still has that very region.
  uint64_t region_epoch = 0;
  // Register again when the daemon goes away: the session's stream breaks without the daemon's
  // reason, or the daemon ends it as UNAVAILABLE (it is shutting down). Not when the daemon ended
  // it for a reason of its own (the engine was dropped: ABORTED; a refusal), nor after the
  // client's own call_timeout ended it. Jobs in flight then fail; registration is retried in the
  // background, first after reconnect_initial_backoff, doubling up to reconnect_max_backoff,
  // until it succeeds, the daemon refuses it for good (INVALID_ARGUMENT, PERMISSION_DENIED,
  // FAILED_PRECONDITION, UNAUTHENTICATED: the session then ends with that status) or the client
  // is destroyed. It re-sends the same registration (tensors, event handles: the new daemon
  // process opens them again) with region_epoch 0 and compares the epoch it gets.
  bool reconnect = true;
  absl::Duration reconnect_initial_backoff = absl::Milliseconds(50);
  absl::Duration reconnect_max_backoff = absl::Seconds(2);
};

// What the daemon answered a worker's registration (the proto's Registered message).
struct Registered {
  RegionGeometry geometry;
  uint32_t slot = 0;
  bool writer = true;
  uint64_t session_id = 0;
  uint64_t region_epoch = 0;  // identity of the engine's region on this node; never 0
};

enum class Direction { kStore, kLoad };

// Rows [row, row + num_rows) take GPU blocks [gpu_block, gpu_block + num_rows × blocks_per_row).
struct BlockRun {
  uint64_t gpu_block = 0;
  uint64_t row = 0;
  uint64_t num_rows = 0;
};

// Loads only: `num_blocks` consecutive region blocks from block `first_block` of `row` (region
// block row × blocks_per_row + first_block; first_block < blocks_per_row) take GPU blocks
// [gpu_block, gpu_block + num_blocks). A range may start and end inside a row.
struct BlockRange {
  uint64_t gpu_block = 0;
  uint64_t row = 0;
  uint32_t first_block = 0;
  uint64_t num_blocks = 0;
};

struct JobRequest {
  uint64_t job_id = 0;
  Direction direction = Direction::kStore;
  std::vector<uint64_t> gpu_blocks;  // rows.size() × blocks_per_row
  std::vector<uint64_t> rows;
  int32_t event_index = -1;
  // The region the rows were planned against (the scheduler's SchedulerClient::region_epoch());
  // 0 = the live session's region (registration().region_epoch). Always checked by the daemon: a
  // re-created region fails the part with FAILED_PRECONDITION instead of serving zeroed rows.
  // Rows planned before a reconnect must carry their epoch: with 0 they would be taken as rows
  // of the region the worker registered in again.
  uint64_t region_epoch = 0;
  // After the explicit lists: consecutive rows and blocks, sent as 24 bytes a run.
  std::vector<BlockRun> runs;
  // After the runs (loads only): ranges of single blocks.
  std::vector<BlockRange> ranges;
};

struct FinishedJob {
  uint64_t job_id = 0;
  absl::Status status;
  uint64_t bytes = 0;  // bytes the daemon copied for the job on this node
};

// Where a worker's session stands (one consistent snapshot).
struct WorkerSessionState {
  enum class Phase { kLive, kReconnecting, kEnded };
  Phase phase = Phase::kLive;
  // OK when live; UNAVAILABLE naming why the last session ended and the last attempt while
  // reconnecting; the final reason once ended.
  absl::Status status;
  // 1 for the session Connect made, +1 for each session registered again after the daemon went
  // away. A caller that remembers it can tell that its jobs of an older session failed.
  uint64_t generation = 0;
  // Sessions registered again that found another region epoch: the region was re-created and
  // every row cached before is gone.
  uint64_t region_changes = 0;
  uint64_t reconnect_attempts = 0;  // registration attempts after the daemon went away, in all
  Registered registration;          // of the live session, else of the last one
};

// A GPU worker's session with the daemon. Thread-safe: Submit, PollFinished and WaitFinished
// may be called from any thread. Destroying it ends the session (the daemon fails this worker's
// unvoted jobs and releases its mappings). Owns one thread that reads the session's verdicts
// and, after the daemon went away, registers again (WorkerOptions::reconnect). The memory the
// registration names (tensors, events) must stay valid until the client is destroyed.
//
// Every job submitted gets exactly one FinishedJob, or Submit returns an error: a job whose
// session ends before its verdict arrived finishes with UNAVAILABLE (the daemon went away) or
// the session's status, never silently and never a success.
class WorkerClient {
 public:
  // Registers the worker; returns the daemon's refusal status (exact code) if any.
  static absl::StatusOr<std::unique_ptr<WorkerClient>> Connect(const WorkerOptions& options);
  ~WorkerClient();
  WorkerClient(const WorkerClient&) = delete;
  WorkerClient& operator=(const WorkerClient&) = delete;

  // The registration of the live session (after a reconnect, the new one), else of the last.
  Registered registration() const;

  // Sends this worker's part of a job. Returns an error only when the session is gone: ended
  // (its status), not registered again yet (UNAVAILABLE at once, without waiting), or broken
  // while sending (the job was not taken); DEADLINE_EXCEEDED after WorkerOptions::call_timeout,
  // which ends the session. The daemon's verdict arrives as a FinishedJob (a refused part
  // finishes with its error code). job.region_epoch 0 is the live session's region.
  absl::Status Submit(const JobRequest& job);

  // Returns and forgets the finished jobs received so far, at most `max` of them (lowest job ids
  // first; the rest stay for the next poll or WaitFinished). Non-blocking.
  std::vector<FinishedJob> PollFinished(size_t max = SIZE_MAX);
  // Waits for one job; DEADLINE_EXCEEDED after `timeout`; the session's status if it ends first.
  absl::StatusOr<FinishedJob> WaitFinished(uint64_t job_id, absl::Duration timeout);

  // OK while the session is live; UNAVAILABLE while registering again; the reason it ended.
  absl::Status session_status() const;
  WorkerSessionState session_state() const;

 private:
  struct Impl;
  explicit WorkerClient(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

enum class KeyState { kMiss, kHit, kHitPending };

struct PreparedStore {
  std::vector<std::string> keys;  // keys to store (those not present), request order
  std::vector<uint64_t> rows;     // their rows
  std::vector<std::string> evicted_keys;
  uint64_t region_epoch = 0;      // the region the rows are in (pass it with the parts)
};

// How far an engine's region is populated and registered (serve while pinning, README): a new
// region's rows come online chunk by chunk after OpenEngine returns; rows not ready yet are never
// handed out, so a PrepareStore that needs them is RESOURCE_EXHAUSTED until they are.
struct EngineReadiness {
  uint64_t region_epoch = 0;        // the region these numbers are of
  uint64_t num_rows = 0;            // rows online (a pool member: the pool's)
  uint64_t rows_not_ready = 0;      // of them, not registered yet
  uint64_t region_bytes = 0;
  uint64_t region_ready_bytes = 0;  // == region_bytes once fully ready
  // Seconds from opening the engine until its first / last chunk was ready; -1: not yet.
  double first_ready_seconds = -1;
  double fully_ready_seconds = -1;
  bool ready() const { return rows_not_ready == 0; }
};

// The scheduler's handle on an engine's region and row index. Thread-safe. Every index request
// names the region the client knows (the daemon refuses it, FAILED_PRECONDITION, when the engine
// has another), so no call is ever answered from a region the client has not adopted. A call
// during an outage of the daemon fails UNAVAILABLE at once (the socket is checked before
// re-opening); see ClientOptions::reopen for how the engine is re-opened afterwards. A call is
// never retried: the one that found the daemon gone (or the region changed) returns its error,
// the next re-opens first.
class SchedulerClient {
 public:
  // OpenEngine: creates the engine's region or joins it (idempotent). A non-zero
  // `region_epoch` (from an earlier region_epoch()) requires that very region: FAILED_PRECONDITION
  // naming both epochs, and nothing created, when it was dropped or re-created since.
  // UNAVAILABLE at once when no daemon listens on `socket_path` (CheckDaemonSocket).
  static absl::StatusOr<std::unique_ptr<SchedulerClient>> Open(
      const std::string& socket_path, const EngineSpec& spec, uint64_t region_epoch = 0,
      const ClientOptions& options = ClientOptions());
  ~SchedulerClient();
  SchedulerClient(const SchedulerClient&) = delete;
  SchedulerClient& operator=(const SchedulerClient&) = delete;

  const RegionGeometry& geometry() const;
  bool created() const;  // this Open created the region
  // Identity of the engine's region; workers pass it with their parts (JobRequest::region_epoch).
  // Changes when a re-open found the region re-created: rows and keys planned before are gone
  // (the caller drops what it had pending; parts with the old epoch fail FAILED_PRECONDITION).
  uint64_t region_epoch() const;
  uint64_t region_changes() const;  // re-opens that found another region epoch
  uint64_t reopens() const;         // successful re-opens (the region kept or not)

  // Index calls. A call with more keys than ClientOptions::max_keys_per_request is sent as
  // several requests of consecutive keys, with the same result as one request where that
  // matters:
  //   - Lookup: the states of every key, in order.
  //   - PrepareStore, PrepareLoad: all or nothing. A key twice anywhere in the call is
  //     INVALID_ARGUMENT before anything is sent; when a later request fails, the earlier ones
  //     are undone (CompleteStore(false) of their new keys, CompleteLoad of their keys) and its
  //     error is returned. Keys the earlier requests evicted stay evicted (as after any
  //     PrepareStore) and are not reported.
  //   - Touch: keys[0] ends up the most recent (the requests go from the last keys to the first).
  //   - CompleteStore, CompleteLoad: in order; on an error the keys of the requests before the
  //     failing one are completed, and the message says how many.
  absl::StatusOr<std::vector<KeyState>> Lookup(const std::vector<std::string>& keys);
  absl::StatusOr<PreparedStore> PrepareStore(const std::vector<std::string>& keys);
  absl::Status CompleteStore(const std::vector<std::string>& keys, bool success);
  // `region_epoch`, when given, receives the region the rows are in (another thread's re-open
  // cannot mislabel them, as reading region_epoch() afterwards could).
  absl::StatusOr<std::vector<uint64_t>> PrepareLoad(const std::vector<std::string>& keys,
                                                    uint64_t* region_epoch = nullptr);
  absl::Status CompleteLoad(const std::vector<std::string>& keys);
  absl::Status Touch(const std::vector<std::string>& keys);

  // The engine's readiness, from Admin.Stats on the daemon's admin socket (admin.sock in the data
  // socket's directory, bounded by call_timeout): the caller must be able to connect to it (its
  // group, kvoffload-admin when installed; PERMISSION_DENIED naming the group otherwise) and to
  // administer the engine (its owner, root or --admin_group: the daemon lists no other engine,
  // so a member uid gets NOT_FOUND, as does an engine that is gone).
  absl::StatusOr<EngineReadiness> Readiness();
  // Polls Readiness until every row is registered: OK then; DEADLINE_EXCEEDED after `timeout`
  // saying how far it got ("N of M rows not ready yet, X of Y bytes"); Readiness's error at once.
  // Bounded: returns within about timeout + call_timeout. `poll` is the pause between calls.
  absl::Status WaitUntilReady(absl::Duration timeout,
                              absl::Duration poll = absl::Milliseconds(20));

 private:
  struct Impl;
  explicit SchedulerClient(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace kvoffload::client

#endif  // KVOFFLOAD_CLIENT_KVOFFLOAD_CLIENT_H_
