#include "common/thread_name.h"

#include <pthread.h>

namespace kvoffload::common {

void SetThreadName(const std::string& name) {
  // Best effort: a name is for people and tools; a thread without one works the same.
  (void)pthread_setname_np(pthread_self(), name.substr(0, kMaxThreadNameBytes).c_str());
}

std::string ThreadName() {
  char buf[kMaxThreadNameBytes + 1] = {};
  if (pthread_getname_np(pthread_self(), buf, sizeof(buf)) != 0) return "";
  return buf;
}

}  // namespace kvoffload::common
