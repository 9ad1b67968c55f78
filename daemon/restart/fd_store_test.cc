// The fd-store protocol against a fake service manager's notify socket: what is sent (text and
// SCM_RIGHTS), names, and taking descriptors back from LISTEN_PID / LISTEN_FDS / LISTEN_FDNAMES.
#include "daemon/restart/fd_store.h"

#include <fcntl.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace kvoffload::daemon {
namespace {

struct Datagram {
  std::string text;
  std::vector<UniqueFd> fds;
};

// A bound datagram socket standing in for systemd's notify socket.
class FakeManager {
 public:
  explicit FakeManager(bool abstract = false) {
    fd_.reset(socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0));
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    socklen_t len;
    if (abstract) {
      const std::string name = absl::StrCat("kvo-fdstore-test-", getpid());
      address_ = "@" + name;
      std::memcpy(addr.sun_path + 1, name.data(), name.size());
      len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + name.size());
    } else {
      char pattern[] = "/tmp/kvo-fdstore.XXXXXX";
      dir_ = mkdtemp(pattern);
      address_ = dir_ + "/notify";
      std::strncpy(addr.sun_path, address_.c_str(), sizeof(addr.sun_path) - 1);
      len = sizeof(addr);
    }
    EXPECT_EQ(bind(fd_.get(), reinterpret_cast<sockaddr*>(&addr), len), 0) << strerror(errno);
  }
  ~FakeManager() {
    if (!dir_.empty()) std::filesystem::remove_all(dir_);
  }
  const std::string& address() const { return address_; }

  Datagram Receive() {
    Datagram d;
    char data[4096];
    alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * 16)];
    iovec iov{data, sizeof(data)};
    msghdr msg{};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control;
    msg.msg_controllen = sizeof(control);
    const ssize_t n = recvmsg(fd_.get(), &msg, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
    if (n < 0) return d;
    d.text.assign(data, n);
    for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr; c = CMSG_NXTHDR(&msg, c)) {
      if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
      const size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
      for (size_t i = 0; i < count; ++i) {
        int fd;
        std::memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
        d.fds.emplace_back(fd);
      }
    }
    return d;
  }

 private:
  UniqueFd fd_;
  std::string dir_;
  std::string address_;
};

ino_t Inode(int fd) {
  struct stat st;
  return fstat(fd, &st) == 0 ? st.st_ino : 0;
}

TEST(FdStoreTest, StoreSendsTheNameAndTheDescriptor) {
  for (bool abstract : {false, true}) {
    FakeManager manager(abstract);
    NotifySocketFdStore store(manager.address());
    EXPECT_TRUE(store.enabled());
    UniqueFd memfd(memfd_create("kvoffload:test", MFD_CLOEXEC));
    ASSERT_TRUE(memfd.valid());
    ASSERT_TRUE(store.Store("kvoffload.region.0000000000000001.e.0", memfd.get()).ok());
    Datagram d = manager.Receive();
    EXPECT_EQ(d.text, "FDSTORE=1\nFDNAME=kvoffload.region.0000000000000001.e.0");
    ASSERT_EQ(d.fds.size(), 1u);
    EXPECT_EQ(Inode(d.fds[0].get()), Inode(memfd.get()));  // the same open file
    EXPECT_NE(d.fds[0].get(), memfd.get());                 // a copy: ours stays open

    ASSERT_TRUE(store.Remove("kvoffload.region.0000000000000001.e.0").ok());
    d = manager.Receive();
    EXPECT_EQ(d.text, "FDSTOREREMOVE=1\nFDNAME=kvoffload.region.0000000000000001.e.0");
    EXPECT_TRUE(d.fds.empty());
  }
}

