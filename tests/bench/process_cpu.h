// The CPU time of a process, for benchmarks that charge a daemon's CPU to the work it did.
#ifndef KVOFFLOAD_TESTS_BENCH_PROCESS_CPU_H_
#define KVOFFLOAD_TESTS_BENCH_PROCESS_CPU_H_

#include <sys/types.h>
#include <unistd.h>

#include <fstream>
#include <iterator>
#include <sstream>
#include <string>

namespace kvoffload::bench {

// utime + stime of a process (every thread, live or exited), in seconds; 0 if unreadable.
inline double ProcessCpuSeconds(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string stat((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const size_t paren = stat.rfind(')');
  if (paren == std::string::npos) return 0;
  std::istringstream fields(stat.substr(paren + 2));
  std::string field;
  double ticks = 0;
  for (int i = 3; i <= 15 && (fields >> field); ++i) {  // fields 14 and 15: utime, stime
    if (i >= 14) ticks += std::stod(field);
  }
  return ticks / static_cast<double>(sysconf(_SC_CLK_TCK));
}

}  // namespace kvoffload::bench

#endif  // KVOFFLOAD_TESTS_BENCH_PROCESS_CPU_H_
