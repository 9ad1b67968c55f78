/* kvoffload C ABI: the client library (client/kvoffload_client.h) behind a plain C interface,
 * for engines written in other languages. The Python package `kvoffload` (python/) calls it
 * through ctypes; it is built as //client:libkvoffload_c.so, which exports only kvo_* symbols and
 * links the CUDA runtime statically (it loads on machines without a GPU or driver).
 *
 * Conventions
 *  - Every fallible function returns an int status code: the absl::StatusCode value (KVO_OK = 0,
 *    KVO_NOT_FOUND = 5, ...; the same numbers as gRPC codes). On failure the message is written
 *    to `err` (at most err_len - 1 bytes, then a NUL; truncated when longer). `err` may be NULL
 *    or err_len 0 when the caller wants no message. On success err receives "".
 *  - Reasons (ABI 7): a refusal the caller may act on also has a reason, a stable snake_case
 *    name ("region_epoch_mismatch", "key_not_in_index", ...; docs/api.md "Errors" lists them
 *    with their codes): kvo_last_error_reason() right after the failed call, on the same
 *    thread; a job's in kvo_finished.reason. Decide on code + reason, never on the message.
 *  - Nothing throws across this boundary. Pointers named *_out are written only on success unless
 *    said otherwise. Arrays of length 0 may be NULL.
 *  - Deadlines: every call that talks to the daemon is bounded (kvo_client_options; defaults
 *    KVO_DEFAULT_OPEN_TIMEOUT_MS for opening an engine or registering a worker, which may create
 *    and pin the region, and KVO_DEFAULT_CALL_TIMEOUT_MS for every other call). The socket is
 *    checked first: when no daemon listens, open/connect fail at once with KVO_UNAVAILABLE and a
 *    message naming the socket path and the fix ("kvoffloadd is not running (no socket at
 *    /run/kvoffload/kvoffload.sock): start it ..."), KVO_PERMISSION_DENIED naming the group to
 *    join. A call over its deadline fails with KVO_DEADLINE_EXCEEDED naming the call, the socket
 *    and the deadline. kvo_worker_wait takes its own timeout.
 *  - Restarts (ABI 3): when the daemon goes away and comes back, a worker fails the jobs it had
 *    in flight (KVO_UNAVAILABLE verdicts), registers again by itself in the background
 *    (kvo_worker_session_state says where it stands; a submit meanwhile fails KVO_UNAVAILABLE at
 *    once), and a scheduler re-opens the engine on its next call (kvo_scheduler_region_epoch then
 *    says whether the region survived). kvo_client_options.reconnect = 0 turns both off.
 *  - kvo_worker and kvo_scheduler handles are thread-safe: any function but *_close may be called
 *    on one handle from several threads at once. *_close ends the handle; the caller must make
 *    sure no other call on it is in flight. The library never installs logging sinks.
 *
 * Scheduler side (one per engine replica):
 *   kvo_engine_spec spec;
 *   kvo_engine_spec_init(&spec);
 *   spec.engine_id = "llama-70b"; spec.world_size = 8; spec.tp = 8; spec.num_layers = 80;
 *   spec.page_bytes = 32768; spec.budget_bytes = 256ull << 30;
 *   kvo_scheduler* s; kvo_geometry g; char err[512];
 *   if (kvo_scheduler_open("/run/kvoffload/kvoffload.sock", &spec, &s, &g, err, sizeof err))
 *     fprintf(stderr, "kvoffload: %s\n", err);
 *   kvo_scheduler_prepare_store(s, keys, key_lens, n, mask, rows, NULL, 0, NULL, &num_evicted,
 *                               err, sizeof err);   // rows for the keys with mask[i] == 1
 *   ... every worker submits a KVO_STORE job for those rows; the job finishes ...
 *   kvo_scheduler_complete_store(s, stored_keys, stored_lens, m, 1, err, sizeof err);
 *
 * Worker side (one per GPU rank, at KV-cache registration):
 *   kvo_cuda_tensor t[2] = {{k_ptr, num_blocks, k_stride, page}, {v_ptr, num_blocks, v_stride, page}};
 *   kvo_worker* w;
 *   kvo_worker_connect_cuda(sock, &spec, mp_rank, -1, t, 2, 8, &w, err, sizeof err);
 *   kvo_worker_record_event(w, 0, (uint64_t)stream, err, sizeof err);  // after the step's KV writes
 *   kvo_worker_submit(w, job_id, KVO_STORE, blocks, nb, rows, nr, 0, err, sizeof err);
 *   kvo_worker_poll(w, finished, 64, &n_finished, err, sizeof err);     // each step
 *   kvo_worker_close(w);
 */
