// The CUDA backend's logger ("cuda"), looked up once for every file of the backend.
#ifndef KVOFFLOAD_DAEMON_COPY_CUDA_LOG_H_
#define KVOFFLOAD_DAEMON_COPY_CUDA_LOG_H_

#include "common/logging.h"

namespace kvoffload::daemon::cuda {

inline spdlog::logger* Log() {
  static spdlog::logger* const log = common::Logger("cuda");
  return log;
}

}  // namespace kvoffload::daemon::cuda

#endif  // KVOFFLOAD_DAEMON_COPY_CUDA_LOG_H_
