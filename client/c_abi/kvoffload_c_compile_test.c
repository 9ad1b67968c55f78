/* kvoffload_c.h is plain C: this file is compiled as C11 (-pedantic) and links against the ABI.
 * It checks the calls that need no daemon: version, spec defaults, NULL handles, error buffers. */
#include "client/kvoffload_c.h"

#include <stdio.h>
#include <string.h>

static int failures = 0;
#define CHECK(cond)                                                  \
  do {                                                               \
    if (!(cond)) {                                                   \
      fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond); \
      ++failures;                                                    \
    }                                                                \
  } while (0)

int main(void) {
  char err[16];
  char message[512];
  kvo_client_options options;
  kvo_scheduler* scheduler = NULL;
  kvo_worker* worker = NULL;
  kvo_engine_spec spec;
  struct kvo_worker_info info;
  kvo_finished finished;
  kvo_geometry geometry;
  kvo_readiness readiness;
  uint64_t block = 0, row = 0;
  size_t n = 0;

  CHECK(strncmp(kvo_version(), "kvoffload-c ", 12) == 0);
  CHECK(kvo_abi_version() == KVO_ABI_VERSION);

  kvo_engine_spec_init(&spec);
  CHECK(strcmp(spec.engine_id, "engine") == 0);
  CHECK(spec.world_size == 1 && spec.executor == KVO_EXECUTOR_MP);

  CHECK(kvo_worker_info(NULL, &info, err, sizeof err) == KVO_INVALID_ARGUMENT);
  CHECK(strlen(err) == sizeof err - 1); /* "worker handle is NULL", truncated */
  CHECK(strncmp(err, "worker handle i", sizeof err - 1) == 0);
  CHECK(kvo_worker_submit(NULL, 1, KVO_STORE, &block, 1, &row, 1, -1, NULL, 0) ==
        KVO_INVALID_ARGUMENT);
  CHECK(kvo_worker_poll(NULL, &finished, 1, &n, err, sizeof err) == KVO_INVALID_ARGUMENT);
  CHECK(kvo_worker_wait(NULL, 1, 0, &finished, err, sizeof err) == KVO_INVALID_ARGUMENT);
  CHECK(kvo_scheduler_geometry(NULL, &geometry, err, sizeof err) == KVO_INVALID_ARGUMENT);
  CHECK(kvo_scheduler_readiness(NULL, &readiness, err, sizeof err) == KVO_INVALID_ARGUMENT);
  CHECK(kvo_scheduler_wait_until_ready(NULL, 0, err, sizeof err) == KVO_INVALID_ARGUMENT);
  spec.engine_id = NULL;
  CHECK(kvo_worker_connect_host("/nonexistent.sock", &spec, 0, NULL, 0, NULL, err, sizeof err) ==
        KVO_INVALID_ARGUMENT);

  /* Deadlines: defaults, a bad value refused, a missing daemon reported at once with its path. */
  kvo_client_options_init(&options);
  CHECK(options.open_timeout_ms == KVO_DEFAULT_OPEN_TIMEOUT_MS);
  CHECK(options.call_timeout_ms == KVO_DEFAULT_CALL_TIMEOUT_MS);
  kvo_engine_spec_init(&spec);
  options.call_timeout_ms = 0;
  CHECK(kvo_scheduler_open_options("/nonexistent/kvo.sock", &spec, 0, &options, &scheduler, NULL,
                                   message, sizeof message) == KVO_INVALID_ARGUMENT);
  CHECK(strstr(message, "call_timeout_ms") != NULL);
  options.call_timeout_ms = 1;
  CHECK(kvo_scheduler_open_options("/nonexistent/kvo.sock", &spec, 0, &options, &scheduler, NULL,
                                   message, sizeof message) == KVO_UNAVAILABLE);
  CHECK(strstr(message, "kvoffloadd is not running (no socket at /nonexistent/kvo.sock)") != NULL);
  CHECK(scheduler == NULL);
  CHECK(kvo_worker_connect_host_options("/nonexistent/kvo.sock", &spec, 0, NULL, 0, NULL,
                                        &worker, message, sizeof message) ==
        KVO_UNAVAILABLE);
  CHECK(worker == NULL);

  kvo_worker_close(NULL);
  kvo_scheduler_close(NULL);

  printf("%s: %d failed\n", kvo_version(), failures);
  return failures == 0 ? 0 : 1;
}