#ifndef KVOFFLOAD_CLIENT_KVOFFLOAD_C_H_
#define KVOFFLOAD_CLIENT_KVOFFLOAD_C_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Bumped whenever a struct or signature below changes; see kvo_abi_version(). */
#define KVO_ABI_VERSION 7

/* ---- Status codes (absl::StatusCode values) ------------------------------------------------ */
#define KVO_OK 0
#define KVO_CANCELLED 1
#define KVO_UNKNOWN 2
#define KVO_INVALID_ARGUMENT 3
#define KVO_DEADLINE_EXCEEDED 4
#define KVO_NOT_FOUND 5
#define KVO_ALREADY_EXISTS 6
#define KVO_PERMISSION_DENIED 7
#define KVO_RESOURCE_EXHAUSTED 8
#define KVO_FAILED_PRECONDITION 9
#define KVO_ABORTED 10
#define KVO_OUT_OF_RANGE 11
#define KVO_UNIMPLEMENTED 12
#define KVO_INTERNAL 13
#define KVO_UNAVAILABLE 14
#define KVO_DATA_LOSS 15
#define KVO_UNAUTHENTICATED 16

/* ---- Engine spec (mirrors common::EngineSpec, DESIGN.md §2) ---------------------------------- */
#define KVO_EXECUTOR_UNI 0
#define KVO_EXECUTOR_MP 1
#define KVO_EXECUTOR_RAY 2
#define KVO_EXECUTOR_EXTERNAL 3

#define KVO_ATTENTION_MHA 0
#define KVO_ATTENTION_MLA 1

typedef struct kvo_engine_spec {
  const char* engine_id;          /* required, NUL-terminated */
  uint32_t dp_rank;
  uint32_t world_size;
  uint32_t local_world_size;      /* ranks of this replica on this node; 0 = not declared */
  uint32_t tp;
  uint32_t pp;
  uint32_t pcp;
  uint32_t dcp;
  int32_t executor;               /* KVO_EXECUTOR_* */
  int32_t attention;              /* KVO_ATTENTION_* */
  uint32_t num_kv_groups;
  uint32_t num_layers;
  uint32_t blocks_per_row;
  uint64_t page_bytes;
  uint64_t worker_bytes_per_block; /* 0 = page_bytes x num_layers */
  uint64_t budget_bytes;          /* per node, per DP replica */
  const char* secondary_tiers;    /* comma-separated tier names; NULL or "" = none */
  int32_t rows_assigned_by_engine; /* 0 or 1 */
  /* ABI 2: */
  int32_t stores_by_writer_only;  /* 0 or 1; replicated (MLA) layout: stores vote by the writer */
  const uint32_t* member_uids;    /* further uids allowed to use the engine; may be NULL */
  size_t num_member_uids;
  const uint32_t* member_gids;    /* further groups allowed to use the engine; may be NULL */
  size_t num_member_gids;
  /* ABI 5 (README "Pools"): */
  const char* pool;               /* a node-wide pool to share rows with; "" = private */
  const char* model_identity;     /* what members must agree on (model, revision, dtypes, ...) */
} kvo_engine_spec;

/* Fills the defaults of common::EngineSpec (engine_id "engine", world_size = tp = pp = pcp =
 * dcp = 1, executor MP, attention MHA, one KV group, one layer, blocks_per_row 1, the rest 0). */
void kvo_engine_spec_init(kvo_engine_spec* spec);

/* ABI 4: the spec as the daemon will read it, every field ("engine_id=... dp_rank=0 ...
 * member_uids=[1001] member_gids=[]"), into out (truncated, NUL-terminated): for logs, and the
 * bindings' check that each field reaches the library. INVALID_ARGUMENT for what
 * kvo_scheduler_open would refuse before calling the daemon (the topology is not checked). */
