// ChildProcess: a child with its stdin and stdout on pipes, driven one line at a time. Used by
// the demo to run worker processes and by integration tests. exec() only: a child never shares
// the parent's gRPC or CUDA state (forking after either is initialised is unsafe).
#ifndef KVOFFLOAD_COMMON_SUBPROCESS_H_
#define KVOFFLOAD_COMMON_SUBPROCESS_H_

#include <sys/types.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace kvoffload::common {

// Not thread-safe. The destructor kills the child (SIGKILL) if it is still running.
class ChildProcess {
 public:
  static absl::StatusOr<std::unique_ptr<ChildProcess>> Spawn(const std::vector<std::string>& argv);
  ~ChildProcess();

  // Writes `line` + '\n'; returns the next stdout line (empty on EOF or after `timeout_s`).
  std::string Command(const std::string& line, int timeout_s = 60);
  std::string ReadLine(int timeout_s = 60);
  void Signal(int signal);
  // Waits for exit; returns the exit code, or 128 + signal.
  int Wait();
  pid_t pid() const { return pid_; }

 private:
  pid_t pid_ = -1;
  int in_fd_ = -1;
  int out_fd_ = -1;
  std::string buffer_;
  bool exited_ = false;
  int exit_code_ = 0;
};

}  // namespace kvoffload::common

#endif  // KVOFFLOAD_COMMON_SUBPROCESS_H_
