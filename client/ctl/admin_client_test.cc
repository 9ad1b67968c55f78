// Tests for reaching the daemon: the one precise line and exit code 3 for a missing socket, a
// socket the caller may not open, a file that is not a socket, and a stale socket nobody
// listens on; the "kvoffloadctl: CODE: message" line for a daemon's error.
#include "client/ctl/admin_client.h"

#include <fcntl.h>
#include <grp.h>
#include <pwd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <sstream>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "kvoffload/v1/kvoffload.grpc.pb.h"

namespace kvoffload::client::ctl {
namespace {

// A fresh directory under /tmp (short: Unix socket paths are limited to 107 bytes).
class TempDir {
 public:
  TempDir() {
    char path[] = "/tmp/kvoctl_test.XXXXXX";
    EXPECT_NE(mkdtemp(path), nullptr) << std::strerror(errno);
    path_ = path;
  }
  ~TempDir() {
    std::error_code ignored;
    std::filesystem::permissions(path_, std::filesystem::perms::owner_all, ignored);
    std::filesystem::remove_all(path_, ignored);
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// A Unix socket file that nobody listens on (bound, then closed).
void MakeStaleSocket(const std::string& path) {
  const int fd = socket(AF_UNIX, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, path.c_str(), sizeof(addr.sun_path) - 1);
  ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0) << std::strerror(errno);
  close(fd);
}

void MakeFile(const std::string& path, mode_t mode) {
  const int fd = open(path.c_str(), O_CREAT | O_WRONLY, 0600);
  ASSERT_GE(fd, 0);
  close(fd);
  ASSERT_EQ(chmod(path.c_str(), mode), 0);
}

grpc::Status NeverCalled(const std::shared_ptr<grpc::Channel>&, grpc::ClientContext*) {
  ADD_FAILURE() << "the rpc must not run";
  return grpc::Status::OK;
}

TEST(CheckAdminSocketTest, MissingSocketMeansNotRunning) {
  TempDir dir;
  const std::string path = dir.path() + "/admin.sock";
  EXPECT_EQ(CheckAdminSocket(path), "kvoffloadd is not running (no socket at " + path + ")");
  EXPECT_EQ(CheckAdminSocket(dir.path() + "/no/such/dir/admin.sock"),
            "kvoffloadd is not running (no socket at " + dir.path() + "/no/such/dir/admin.sock)");
}

TEST(CheckAdminSocketTest, ParentIsAFile) {
  TempDir dir;
  MakeFile(dir.path() + "/file", 0600);
  const std::string path = dir.path() + "/file/admin.sock";
  EXPECT_EQ(CheckAdminSocket(path), "kvoffloadd is not running (no socket at " + path + ")");
}

TEST(CheckAdminSocketTest, NotASocket) {
  TempDir dir;
  const std::string path = dir.path() + "/admin.sock";
  MakeFile(path, 0600);
  EXPECT_EQ(CheckAdminSocket(path), "cannot reach kvoffloadd at " + path + ": not a socket");
}

TEST(CheckAdminSocketTest, StaleSocketMayBeDialed) {
  TempDir dir;
  const std::string path = dir.path() + "/admin.sock";
  MakeStaleSocket(path);
  EXPECT_EQ(CheckAdminSocket(path), "");
}

TEST(CheckAdminSocketTest, PathTooLongForASocketAddress) {
  TempDir dir;
  const std::string long_dir = dir.path() + "/" + std::string(100, 'd');
  ASSERT_EQ(mkdir(long_dir.c_str(), 0700), 0);
  // Bind by a relative name from inside the directory: the full path is too long for bind().
  char cwd[4096];
  ASSERT_NE(getcwd(cwd, sizeof(cwd)), nullptr);
  ASSERT_EQ(chdir(long_dir.c_str()), 0);
  MakeStaleSocket("admin.sock");
  ASSERT_EQ(chdir(cwd), 0);
  const std::string path = long_dir + "/admin.sock";
  EXPECT_EQ(CheckAdminSocket(path),
            "cannot reach kvoffloadd at " + path +
                ": the path is longer than 107 bytes, the limit of a Unix socket address");
}

// CheckAdminSocket(path) as seen by the unprivileged user "nobody" (in a child process, so
// that the test means something when run as root, where access() always succeeds). Sets
// *skip to a reason when that is not possible.
std::string CheckAsNobody(const std::string& path, std::string* skip) {
  const passwd* nobody = getpwnam("nobody");
  if (nobody == nullptr) {
    *skip = "running as root and there is no user nobody";
    return "";
  }
  int fds[2];
  if (pipe(fds) != 0) {
    *skip = "pipe failed";
    return "";
  }
  const pid_t pid = fork();
  if (pid == 0) {
    close(fds[0]);
    if (setgroups(0, nullptr) != 0 || setgid(nobody->pw_gid) != 0 ||
        setuid(nobody->pw_uid) != 0) {
      _exit(2);
    }
    const std::string line = CheckAdminSocket(path);
    if (write(fds[1], line.data(), line.size()) != static_cast<ssize_t>(line.size())) _exit(3);
    _exit(0);
  }
  close(fds[1]);
  std::string line;
  char buffer[512];
  for (ssize_t n; (n = read(fds[0], buffer, sizeof(buffer))) > 0;) line.append(buffer, n);
  close(fds[0]);
  int wstatus = 0;
  if (pid < 0 || waitpid(pid, &wstatus, 0) != pid || !WIFEXITED(wstatus) ||
      WEXITSTATUS(wstatus) != 0) {
    *skip = "running as root and cannot check as user nobody";
  }
  return line;
}

std::string CheckAsUnprivileged(const std::string& path, std::string* skip) {
  return geteuid() == 0 ? CheckAsNobody(path, skip) : CheckAdminSocket(path);
}

TEST(CheckAdminSocketTest, PermissionDenied) {
  TempDir dir;
  ASSERT_EQ(chmod(dir.path().c_str(), 0755), 0);  // nobody may look inside
  const std::string path = dir.path() + "/admin.sock";
  MakeFile(path, 0000);  // a non-socket file nobody may write: access() fails before the type
  std::string skip;
  const std::string line = CheckAsUnprivileged(path, &skip);
  if (!skip.empty()) GTEST_SKIP() << skip;
  // The file's own group is the one to join.
  struct stat st;
  ASSERT_EQ(stat(path.c_str(), &st), 0);
  const struct group* g = getgrgid(st.st_gid);
  ASSERT_NE(g, nullptr);
  EXPECT_EQ(line, "permission denied on " + path + " (join group " + g->gr_name + ")");
}

TEST(CheckAdminSocketTest, ClosedDirectoryIsPermissionDenied) {
  TempDir dir;
  ASSERT_EQ(chmod(dir.path().c_str(), 0755), 0);
  const std::string sub = dir.path() + "/closed";
  ASSERT_EQ(mkdir(sub.c_str(), 0700), 0);
  ASSERT_EQ(chmod(sub.c_str(), 0000), 0);
  const std::string path = sub + "/admin.sock";
  std::string skip;
  const std::string line = CheckAsUnprivileged(path, &skip);
  if (!skip.empty()) GTEST_SKIP() << skip;
  EXPECT_EQ(line, "permission denied on " + path +
                      " (join the admin socket's group, kvoffload-admin by default)");
}

TEST(CallDaemonTest, MissingSocketIsExit3WithoutDialing) {
  TempDir dir;
  const std::string path = dir.path() + "/admin.sock";
  std::ostringstream err;
  EXPECT_EQ(CallDaemon(AdminTarget{path, absl::Seconds(10)}, err, NeverCalled), kExitUnreachable);
  EXPECT_EQ(err.str(), "kvoffloadctl: kvoffloadd is not running (no socket at " + path + ")\n");
}

TEST(CallDaemonTest, NotASocketIsExit3WithoutDialing) {
  TempDir dir;
  const std::string path = dir.path() + "/admin.sock";
  MakeFile(path, 0600);
  std::ostringstream err;
  EXPECT_EQ(CallDaemon(AdminTarget{path, absl::Seconds(10)}, err, NeverCalled), kExitUnreachable);
  EXPECT_EQ(err.str(), "kvoffloadctl: cannot reach kvoffloadd at " + path + ": not a socket\n");
}

TEST(CallDaemonTest, StaleSocketIsExit3WithGrpcReasonAndFast) {
  TempDir dir;
  const std::string path = dir.path() + "/admin.sock";
  MakeStaleSocket(path);
  std::ostringstream err;
  const absl::Time start = absl::Now();
  const int rc = CallDaemon(
      AdminTarget{path, absl::Seconds(10)}, err,
      [](const std::shared_ptr<grpc::Channel>& channel, grpc::ClientContext* context) {
        v1::ListEnginesResponse response;
        return v1::Admin::NewStub(channel)->ListEngines(context, v1::Empty(), &response);
      });
  EXPECT_EQ(rc, kExitUnreachable);
  EXPECT_LT(absl::Now() - start, absl::Seconds(2));
  const std::string line = err.str();
  EXPECT_TRUE(absl::StartsWith(line, "kvoffloadctl: cannot reach kvoffloadd at " + path + ": "))
      << line;
  EXPECT_TRUE(absl::StrContains(line, "Connection refused")) << line;
  EXPECT_EQ(std::count(line.begin(), line.end(), '\n'), 1) << line;
}

TEST(DaemonErrorLineTest, CodeNameAndMessage) {
  EXPECT_EQ(DaemonErrorLine(grpc::Status(grpc::StatusCode::NOT_FOUND, "no engine x/0")),
            "kvoffloadctl: NOT_FOUND: no engine x/0");
  EXPECT_EQ(DaemonErrorLine(grpc::Status(grpc::StatusCode::FAILED_PRECONDITION, "busy")),
            "kvoffloadctl: FAILED_PRECONDITION: busy");
  EXPECT_EQ(DaemonErrorLine(grpc::Status(grpc::StatusCode::INTERNAL, "two\nlines")),
            "kvoffloadctl: INTERNAL: two lines");
}

}  // namespace
}  // namespace kvoffload::client::ctl