int kvo_engine_spec_describe(const kvo_engine_spec* spec, char* out, size_t out_len, char* err,
                             size_t err_len);

/* ---- Client options (deadlines) ------------------------------------------------------------ */
#define KVO_DEFAULT_OPEN_TIMEOUT_MS 60000  /* OpenEngine, worker connect + registration */
#define KVO_DEFAULT_CALL_TIMEOUT_MS 10000  /* each index call; each worker submit */

typedef struct kvo_client_options {
  int64_t open_timeout_ms;  /* > 0: kvo_scheduler_open_options, kvo_worker_connect_*_options */
  int64_t call_timeout_ms;  /* > 0: every later call on the handle (a worker's submit: sending
                               the part; a submit blocked that long ends the session) */
  /* ABI 3: 1 (the default) = after the daemon went away, a worker registers again by itself and
   * a scheduler re-opens the engine on its next call (docs/clients.md); 0 = the session ends
   * and the scheduler's calls keep failing. */
  int32_t reconnect;
} kvo_client_options;

/* Fills the defaults (KVO_DEFAULT_OPEN_TIMEOUT_MS, KVO_DEFAULT_CALL_TIMEOUT_MS, reconnect 1).
 * The *_options functions take NULL for the defaults; a timeout <= 0 is INVALID_ARGUMENT. */
void kvo_client_options_init(kvo_client_options* options);

/* ---- Region geometry ------------------------------------------------------------------------ */
typedef struct kvo_geometry {
  int32_t replicated;              /* single-copy MLA layout */
  uint32_t num_copies;
  uint32_t blocks_per_row;
  int32_t created;                 /* kvo_scheduler_open: this open created the region */
  uint64_t worker_bytes_per_block;
  uint64_t slot_bytes;
  uint64_t row_bytes;
  uint64_t num_rows;
  uint64_t capacity_bytes;
  char fingerprint[256];           /* NUL-terminated, truncated if longer */
} kvo_geometry;

/* ---- Library ------------------------------------------------------------------------------- */
/* "kvoffload-c <version> abi <KVO_ABI_VERSION>"; static storage, never freed. */
const char* kvo_version(void);
/* KVO_ABI_VERSION of the library actually loaded (bindings check it against their own). */
int kvo_abi_version(void);

/* ABI 7: the reason of the last error of this thread: every kvo_* call that returns a status
 * code sets it, "" when that call succeeded or its error carries no reason (docs/api.md
 * "Errors"). Thread-local storage, valid until this thread's next such call; never NULL. */
const char* kvo_last_error_reason(void);
/* ABI 7: that error's metadata, "key=value\n" per entry, sorted by key; "" when none. Same
 * storage rules as kvo_last_error_reason. */
const char* kvo_last_error_metadata(void);

/* ---- Worker --------------------------------------------------------------------------------- */
typedef struct kvo_worker kvo_worker;

#define KVO_STORE 1  /* GPU -> host region */
#define KVO_LOAD 2   /* host region -> GPU */

/* One KV tensor in CUDA device memory of this process. A worker's bytes for GPU block b are the
 * concatenation, over its tensors in order, of page_bytes at device_ptr + b x block_stride_bytes. */
typedef struct kvo_cuda_tensor {
  uint64_t device_ptr;
  uint64_t num_blocks;
  uint64_t block_stride_bytes;
  uint64_t page_bytes;
} kvo_cuda_tensor;

/* One KV tensor in a memfd (the daemon's host backend: tests, GPU-less nodes). The memfd must be
   owned by the caller's uid and sealed with F_SEAL_SHRINK; the daemon opens it from the calling
   process (README "Security model"). */
typedef struct kvo_host_tensor {
  const char* handle;              /* "memfd:<fd>", fd open in this process (ABI 1: shm_name) */
  uint64_t allocation_bytes;       /* size of the memfd (or the part of it registered) */
  uint64_t offset;                 /* of block 0 from the object's start */
  uint64_t num_blocks;
  uint64_t block_stride_bytes;
  uint64_t page_bytes;
} kvo_host_tensor;