TEST(FdStoreTest, RefusesBadNamesAndMissingManagers) {
  FakeManager manager;
  NotifySocketFdStore store(manager.address());
  EXPECT_EQ(store.Store("a:b", 0).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(store.Store("", 0).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(store.Remove(std::string(256, 'x')).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(store.Store("tab\there", 0).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(manager.Receive().text.empty());  // nothing was sent

  NotifySocketFdStore nobody("/tmp/kvo-no-such-dir/notify");
  EXPECT_EQ(nobody.Remove("x").code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(SendNotify("relative/path", "READY=1").code(), absl::StatusCode::kInvalidArgument);

  NoFdStore none;
  EXPECT_FALSE(none.enabled());
  EXPECT_TRUE(none.Store("x", 0).ok());
  EXPECT_EQ(none.Store("x:y", 0).code(), absl::StatusCode::kInvalidArgument);
}

TEST(FdStoreTest, FromEnvironmentFollowsNotifySocket) {
  unsetenv("NOTIFY_SOCKET");
  EXPECT_FALSE(FdStoreFromEnvironment()->enabled());
  setenv("NOTIFY_SOCKET", "/run/systemd/notify", 1);
  EXPECT_TRUE(FdStoreFromEnvironment()->enabled());
  unsetenv("NOTIFY_SOCKET");
}

TEST(FdStoreTest, NamesPairByEpochAndStayValid) {
  const std::string key = absl::StrCat(std::string(128, 'e'), "/4294967295");  // the longest
  const std::string region = StoredFdName(StoredKind::kRegion, 0xabcdef0123456789ull, key);
  const std::string state = StoredFdName(StoredKind::kState, 0xabcdef0123456789ull, key);
  EXPECT_TRUE(IsValidFdName(region));
  EXPECT_TRUE(IsValidFdName(state));
  EXPECT_LE(region.size(), 255u);
  EXPECT_EQ(StoredFdName(StoredKind::kRegion, 7, "vllm-0/1"),
            "kvoffload.region.0000000000000007.vllm-0.1");
  auto parsed = ParseStoredFdName(state);
  ASSERT_TRUE(parsed.has_value());
  EXPECT_EQ(parsed->kind, StoredKind::kState);
  EXPECT_EQ(parsed->region_epoch, 0xabcdef0123456789ull);
  EXPECT_EQ(ParseStoredFdName(region)->kind, StoredKind::kRegion);
  EXPECT_FALSE(ParseStoredFdName("stored").has_value());
  EXPECT_FALSE(ParseStoredFdName("kvoffload.state.12345.x").has_value());
  EXPECT_FALSE(ParseStoredFdName("kvoffload.state.000000000000000g.x").has_value());
}

TEST(FdStoreTest, ParseNotifyReadsFields) {
  auto f = ParseNotify("FDSTORE=1\nFDNAME=a=b\n\nnoise\nREADY=1");
  EXPECT_EQ(f["FDSTORE"], "1");
  EXPECT_EQ(f["FDNAME"], "a=b");
  EXPECT_EQ(f["READY"], "1");
  EXPECT_EQ(f.count("noise"), 0u);
}

// Puts memfds at 3 and 4 as a manager would, saving whatever the test process had there.
class ListenFdsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    for (int fd : {3, 4}) saved_.push_back(fcntl(fd, F_DUPFD_CLOEXEC, 100));
  }
  void TearDown() override {
    for (int i = 0; i < 2; ++i) {
      if (saved_[i] >= 0) {
        dup2(saved_[i], 3 + i);
        close(saved_[i]);
      } else {
        close(3 + i);
      }
    }
    unsetenv("LISTEN_PID");
    unsetenv("LISTEN_FDS");
    unsetenv("LISTEN_FDNAMES");
  }
  void Place(int target, const char* name) {
    const int fd = memfd_create(name, 0);
    ASSERT_GE(fd, 0);
    if (fd != target) {
      ASSERT_EQ(dup2(fd, target), target);
      close(fd);
    }
    inodes_.push_back(Inode(target));
  }
  std::vector<int> saved_;
  std::vector<ino_t> inodes_;
};

TEST_F(ListenFdsTest, TakesNamedDescriptorsAndClearsTheEnvironment) {
  Place(3, "a");
  Place(4, "b");
  setenv("LISTEN_PID", absl::StrCat(getpid()).c_str(), 1);
  setenv("LISTEN_FDS", "2", 1);
  setenv("LISTEN_FDNAMES", "kvoffload.state.0000000000000001.x:", 1);
  auto fds = TakeInheritedFds();
  ASSERT_TRUE(fds.ok()) << fds.status();
  ASSERT_EQ(fds->size(), 2u);
  EXPECT_EQ((*fds)[0].name, "kvoffload.state.0000000000000001.x");
  EXPECT_EQ((*fds)[1].name, "stored");  // an empty name is systemd's default
  EXPECT_EQ((*fds)[0].fd.get(), 3);
  EXPECT_EQ(Inode((*fds)[1].fd.get()), inodes_[1]);
  EXPECT_EQ(fcntl(3, F_GETFD) & FD_CLOEXEC, FD_CLOEXEC);
  EXPECT_EQ(getenv("LISTEN_PID"), nullptr);
  EXPECT_EQ(getenv("LISTEN_FDS"), nullptr);
  EXPECT_EQ(getenv("LISTEN_FDNAMES"), nullptr);
  for (InheritedFd& f : *fds) f.fd.release();  // TearDown restores 3 and 4
}

TEST_F(ListenFdsTest, IgnoresAnotherProcesssDescriptorsAndRefusesGarbage) {
  Place(3, "a");
  Place(4, "b");
  setenv("LISTEN_PID", absl::StrCat(getpid() + 1).c_str(), 1);
  setenv("LISTEN_FDS", "2", 1);
  ASSERT_EQ(fcntl(3, F_GETFD) & FD_CLOEXEC, 0);
  auto fds = TakeInheritedFds();
  ASSERT_TRUE(fds.ok());
  EXPECT_TRUE(fds->empty());
  // Left open (not ours), but never inherited by our children.
  EXPECT_EQ(fcntl(3, F_GETFD) & FD_CLOEXEC, FD_CLOEXEC);
  EXPECT_EQ(fcntl(4, F_GETFD) & FD_CLOEXEC, FD_CLOEXEC);
  EXPECT_EQ(getenv("LISTEN_FDS"), nullptr);

  setenv("LISTEN_PID", absl::StrCat(getpid()).c_str(), 1);
  setenv("LISTEN_FDS", "two", 1);
  EXPECT_EQ(TakeInheritedFds().status().code(), absl::StatusCode::kInvalidArgument);

  setenv("LISTEN_PID", absl::StrCat(getpid()).c_str(), 1);
  setenv("LISTEN_FDS", "200", 1);  // 5.. are not all open
  EXPECT_EQ(TakeInheritedFds().status().code(), absl::StatusCode::kInvalidArgument);

  auto none = TakeInheritedFds();  // nothing set any more
  ASSERT_TRUE(none.ok());
  EXPECT_TRUE(none->empty());
}

}  // namespace
}  // namespace kvoffload::daemon
