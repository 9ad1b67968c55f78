// Daemon start-up: what it creates on disk.
#include "daemon/daemon.h"

#include <sys/stat.h>

#include <cstdlib>
#include <filesystem>
#include <string>

#include "daemon/copy/host/host_copy_backend.h"
#include "gtest/gtest.h"

namespace kvoffload::daemon {
namespace {

// The README's security model: a runtime directory the daemon creates is 0711 (reachable, not
// listable by other users), whatever the umask; one that exists keeps its mode.
TEST(DaemonTest, CreatesTheRuntimeDirectory0711) {
  char pattern[] = "/tmp/kvo-daemon-test-XXXXXX";
  const std::string parent = mkdtemp(pattern);
  const std::string dir = parent + "/run";
  const mode_t old_umask = umask(0077);
  DaemonOptions options;
  options.runtime_dir = dir;
  options.max_region_bytes = 1 << 20;
  options.metrics_address = "";
  auto daemon = Daemon::Start(options, CreateHostCopyBackend(1));
  umask(old_umask);
  ASSERT_TRUE(daemon.ok()) << daemon.status();
  struct stat st;
  ASSERT_EQ(stat(dir.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0711u);
  daemon->reset();

  ASSERT_EQ(chmod(dir.c_str(), 0750), 0);
  daemon = Daemon::Start(options, CreateHostCopyBackend(1));
  ASSERT_TRUE(daemon.ok()) << daemon.status();
  ASSERT_EQ(stat(dir.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0750u);
  daemon->reset();
  std::filesystem::remove_all(parent);
}

}  // namespace
}  // namespace kvoffload::daemon