/* Registers a GPU worker. Each device pointer is resolved to the IPC handle of its allocation's
 * base plus an offset (client::cuda::ResolveAllocation); every tensor must live on one device.
 * device: the CUDA ordinal of the tensors, or -1 to take it from the first tensor. num_events:
 * size of the interprocess event pool (owned by the worker; 0 = none, record/wait then fail).
 * Codes: UNAVAILABLE without a CUDA driver or device; INVALID_ARGUMENT for a pointer that is not
 * device memory or tensors on several devices; FAILED_PRECONDITION for allocations that cannot be
 * exported (cuMemCreate / expandable segments, memory pools); else the daemon's refusal. */
int kvo_worker_connect_cuda(const char* socket_path, const kvo_engine_spec* spec, uint32_t mp_rank,
                            int32_t device, const kvo_cuda_tensor* tensors, size_t num_tensors,
                            size_t num_events, kvo_worker** worker_out, char* err, size_t err_len);

/* kvo_worker_connect_cuda with explicit deadlines (NULL = the defaults). */
int kvo_worker_connect_cuda_options(const char* socket_path, const kvo_engine_spec* spec,
                                    uint32_t mp_rank, int32_t device,
                                    const kvo_cuda_tensor* tensors, size_t num_tensors,
                                    size_t num_events, const kvo_client_options* options,
                                    kvo_worker** worker_out, char* err, size_t err_len);

/* Registers a host-backend worker (no CUDA involved; record/wait fail FAILED_PRECONDITION). */
int kvo_worker_connect_host(const char* socket_path, const kvo_engine_spec* spec, uint32_t mp_rank,
                            const kvo_host_tensor* tensors, size_t num_tensors,
                            kvo_worker** worker_out, char* err, size_t err_len);
/* kvo_worker_connect_host with explicit deadlines (NULL = the defaults). */
int kvo_worker_connect_host_options(const char* socket_path, const kvo_engine_spec* spec,
                                    uint32_t mp_rank, const kvo_host_tensor* tensors,
                                    size_t num_tensors, const kvo_client_options* options,
                                    kvo_worker** worker_out, char* err, size_t err_len);

/* What the daemon answered at registration. (Like `struct stat`, the struct shares its name with
 * the function: write `struct kvo_worker_info`.) */
struct kvo_worker_info {
  uint32_t slot;
  int32_t writer;                  /* 0 for replicated non-writers (their stores only vote) */
  uint32_t num_copies;
  int32_t replicated;
  uint32_t blocks_per_row;
  int32_t device;                  /* CUDA ordinal, -1 for a host worker */
  uint64_t row_bytes;
  uint64_t slot_bytes;
  uint64_t num_rows;
  uint64_t worker_bytes_per_block;
  uint64_t capacity_bytes;
  uint64_t session_id;
  uint64_t num_events;
};
int kvo_worker_info(const kvo_worker* worker, struct kvo_worker_info* info_out, char* err,
                    size_t err_len);

/* Sends this worker's part of a job: gpu_blocks has num_rows x blocks_per_row entries.
 * direction: KVO_STORE or KVO_LOAD (else INVALID_ARGUMENT). event_index: an event of the pool the
 * daemon waits on before copying (record it first), or -1. Returns an error only for bad input
 * or an ended session; the daemon's verdict arrives as a kvo_finished (poll / wait). */
int kvo_worker_submit(kvo_worker* worker, uint64_t job_id, int32_t direction,
                      const uint64_t* gpu_blocks, size_t num_gpu_blocks, const uint64_t* rows,
                      size_t num_rows, int32_t event_index, char* err, size_t err_len);

/* kvo_worker_submit, checked against the region the rows were planned in: region_epoch is the
 * scheduler's kvo_scheduler_region_epoch (0 = the live session's own region, which
 * kvo_worker_submit always sends: rows planned before the worker registered again must be sent
 * with their epoch). A re-created region fails the job with FAILED_PRECONDITION naming both
 * epochs instead of serving zeroed rows as stored. */
int kvo_worker_submit_epoch(kvo_worker* worker, uint64_t job_id, int32_t direction,
                            const uint64_t* gpu_blocks, size_t num_gpu_blocks,
                            const uint64_t* rows, size_t num_rows, int32_t event_index,
                            uint64_t region_epoch, char* err, size_t err_len);

/* Rows [row, row + num_rows) take GPU blocks [gpu_block, gpu_block + num_rows x blocks_per_row). */
typedef struct kvo_block_run {
  uint64_t gpu_block;
  uint64_t row;
  uint64_t num_rows;
} kvo_block_run;

/* kvo_worker_submit_epoch with the part given as runs of consecutive rows and blocks: 24 bytes a
 * run on the wire instead of 16 bytes a block (a job of one run costs the same at any size up to
 * the daemon's max_blocks_per_job). */
int kvo_worker_submit_runs(kvo_worker* worker, uint64_t job_id, int32_t direction,
                           const kvo_block_run* runs, size_t num_runs, int32_t event_index,
                           uint64_t region_epoch, char* err, size_t err_len);

/* Loads only: num_blocks consecutive region blocks from block first_block of row (region block
 * row x blocks_per_row + first_block; first_block < blocks_per_row) take GPU blocks
 * [gpu_block, gpu_block + num_blocks). A range may start and end inside a row (ABI 2). */
typedef struct kvo_block_range {
  uint64_t gpu_block;
  uint64_t row;
  uint32_t first_block;
  uint64_t num_blocks;
} kvo_block_range;

/* kvo_worker_submit_epoch with the part given as block ranges (a load that starts inside an
 * offloaded row, e.g. its head is still in the engine's GPU cache). A store is INVALID_ARGUMENT:
 * stores write whole rows. ABI 2. */
int kvo_worker_submit_ranges(kvo_worker* worker, uint64_t job_id, int32_t direction,
                             const kvo_block_range* ranges, size_t num_ranges, int32_t event_index,
                             uint64_t region_epoch, char* err, size_t err_len);

/* Identity of the engine's region on this node as the daemon reported it at the live (else the
 * last) session's registration. */
int kvo_worker_region_epoch(const kvo_worker* worker, uint64_t* epoch_out, char* err,
                            size_t err_len);

/* cudaEventRecord(event[index], stream) / cudaStreamWaitEvent(stream, event[index]); cuda_stream
 * is a cudaStream_t cast to an integer (0 = the legacy default stream). */
int kvo_worker_record_event(kvo_worker* worker, int32_t index, uint64_t cuda_stream, char* err,
                            size_t err_len);
int kvo_worker_wait_event(kvo_worker* worker, int32_t index, uint64_t cuda_stream, char* err,
                          size_t err_len);

#define KVO_MESSAGE_BYTES 256
#define KVO_REASON_BYTES 64
typedef struct kvo_finished {
  uint64_t job_id;
  int32_t code;                    /* the job's status code, KVO_OK when it succeeded */
  uint64_t bytes;                  /* bytes the daemon copied for the job on this node */
  char message[KVO_MESSAGE_BYTES]; /* the job's error message, NUL-terminated, truncated */
  char reason[KVO_REASON_BYTES];   /* ABI 7: the error's reason, "" when none */
} kvo_finished;

/* Non-blocking: writes up to `capacity` finished jobs to out and their number to *n_out. Jobs
 * beyond capacity stay queued for the next poll (oldest first). */
int kvo_worker_poll(kvo_worker* worker, kvo_finished* out, size_t capacity, size_t* n_out,
                    char* err, size_t err_len);

/* Waits for one job (and removes it from the queue). timeout_ms < 0 waits without a bound.
 * Returns KVO_OK when the job finished (its own verdict is out->code), DEADLINE_EXCEEDED after the
 * timeout, or the session's status if it ends first. */
int kvo_worker_wait(kvo_worker* worker, uint64_t job_id, int64_t timeout_ms, kvo_finished* out,
                    char* err, size_t err_len);

/* KVO_OK while the session with the daemon is live; KVO_UNAVAILABLE while it registers again
 * after the daemon went away; why it ended otherwise. */
int kvo_worker_session_status(const kvo_worker* worker, char* err, size_t err_len);

/* Where the worker's session stands (ABI 3). */
#define KVO_SESSION_LIVE 0
#define KVO_SESSION_RECONNECTING 1  /* the daemon went away; registering again in the background */
#define KVO_SESSION_ENDED 2         /* for good: closed by the daemon for a reason, or refused */

typedef struct kvo_session_state {
  int32_t phase;                   /* KVO_SESSION_* */
  int32_t code;                    /* kvo_worker_session_status's code */
  uint64_t generation;             /* 1 for the first session, +1 per session registered again */
  uint64_t region_changes;         /* sessions registered again that found a new region epoch:
                                      every row cached before is gone */
  uint64_t reconnect_attempts;     /* registration attempts after the daemon went away */
  uint64_t region_epoch;           /* of the live (else the last) session's region */
  uint64_t session_id;
  char message[KVO_MESSAGE_BYTES]; /* kvo_worker_session_status's message, truncated */
  char reason[KVO_REASON_BYTES];   /* ABI 7: that status's reason, "" when none */
} kvo_session_state;
int kvo_worker_session_state(const kvo_worker* worker, struct kvo_session_state* state_out,
                             char* err, size_t err_len);

/* Ends the session (the daemon fails this worker's unvoted jobs and releases its mappings) and
 * frees the handle and its event pool. NULL is ignored. */
void kvo_worker_close(kvo_worker* worker);

/* ---- Scheduler (row index) ------------------------------------------------------------------ */
typedef struct kvo_scheduler kvo_scheduler;

#define KVO_KEY_MISS 0
#define KVO_KEY_HIT 1
#define KVO_KEY_HIT_PENDING 2

#define KVO_MAX_KEY_BYTES 256  /* keys are 1..256 bytes */
#define KVO_NO_ROW UINT64_MAX

/* OpenEngine: creates the engine's region or joins it (idempotent). geometry_out may be NULL. */
int kvo_scheduler_open(const char* socket_path, const kvo_engine_spec* spec,
                       kvo_scheduler** scheduler_out, kvo_geometry* geometry_out, char* err,
                       size_t err_len);
int kvo_scheduler_geometry(const kvo_scheduler* scheduler, kvo_geometry* geometry_out, char* err,
                           size_t err_len);
/* Re-opens of the engine after the daemon went away (*reopens_out) and how many of them found a
 * re-created region (*region_changes_out). Either pointer may be NULL. ABI 3. */
int kvo_scheduler_region_changes(const kvo_scheduler* scheduler, uint64_t* region_changes_out,
                                 uint64_t* reopens_out, char* err, size_t err_len);
/* kvo_scheduler_open requiring the region of an earlier kvo_scheduler_region_epoch (0 = any):
 * FAILED_PRECONDITION naming both epochs, and nothing created, when it was dropped since. */
int kvo_scheduler_open_epoch(const char* socket_path, const kvo_engine_spec* spec,
                             uint64_t region_epoch, kvo_scheduler** scheduler_out,
                             kvo_geometry* geometry_out, char* err, size_t err_len);
/* kvo_scheduler_open_epoch with explicit deadlines (NULL = the defaults): options->open_timeout_ms
 * bounds this open, options->call_timeout_ms every later call on the handle. */
int kvo_scheduler_open_options(const char* socket_path, const kvo_engine_spec* spec,
                               uint64_t region_epoch, const kvo_client_options* options,
                               kvo_scheduler** scheduler_out, kvo_geometry* geometry_out,
                               char* err, size_t err_len);
/* Identity of the engine's region (never 0); workers pass it to kvo_worker_submit_epoch. It
 * changes when the scheduler re-opened the engine after the daemon went away and found the region
 * re-created: keys and rows planned before are gone (parts with the old epoch fail
 * FAILED_PRECONDITION). */
int kvo_scheduler_region_epoch(const kvo_scheduler* scheduler, uint64_t* epoch_out, char* err,
                               size_t err_len);

/* Keys are passed as n byte strings: keys[i] points at key_lens[i] bytes (binary-safe). */

/* states_out[i]: KVO_KEY_MISS, KVO_KEY_HIT or KVO_KEY_HIT_PENDING. */
int kvo_scheduler_lookup(kvo_scheduler* scheduler, const uint8_t* const* keys,
                         const size_t* key_lens, size_t n, int32_t* states_out, char* err,
                         size_t err_len);

/* Reserves a row for every key not already present. store_mask_out[i] = 1 and rows_out[i] = its
 * row for those keys, 0 and KVO_NO_ROW for keys already present. The keys evicted to make room
 * are written back to back into evicted_buf with their lengths in evicted_lens_out (capacity n)
 * and their number in *num_evicted_out. evicted_buf may be NULL (and evicted_lens_out too) when
 * the caller does not want the keys; otherwise evicted_buf_len must be at least
 * n x KVO_MAX_KEY_BYTES, checked before anything is sent (nothing is half-applied).
 * RESOURCE_EXHAUSTED when fewer rows are free or evictable than new keys (nothing changed). */
int kvo_scheduler_prepare_store(kvo_scheduler* scheduler, const uint8_t* const* keys,
                                const size_t* key_lens, size_t n, uint8_t* store_mask_out,
                                uint64_t* rows_out, uint8_t* evicted_buf, size_t evicted_buf_len,
                                size_t* evicted_lens_out, size_t* num_evicted_out, char* err,
                                size_t err_len);

/* success != 0: the rows become READY (readable); 0: they are freed. */
int kvo_scheduler_complete_store(kvo_scheduler* scheduler, const uint8_t* const* keys,
                                 const size_t* key_lens, size_t n, int success, char* err,
                                 size_t err_len);

/* Pins the rows of READY keys for reading; rows_out[i] is key i's row. NOT_FOUND for a key not
 * in the index, FAILED_PRECONDITION for one not readable yet; nothing is pinned then. */
int kvo_scheduler_prepare_load(kvo_scheduler* scheduler, const uint8_t* const* keys,
                               const size_t* key_lens, size_t n, uint64_t* rows_out, char* err,
                               size_t err_len);
int kvo_scheduler_complete_load(kvo_scheduler* scheduler, const uint8_t* const* keys,
                                const size_t* key_lens, size_t n, char* err, size_t err_len);
/* Marks keys recently used (LRU). */
int kvo_scheduler_touch(kvo_scheduler* scheduler, const uint8_t* const* keys,
                        const size_t* key_lens, size_t n, char* err, size_t err_len);

/* How far the engine's region is populated and registered (ABI 6; README "serve while
 * pinning"): rows not ready yet are never handed out, so a prepare_store that needs them is
 * KVO_RESOURCE_EXHAUSTED until they are. */
typedef struct kvo_readiness {
  uint64_t region_epoch;         /* the region these numbers are of */
  uint64_t num_rows;             /* rows online (a pool member: the pool's) */
  uint64_t rows_not_ready;       /* of them, not registered yet; 0 = ready */
  uint64_t region_bytes;
  uint64_t region_ready_bytes;   /* == region_bytes once fully ready */
  double first_ready_seconds;    /* from opening the engine to its first ready chunk; -1: not yet */
  double fully_ready_seconds;    /* ... to its last; -1: not yet */
} kvo_readiness;

/* The engine's readiness, from Admin.Stats on the daemon's admin socket (admin.sock beside the
 * data socket, within call_timeout_ms): the caller must be able to connect to it (its group;
 * KVO_PERMISSION_DENIED naming it otherwise) and administer the engine (its owner, root or the
 * daemon's --admin_group: KVO_NOT_FOUND otherwise, as for an engine that is gone). ABI 6. */
int kvo_scheduler_readiness(kvo_scheduler* scheduler, kvo_readiness* readiness_out, char* err,
                            size_t err_len);
/* Polls kvo_scheduler_readiness until every row is registered: KVO_OK; after timeout_ms (>= 0;
 * 0: one look) KVO_DEADLINE_EXCEEDED saying how far it got ("N of M rows not ready yet, X of Y
 * region bytes registered"); readiness's error at once. ABI 6. */
int kvo_scheduler_wait_until_ready(kvo_scheduler* scheduler, int64_t timeout_ms, char* err,
                                   size_t err_len);

/* Frees the handle (the engine's region stays; it belongs to the daemon). NULL is ignored. */
void kvo_scheduler_close(kvo_scheduler* scheduler);

#ifdef __cplusplus
}  /* extern "C" */
#endif

#endif  /* KVOFFLOAD_CLIENT_KVOFFLOAD_C_H_ */
